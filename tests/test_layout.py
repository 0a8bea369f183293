"""The README's layout table names every source file, and no source file grows past ~400 lines (the project's
rule), so a newcomer finds where a fact lives from the table alone."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("hpcc_contract", "infra", "hpcc_node", "policy", "scripts", "templates")
MAX_LINES = 400


def _tracked(*folders: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "--", *folders], cwd=ROOT, capture_output=True, text=True, check=True)
    return [
        line
        for line in out.stdout.splitlines()
        if not line.endswith(("__init__.py", "requirements.txt")) and (ROOT / line).is_file()
    ]


def _layout_table() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return "\n".join(line for line in section.splitlines() if line.startswith("|"))


def _named(path: str, table: str) -> bool:
    """By its path, its name (rows shorten `infra/plan/x.py, y.py`), or a step by its name in the steps' row."""
    p = Path(path)
    step = p.name.removesuffix(".sh.j2")
    return (
        path in table
        or f"`{p.name}`" in table
        or (p.parent.name == "steps" and f"`{step}`" in table)
        or (p.name == "__main__.py" and p.parent.name == "policy")
    )  # the pack's entry point, named as policy/


def test_the_layout_table_names_every_source_file():
    table = _layout_table()
    missing = [f for f in _tracked(*SOURCES) if not _named(f, table)]
    assert not missing, f"README.md's layout table does not name: {', '.join(missing)}; add a row or a name to one"


def test_no_source_file_is_over_400_lines():
    long = {
        f: n
        for f in _tracked("hpcc_contract", "infra", "hpcc_node", "policy", "scripts")
        if f.endswith(".py") and (n := len((ROOT / f).read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"over {MAX_LINES} lines, split by concern: {long}"


def test_the_table_row_of_a_folder_entry_matches_a_folder():
    """Folder rows (`infra/program/components/`, `templates/steps/`, ...) name folders that exist."""
    folders = set(re.findall(r"`([a-z_/]+/)`", _layout_table()))
    assert folders and all((ROOT / f).is_dir() for f in folders), folders
