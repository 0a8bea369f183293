#!/usr/bin/env python3
"""`make golden`: re-render tests/golden/<example>-<role>.sh from the templates, for review in the diff."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.bootstrap_cases import GOLDEN, cases  # noqa: E402

GOLDEN.mkdir(parents=True, exist_ok=True)
for name, script in cases():
    (GOLDEN / f"{name}.sh").write_text(script)
    print(f"wrote tests/golden/{name}.sh")
