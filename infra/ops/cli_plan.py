"""`hpcc plan`: the Pulumi program run offline against an embedded AWS (moto), and what it would create written
(infra/ops/cli.py registers it with the other commands)."""

from __future__ import annotations

from pathlib import Path

import typer

from hpcc_contract.names import image_pin
from infra.config.parse import ConfigError
from infra.config.stackfile import load, read_raw
from infra.ops.cli_report import config_error, fail
from infra.ops.project import stack_from_file


def plan(
    config: Path = typer.Argument(..., help="stack config file (Pulumi.<stack>.yaml format)"),
    out: Path = typer.Option(Path("plan"), "--out", help="directory for resources.json, outputs.json, user-data/"),
    stack: str = typer.Option(
        None,
        "--stack",
        help="stack name to plan as (default: <stack> of a "
        "Pulumi.<stack>.yaml file, else dev: offline it only names the URNs)",
    ),
    previous: Path | None = typer.Option(
        None,
        "--previous",
        help="an earlier plan's --out directory: also write changes.json, what a second `pulumi up` would do",
    ),
    update_image: bool = typer.Option(
        False,
        "--update-image",
        help="with --previous: resolve the image again "
        "(as `hpcc up --update-image`), not keep the one the earlier plan had",
    ),
):
    """Offline, no AWS account: what would be created, the cost per hour, every warning."""
    from infra.ops.plan_summary import print_changes, print_summary  # lazy: pulumi, moto
    from infra.plan.previous import PreviousPlan, PreviousPlanError  # lazy: pulumi, moto
    from infra.plan.runner import PlanError, plan_stack_file, plan_update_image  # lazy: pulumi, moto

    if update_image and previous is None:
        raise fail("--update-image compares with an earlier plan: give --previous DIR too")
    try:
        earlier = PreviousPlan.load(previous) if previous is not None else None
        stack = stack or stack_from_file(config) or "dev"
        if update_image:
            result = plan_update_image(read_raw(config), earlier, image_pin(load(config).cluster.name), stack=stack)
        else:
            result = plan_stack_file(config, stack=stack, previous=earlier)
    except PreviousPlanError as e:
        raise fail(str(e)) from None
    except ConfigError as e:
        raise config_error(e) from None
    except PlanError as e:
        raise fail(str(e)) from None
    result.write(out)
    print_summary(result, out, stack_file=str(config))
    if earlier is not None:
        print_changes(result, out, str(previous), previous_outputs=earlier.outputs)
