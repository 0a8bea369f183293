"""How the `hpcc` commands report a failure: a message and a non-zero exit, never a traceback."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

from infra.config.parse import ConfigError

err = Console(stderr=True)


def fail(message: str, code: int = 2) -> typer.Exit:
    # Messages carry the user's text (filters, tags, patterns like [a-z_]): never read them as rich markup.
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


def config_error(e: ConfigError) -> typer.Exit:
    for path, msg in e.problems:
        err.print(f"[bold red]error:[/] {escape(path)}: {escape(msg)}", highlight=False)
    return typer.Exit(2)
