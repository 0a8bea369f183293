#!/usr/bin/env python3
"""`make golden`: re-write tests/golden/<example>-<role>.sh, one per role, from the offline plan's user data
(tests/bootstrap_cases.py), for review in the diff."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.bootstrap_cases import GOLDEN, golden_path, planned_scripts  # noqa: E402

GOLDEN.mkdir(parents=True, exist_ok=True)
for stale in GOLDEN.glob("*.sh"):
    stale.unlink()
for role, script in sorted(planned_scripts().items()):
    golden_path(role).write_text(script)
    print(f"wrote {golden_path(role).relative_to(GOLDEN.parent.parent)}")
