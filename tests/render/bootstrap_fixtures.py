"""The bootstrap tests' stand-in tools: `tool` writes one into a bin dir, and the `fake` fixture puts a scripted `aws`
first on PATH. A pytest plugin of the whole suite (tests/conftest.py), so the node tests that run the bootstrap's
key steps get `fake` too."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest


def tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def fake(tmp_path):
    """A bin dir first on PATH; `aws` answers from tmp/answers (one `rc|output` a call, the last one repeats)
    and records each call's arguments in tmp/calls, and each PutObject's body in tmp/bodies."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool(
        bin_dir,
        "aws",
        f"""echo "$*" >>{tmp_path}/calls
n=$(wc -l <{tmp_path}/calls); line=$(sed -n "${{n}}p" {tmp_path}/answers)
[ -n "$line" ] || line=$(tail -n1 {tmp_path}/answers)
prev=""; for a in "$@"; do [ "$prev" != --secret-string ] || cp "${{a#file://}}" {tmp_path}/stored-key
  [ "$prev" != --body ] || {{ cat "$a"; echo; }} >>{tmp_path}/bodies; prev=$a; done
echo "${{line#*|}}"; exit "${{line%%|*}}"
""",
    )
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return tmp_path, bin_dir, env
