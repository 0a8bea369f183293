"""How `hpcc reap` and `hpcc destroy` show an inventory (infra/ops/reap/run.py finds and deletes; it never prints)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from infra.ops.reap.kinds import Inventory
from infra.ops.terminal import row


def table(inv: Inventory, title: str) -> Table:
    """One row per resource: kind, id, name, and what happened to it (red when it failed)."""
    t = Table(title=title, title_justify="left")
    for col in ("kind", "id", "name", "result"):
        t.add_column(col, overflow="fold")
    for it in inv.items:
        style = "red" if it.failed else ("green" if it.result == "deleted" else "")
        row(t, it.kind, it.id, it.name, Text(it.result, style=style))  # names are tags anyone may have set
    return t


def print_notes(console: Console, inv: Inventory) -> None:
    """What the inventory could not list or do itself (a placement group to delete by hand, ...)."""
    for note in inv.notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)
