"""`hpcc`: the offline plan and the operator commands. Bad input exits non-zero with a message, never a traceback.

Commands are listed in the order of the work (WORKFLOW). Every command that acts on a cluster takes it the same
way: its stack file (`hpcc status Pulumi.llm.yaml`), `--cluster NAME` or `--stack NAME` (infra/ops/project.py
target). `up` and `destroy` ask before they spend money or delete data; `--yes` answers for scripts, and without a
terminal and without `--yes` they refuse.

Each command imports the modules that load boto3, pulumi or moto when it runs (the imports marked `# lazy`): all of
them take some 2 s to load, which `hpcc --help` or a mistyped option should not wait for (0.7 s without)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from infra.config.stackfile import load
from infra.ops import cli_cluster
from infra.ops import cli_support as support
from infra.ops.check_cli import PROVIDERS, run_fabric_check
from infra.ops.check_cli import app as check_app
from infra.ops.cli_images import app as images_app
from infra.ops.cli_pins import app as pin_app
from infra.ops.cli_plan import plan
from infra.ops.cli_report import err, fail
from infra.ops.cli_support import version
from infra.ops.deployer_guard import render_guard, shipped_guard
from infra.ops.project import ProjectError, init_project

# The order `hpcc --help` lists the commands in: set up, look, create, use, operate, tear down.
WORKFLOW = (
    "init",
    "deployer-policy",
    "plan",
    "pin",
    "preflight",
    "up",
    "ssh",
    "status",
    "events",
    "top",
    "dashboard",
    "hostfile",
    "check",
    "images",
    "replace",
    "rotate-keys",
    "destroy",
    "reap",
)


class _InWorkflowOrder(TyperGroup):
    def list_commands(self, ctx) -> list[str]:
        names = super().list_commands(ctx)
        return sorted(names, key=lambda n: WORKFLOW.index(n) if n in WORKFLOW else len(WORKFLOW))


app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=_InWorkflowOrder,
    help="Provision and operate multi-node ML training clusters on AWS.",
)
app.add_typer(check_app, name="check")
app.add_typer(images_app, name="images")
app.add_typer(pin_app, name="pin")


def _show_version(value: bool) -> None:
    if value:
        print(f"hpcc {version()}")
        raise typer.Exit()


@app.callback()
def _group(
    show_version: bool = typer.Option(
        False, "--version", callback=_show_version, is_eager=True, help="print hpcc's version and exit"
    ),
) -> None:
    """Provision and operate multi-node ML training clusters on AWS (see `hpcc COMMAND --help`)."""


# -- set up -------------------------------------------------------------------------------------------------


@app.command()
def init(
    directory: Path = typer.Argument(..., help="the new project's directory (created if missing)"),
    example: str = typer.Option(
        "p5-llm",
        "--example",
        help="the example the stack file starts from: p5-llm, p5-capacity-block, p3dn-bert, c6i-oneccl",
    ),
    stack: str = typer.Option(None, "--stack", help="stack name (default: the example's cluster name)"),
    refresh: bool = typer.Option(
        False,
        "--refresh",
        help="only point an existing project's program and policy pack at this hpcc (after installing it elsewhere)",
    ),
):
    """Write a Pulumi project of your own that runs this hpcc: Pulumi.yaml, a stack file, a .gitignore, a README."""
    try:
        written = init_project(directory, example, stack, refresh=refresh)
    except ProjectError as e:
        raise fail(str(e)) from None
    for f in written.files:
        print(f"wrote {f}")
    if not refresh:
        print(f"next: cd {directory} && hpcc plan Pulumi.{written.stack}.yaml   (then README.md there)")


@app.command("deployer-policy")
def deployer_policy(
    guard: bool = typer.Option(
        False,
        "--guard",
        help="print instead the Deny to attach to every "
        "other principal: only the deployer and the nodes' roles write what "
        "the cluster trusts (docs/security.md)",
    ),
    account: str = typer.Option(None, "--account", help="with --guard: your account id"),
    deployer_role: str = typer.Option(None, "--deployer-role", help="with --guard: the role that runs hpcc up"),
) -> None:
    """Print the least-privilege IAM policy for whoever runs `hpcc up` (attach it to your deploying user or role)."""
    from infra.ops.deployer_policy import shipped  # lazy: pulumi, moto

    if not guard:
        sys.stdout.write(shipped())
    elif account or deployer_role:
        sys.stdout.write(render_guard(account or "<account>", deployer_role or "<deploying role>"))
    else:
        sys.stdout.write(shipped_guard())


# -- look before anything exists ----------------------------------------------------------------------------


app.command()(plan)  # hpcc plan (infra/ops/cli_plan.py)


@app.command()
def preflight(
    config: Path = typer.Argument(..., help="stack config file (Pulumi.<stack>.yaml format)"),
    emulate: bool = typer.Option(False, "--emulate", help="check against the embedded AWS (moto) instead"),
):
    """Against your account: quotas, capacity, AZ, EFA, placement, the image; placeholders left in are errors."""
    from infra.ops.aws import Aws  # lazy: boto3
    from infra.ops.preflight.rules import has_errors, print_findings  # lazy: boto3
    from infra.ops.preflight.rules import preflight as run_preflight  # lazy: boto3

    cfg = support.ops(lambda: load(config))

    def run():
        if emulate:
            from infra.plan.embedded_aws import embedded_aws  # lazy: pulumi, moto

            with embedded_aws(cfg.region):
                return run_preflight(Aws(cfg.region), cfg)
        return run_preflight(Aws(cfg.region), cfg)

    findings = support.ops(run)
    print_findings(Console(), findings)
    if has_errors(findings):
        raise typer.Exit(1)


# -- create and change --------------------------------------------------------------------------------------


@app.command()
def up(
    config: Path = typer.Argument(..., help="stack config file (Pulumi.<stack>.yaml format)"),
    stack: str = typer.Option(
        None, "--stack", help="Pulumi stack name (default: <stack> of a Pulumi.<stack>.yaml file)"
    ),
    yes: bool = typer.Option(
        False,
        "--yes",
        "-y",
        help="apply without asking (scripts); without it `up` shows the change and its cost per hour, then asks",
    ),
    preview_only: bool = typer.Option(
        False, "--preview-only", help="preflight and preview, show the change and its cost, change nothing"
    ),
    hostfile_out: Path = typer.Option(Path("hostfile"), "--hostfile", help="where to write the hostfile"),
    wait_minutes: float = typer.Option(
        None,
        "--wait-minutes",
        help="how long to wait for the nodes (default: the "
        "groups' launch time, then the longer of the bootstrap timeout and the "
        "controller's 30-minute boot grace, the bootstrap timeout again, and 5 "
        "minutes; up prints it)",
    ),
    skip_preflight: bool = typer.Option(False, "--skip-preflight", help="do not run preflight first"),
    allow_replace: bool = typer.Option(
        False,
        "--allow-replace",
        help="go ahead when the preview replaces or deletes an instance, subnet, placement group or the file system",
    ),
    update_image: bool = typer.Option(
        False,
        "--update-image",
        help="resolve the image again (replaces the image pin; new instances need --allow-replace)",
    ),
    check: bool = typer.Option(
        False, "--check", help="once every node is ready, `hpcc check fabric` over them (exit 1 when it names a node)"
    ),
    check_provider: str = typer.Option(
        "efa", "--check-provider", help="the check's libfabric provider: efa, or tcp for nodes without EFA"
    ),
):
    """Create or change the cluster: preflight, preview (the change and its cost, then asks), `pulumi up`, wait."""
    from infra.ops.up import up as run_up  # lazy: boto3

    if check_provider not in PROVIDERS:  # before anything runs
        raise fail(f"--check-provider must be efa or tcp; got {check_provider!r}")
    stack = support.stack_of(config, stack)
    confirm = support.asker(yes, ", or --preview-only to only look")
    report = support.ops(
        lambda: run_up(
            config,
            stack,
            hostfile_path=hostfile_out,
            skip_preflight=skip_preflight,
            wait_seconds=None if wait_minutes is None else wait_minutes * 60,
            allow_replace=allow_replace,
            update_image=update_image,
            confirm=confirm,
            preview_only=preview_only,
        )
    )
    if not report.ok:
        raise typer.Exit(1)
    if check and report.readiness is not None:
        Console().print(f"checking the fabric of {escape(report.cluster)} (hpcc check fabric)")
        run_fabric_check(report.cluster, report.region, provider=check_provider)


# -- use and operate ----------------------------------------------------------------------------------------


# -- use and operate: infra/ops/cli_cluster.py -------------------------------------------------------------
for _name, _command in (
    ("ssh", cli_cluster.ssh),
    ("status", cli_cluster.status),
    ("events", cli_cluster.events),
    ("top", cli_cluster.top),
    ("dashboard", cli_cluster.dashboard),
    ("hostfile", cli_cluster.hostfile),
    ("replace", cli_cluster.replace),
    ("rotate-keys", cli_cluster.rotate_keys),
    ("reap", cli_cluster.reap),
):
    app.command(_name)(_command)


# -- tear down ----------------------------------------------------------------------------------------------


@app.command()
def destroy(
    config: Path = typer.Argument(..., help="stack config file (Pulumi.<stack>.yaml format)"),
    stack: str = typer.Option(
        None, "--stack", help="Pulumi stack name (default: <stack> of a Pulumi.<stack>.yaml file)"
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="delete without asking (scripts)"),
):
    """Delete the cluster, its file system and the data on it (asks first), then list anything left."""
    from infra.ops.up import destroy as run_destroy  # lazy: boto3

    stack = support.stack_of(config, stack)
    left = support.ops(lambda: run_destroy(config, stack, confirm=support.asker(yes, "")))
    if left.items:
        raise typer.Exit(1)


def main() -> None:
    from botocore.exceptions import BotoCoreError, ClientError  # lazy: boto3

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
