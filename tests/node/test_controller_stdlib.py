"""The controller ships in the bundle and runs on the head's own Python: standard library only (AWS clients are
injected), and syntax Python 3.8 parses (the oldest interpreter the images carry)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "hpcc_node" / "controller").rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_the_controller_imports_only_the_standard_library_and_its_own_package(path):
    tree = ast.parse(path.read_text(), feature_version=(3, 8))
    outside = []
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
        outside += [n for n in names if n.split(".")[0] not in sys.stdlib_module_names and
                    n.split(".")[0] not in ("hpcc_node", "hpcc_contract", "__future__")]
    assert not outside, f"{path.name} imports {outside}: inject the client instead"
