"""enroot's two commands the shared image cache runs (https://github.com/NVIDIA/enroot, doc/cmd/import.md; `enroot
digest` since 4.0): `enroot digest URI` (the platform's manifest digest) and `enroot import --output FILE URI@DIGEST`,
each run with its arguments as a list, never through a shell, and bounded in time. A failure is ImportFailed with the
last lines enroot wrote. `env` is the child's whole environment when given: the image service's, with root's
ENROOT_CONFIG_PATH (service.py root_enroot); the command line (`python3 -m hpcc_node.containers`) passes none."""

from __future__ import annotations

import subprocess
import sys
from typing import Dict, Optional

from hpcc_contract import containers as c
from hpcc_node.containers.cache import ImportFailed

ENROOT = "enroot"
DIGEST_TIMEOUT_S = 120
IMPORT_TIMEOUT_S = 3 * 3600


def _tail(text: str) -> str:
    return " ".join(text.strip().splitlines()[-3:])[:400]


def enroot_digest(ref: c.ImageRef, env: Optional[Dict[str, str]] = None) -> str:
    """The manifest digest of `ref` for this node's architecture (enroot picks it from a manifest list)."""
    done = subprocess.run(
        [ENROOT, "digest", "--", ref.enroot_uri()],
        capture_output=True,
        text=True,
        timeout=DIGEST_TIMEOUT_S,
        check=False,
        env=env,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise ImportFailed(f"enroot digest {ref.canonical}: exit {done.returncode}: {_tail(done.stderr)}")
    return c.check_digest(lines[-1].strip())


def enroot_import(ref: c.ImageRef, digest: str, dest: str, env: Optional[Dict[str, str]] = None) -> None:
    """`enroot import` pinned to `digest`, into `dest` (which must not exist: enroot refuses to overwrite); enroot's
    progress goes to this process's stderr."""
    done = subprocess.run(
        [ENROOT, "import", "--output", dest, "--", ref.enroot_uri(digest)],
        stdout=sys.stderr,
        stderr=subprocess.PIPE,
        text=True,
        timeout=IMPORT_TIMEOUT_S,
        check=False,
        env=env,
    )
    if done.returncode != 0:
        raise ImportFailed(f"enroot import {ref.canonical}: exit {done.returncode}: {_tail(done.stderr)}")
