"""Every `module.name` the project's own code and tests spell names something the module has.

The box scenarios run only in CI's long step (make test-long): a rename that leaves `certstore.names(...)` behind in
a box test was found there, after a 5-minute boot, instead of here in seconds. This reads every source file's
imports of the project's modules and checks each attribute read off them, and each `from module import name`, against
the module itself. A name the file binds some other way too (an argument, an assignment) is left alone: it may not be
the module where it is read."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ("hpcc_contract", "hpcc_node", "infra", "policy", "tests", "scripts")


def _sources() -> list[Path]:
    return sorted(p for top in PROJECT for p in (ROOT / top).rglob("*.py") if ".venv" not in p.parts)


def _ours(module: str) -> bool:
    return module.split(".")[0] in PROJECT


def _module(name: str):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _bound_otherwise(tree: ast.AST) -> set[str]:
    """Names the file binds other than by importing: those may hold something else where they are read."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound


def stale_references(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    aliases: dict[str, str] = {}  # local name -> the project module it names
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _ours(alias.name) and alias.asname:
                    aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and _ours(node.module):
            parent = _module(node.module)
            for alias in node.names:
                if alias.name == "*":
                    continue
                local = alias.asname or alias.name
                if _module(f"{node.module}.{alias.name}") is not None:
                    aliases[local] = f"{node.module}.{alias.name}"
                elif parent is not None and not hasattr(parent, alias.name):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.module} has no {alias.name}")
    for name in _bound_otherwise(tree):
        aliases.pop(name, None)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            module = _module(aliases[node.value.id])
            if module is not None and not hasattr(module, node.attr):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {aliases[node.value.id]} has no {node.attr}")
    return found


@pytest.mark.parametrize("top", PROJECT)
def test_every_attribute_read_off_a_project_module_exists(top):
    found = [line for p in _sources() if p.relative_to(ROOT).parts[0] == top for line in stale_references(p)]
    assert not found, "\n".join(found)


def test_a_stale_reference_is_found(tmp_path, monkeypatch):
    """The check itself: a renamed function left behind, read off a module and imported by name."""
    monkeypatch.setattr("tests.test_references.ROOT", tmp_path)
    source = tmp_path / "stale.py"
    source.write_text(
        "from hpcc_node import certstore\nfrom hpcc_contract.names import no_such_name\n\n"
        "def f(bucket):\n    return certstore.names(bucket), certstore.get\n"
    )
    assert stale_references(source) == [
        "stale.py:2: hpcc_contract.names has no no_such_name",
        "stale.py:5: hpcc_node.certstore has no names",
    ]
