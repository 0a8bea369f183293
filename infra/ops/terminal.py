"""Text for the operator's terminal: every cell of every table the commands print goes through `row`, so what a
node, a tag or a parameter holds is shown as data, never as rich markup (`[link=...]`, `[/oops]`) or as terminal
control (CSI, OSC 0/8/52: titles, hyperlinks, the clipboard)."""

from __future__ import annotations

import re

from rich.table import Table
from rich.text import Text

_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI (colours, cursor moves, screen clears)
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC (titles, hyperlinks, clipboard)
    r"|\x1b[@-Z\\-_]"  # other two-byte escapes
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
)  # remaining control characters (tab kept)


def plain(value: object) -> str:
    """`value` as text with terminal escape sequences and control characters removed."""
    return _ESCAPES.sub("", str(value))


def cell(value: object, style: str = "") -> Text:
    """One table cell: a Text (so `[`...`]` is printed, not parsed) of the cleaned text; a Text keeps its styles."""
    if isinstance(value, Text):
        cleaned = plain(value.plain)
        return value.copy() if cleaned == value.plain else Text(cleaned, style=value.style)
    return Text(plain("-" if value is None else value), style=style)


def row(table: Table, *values: object) -> None:
    """`table.add_row` with every value made a cleaned cell."""
    table.add_row(*(cell(v) for v in values))
