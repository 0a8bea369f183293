"""`hpcc pin containers [STACK_FILE] [--all] [--json]`: enroot's release digests from GitHub's release API, printed
as the stack file's containers.releaseDigests to paste (infra/ops/pins.py). Bad input exits 2, a failed fetch 1,
each with a message, never a traceback. Registered on the app by infra/ops/cli.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer

from infra.config.stackfile import load
from infra.config.validators.type_rules import resolve_types
from infra.facts import containers as facts
from infra.facts.instance_types import ec2_facts
from infra.ops import OpsError, pins
from infra.ops import cli_support as support
from infra.ops.cli_report import fail

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Pins the stack file holds, read from their source (`hpcc pin containers`).",
)


def getter() -> pins.Getter:
    """How the release is fetched (the one seam the tests replace)."""
    return pins.urllib_get


def stack_arches(config: Path) -> tuple[str, ...]:
    """The architectures of the stack's head and node groups, from their types as the offline plan knows them
    (moto's EC2 data: no AWS call, no credentials)."""
    from infra.plan.embedded_aws import embedded_aws  # lazy: moto

    cfg = load(config)
    with embedded_aws(cfg.region):
        types, problems = resolve_types(cfg, ec2_facts(cfg.region))
    if problems:
        raise OpsError(f"{problems[0].field}: {problems[0].message} (or pass --all for every architecture)")
    arches = pins.stack_arches(types.values())
    if not arches:
        raise OpsError(f"the stack's types run no architecture enroot has packages for ({', '.join(facts.DEB_ARCH)})")
    return arches


@app.command()
def containers(
    config: Path = typer.Argument(
        None, metavar="STACK_FILE", help="the stack file: the digests for its head's and node groups' architectures"
    ),
    all_arches: bool = typer.Option(False, "--all", help="both architectures (amd64 and arm64), no stack file read"),
    as_json: bool = typer.Option(False, "--json", help="the name -> digest mapping as JSON"),
):
    """enroot's .deb digests (GitHub's release API's record of each uploaded asset) as containers.releaseDigests to
    paste into the stack file: each node checks its download against them. GITHUB_TOKEN, if set, is sent as the
    Authorization header only (a higher rate limit) and never printed."""
    if config is None and not all_arches:
        raise fail("give the stack file (its nodes' architectures), or --all for amd64 and arm64")
    arches = tuple(facts.DEB_ARCH) if all_arches else support.ops(lambda: stack_arches(config))
    digests = support.ops(lambda: pins.pin_containers(arches, getter(), os.environ))
    if as_json:
        print(json.dumps(digests, indent=1))
    else:
        print(pins.snippet(digests), end="")
