"""`hpcc`: the offline plan and the operator commands. Bad input exits non-zero with a message, never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console

from infra.config import ConfigError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Provision and operate multi-node ML training clusters on AWS.")
err = Console(stderr=True)


@app.callback()
def _group() -> None:
    """Keeps `hpcc <command>` a command group even while it has one command."""


def fail(message: str, code: int = 2) -> "typer.Exit":
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    return typer.Exit(code)


def config_error(e: ConfigError) -> "typer.Exit":
    for path, msg in e.problems:
        err.print(f"[bold red]error:[/] {path}: {msg}", highlight=False)
    return typer.Exit(2)


@app.command()
def plan(config: Path = typer.Argument(..., help="stack config file (Pulumi.<stack>.yaml format)"),
         out: Path = typer.Option(Path("plan"), "--out", help="directory for resources.json, outputs.json, user-data/"),
         stack: str = typer.Option("dev", "--stack", help="stack name to plan as")):
    """Run the Pulumi program offline against an embedded AWS (moto) and write what it would create."""
    from infra.plan.runner import PlanError, plan_stack_file
    from infra.plan.summary import print_summary

    try:
        result = plan_stack_file(config, stack=stack)
    except ConfigError as e:
        raise config_error(e) from None
    except PlanError as e:
        raise fail(str(e)) from None
    result.write(out)
    print_summary(result, out)


def main() -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except (BotoCoreError, ClientError) as e:  # credentials, network, permissions: say so, no traceback
        err.print(f"[bold red]error:[/] AWS: {e}", highlight=False)
        sys.exit(1)


if __name__ == "__main__":
    main()
