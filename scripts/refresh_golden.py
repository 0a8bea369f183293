#!/usr/bin/env python3
"""`make golden`: re-write tests/golden/ from the offline plan's user data (tests/render/bootstrap_cases.py): the
compute script in full and the head's as a diff against it, for review in the diff."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.render.bootstrap_cases import GOLDEN, golden_path, golden_texts, planned_scripts  # noqa: E402 - after sys.path gets the checkout

GOLDEN.mkdir(parents=True, exist_ok=True)
texts = golden_texts(planned_scripts())  # before anything is removed: a failing plan leaves the files as they were
for stale in GOLDEN.iterdir():
    stale.unlink()
for role, text in sorted(texts.items()):
    golden_path(role).write_text(text)
    print(f"wrote {golden_path(role).relative_to(GOLDEN.parent.parent)}")
