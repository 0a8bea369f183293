"""`hpcc`: the offline plan and the operator commands. Bad input exits non-zero with a message, never a traceback.

Each command imports the modules that load boto3, pulumi or moto when it runs (the imports marked `# lazy`): all of
them take some 2 s to load, which `hpcc --help` or a mistyped option should not wait for (0.7 s without)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from hpcc_contract.formats import NewerFormat
from hpcc_contract.hostfile import FORMATS
from infra.config.parse import ConfigError
from infra.config.stackfile import load
from infra.ops import OpsError
from infra.ops.check_cli import PROVIDERS, run_fabric_check
from infra.ops.check_cli import app as check_app
from infra.ops.cli_plan import plan
from infra.ops.cli_report import config_error, err, fail
from infra.ops.project import ProjectError, init_project, stack_name

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Provision and operate multi-node ML training clusters on AWS.",
)


app.add_typer(check_app, name="check")  # hpcc check fabric (infra/ops/check_cli.py)
app.command()(plan)  # hpcc plan (infra/ops/cli_plan.py)


@app.callback()
def _group() -> None:
    """Provision and operate multi-node ML training clusters on AWS (see `hpcc COMMAND --help`)."""


# -- operator commands (infra/ops) --------------------------------------------------------------------------


def _ops(fn):
    """Run an operator command; known failures become a message and a non-zero exit, never a traceback."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return fn()
    except ConfigError as e:
        raise config_error(e) from None
    except OpsError as e:
        raise fail(str(e), 1) from None
    except NewerFormat as e:  # the ledger or a document of the cluster's, written by a newer hpcc
        raise fail(f"{e}", 1) from None
    except ClientError as e:
        raise fail(f"AWS refused: {e}", 1) from None
    except BotoCoreError as e:
        raise fail(f"cannot talk to AWS: {e} (check credentials, --region and the network)", 1) from None


def _stack(config: Path, given: str | None) -> str:
    """--stack, else the file's own stack (Pulumi.<stack>.yaml); a usage error (exit 2) when neither says."""
    try:
        return stack_name(config, given)
    except ProjectError as e:
        raise fail(str(e)) from None


def _aws(region: str | None):
    from infra.ops.aws import Aws  # lazy: boto3

    return Aws(region)


def _stack_cluster(stack: str | None, cluster: str | None, region: str | None) -> tuple[str, str | None]:
    if bool(stack) == bool(cluster):
        raise fail("give exactly one of --cluster NAME or --stack NAME")
    if cluster:
        return cluster, region
    from infra.ops.up import stack_outputs  # lazy: boto3

    outputs = _ops(lambda: stack_outputs(stack))
    return outputs["clusterName"], region or outputs.get("region")


@app.command()
def preflight(
    config: Path = typer.Argument(..., help="stack config file (Pulumi.<stack>.yaml format)"),
    emulate: bool = typer.Option(False, "--emulate", help="check against the embedded AWS (moto) instead"),
):
    """Check quotas, capacity, AZ offerings, EFA, placement and the image before anything is created."""
    from infra.ops.aws import Aws  # lazy: boto3
    from infra.ops.preflight.rules import has_errors, print_findings  # lazy: boto3
    from infra.ops.preflight.rules import preflight as run_preflight  # lazy: boto3

    cfg = _ops(lambda: load(config))

    def run():
        if emulate:
            from infra.plan.embedded_aws import embedded_aws  # lazy: pulumi, moto

            with embedded_aws(cfg.region):
                return run_preflight(Aws(cfg.region), cfg)
        return run_preflight(Aws(cfg.region), cfg)

    findings = _ops(run)
    print_findings(Console(), findings)
    if has_errors(findings):
        raise typer.Exit(1)


@app.command()
def status(
    cluster: str = typer.Option(None, "--cluster", help="cluster name (its hpcc:cluster tag)"),
    stack: str = typer.Option(None, "--stack", help="Pulumi stack whose clusterName output to use (needs the CLI)"),
    region: str = typer.Option(None, "--region", help="AWS region (default: AWS_REGION or your profile's)"),
):
    """Per group asked/launched/ready/failed/being replaced/protected, the controller's recent actions and alerts,
    and each node's instance, ledger state, bootstrap phase and membership generation."""
    from infra.ops.status.cluster import cluster_status  # lazy: boto3
    from infra.ops.status.view import show  # lazy: boto3

    name, region = _stack_cluster(stack, cluster, region)
    found = _ops(lambda: cluster_status(_aws(region), name))
    if not found.nodes and not found.groups:
        raise fail(f"nothing tagged hpcc:cluster={name} found; check the name and --region", 1)
    show(Console(), found)
    if any(r.failed for r in found.nodes) or found.alerts or found.controller_down:
        raise typer.Exit(1)


@app.command()
def events(
    cluster: str = typer.Option(..., "--cluster", help="cluster name (its hpcc:cluster tag)"),
    node: list[str] = typer.Option(None, "--node", help="only this node or group (repeatable)"),
    kind: list[str] = typer.Option(None, "--kind", help="only this action: down, drain, replace, ... (repeatable)"),
    since: int = typer.Option(
        None, "--since-minutes", min=1, help="only the last N minutes (default: all the ledger keeps, a day)"
    ),
    region: str = typer.Option(None, "--region", help="AWS region (default: AWS_REGION or your profile's)"),
):
    """Every action the controller took and kept (a day): when, what, on which node or group, and why."""
    from infra.ops.events import cluster_events  # lazy: boto3
    from infra.ops.status.view import events_table  # lazy: boto3

    found = _ops(lambda: cluster_events(_aws(region), cluster, since * 60 if since else None, node or (), kind or ()))
    if not found:
        Console().print(f"no action of the controller recorded for {escape(cluster)} with these filters")
        return
    Console().print(events_table(found, "the controller's actions (ledger events, UTC)"))


@app.command()
def hostfile(
    cluster: str = typer.Option(..., "--cluster", help="cluster name (its hpcc:cluster tag)"),
    fmt: str = typer.Option("openmpi", "--format", help=" | ".join(FORMATS)),
    group: list[str] = typer.Option(None, "--group", help="only this node group (repeatable; default: all)"),
    region: str = typer.Option(None, "--region", help="AWS region (default: AWS_REGION or your profile's)"),
    out: Path = typer.Option(None, "--out", help="write here instead of stdout"),
):
    """The ready compute nodes' hostfile, from the membership the controller published (all groups, or --group)."""
    from infra.ops.hostfile import format_problem, render  # lazy: boto3

    problem = format_problem(fmt)
    if problem:  # a usage error (exit 2), found before any AWS call
        raise fail(problem)
    text = _ops(lambda: render(_aws(region), cluster, fmt, groups=group or None))
    if out:
        out.write_text(text)
    else:
        sys.stdout.write(text)


@app.command()
def reap(
    cluster: str = typer.Option(..., "--cluster", help="cluster name (its hpcc:cluster tag)"),
    region: str = typer.Option(None, "--region", help="AWS region (default: AWS_REGION or your profile's)"),
    yes: bool = typer.Option(False, "--yes", help="really delete (default: dry run, list only)"),
):
    """Delete everything tagged for a cluster, in dependency order (for when `pulumi destroy` cannot)."""
    from infra.ops.reap.report import print_notes, table  # lazy: boto3
    from infra.ops.reap.run import reap as run_reap  # lazy: boto3

    out = Console()
    inv = _ops(
        lambda: run_reap(
            _aws(region),
            cluster,
            yes=yes,
            on_step=lambda kind, items: out.print(f"deleting {len(items)} {kind}(s)", highlight=False),
        )
    )
    if inv.empty:
        out.print(f"nothing tagged hpcc:cluster={cluster} in {inv.region}", highlight=False)
    else:
        out.print(table(inv, f"hpcc:cluster={cluster} in {inv.region}" + ("" if yes else " (dry run: --yes deletes)")))
    print_notes(out, inv)
    if any(i.failed for i in inv.items):
        raise typer.Exit(1)


@app.command()
def up(
    config: Path = typer.Argument(..., help="stack config file (Pulumi.<stack>.yaml format)"),
    stack: str = typer.Option(
        None, "--stack", help="Pulumi stack name (default: <stack> of a Pulumi.<stack>.yaml file)"
    ),
    hostfile_out: Path = typer.Option(Path("hostfile"), "--hostfile", help="where to write the hostfile"),
    wait_minutes: float = typer.Option(
        None, "--wait-minutes", help="how long to wait for the nodes (default: bootstrap timeout + 5)"
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
    """Preflight, preview (stops on replacements), `pulumi up` (streamed), then wait for every node and write the
    hostfile; with --check, measure every node's link."""
    from infra.ops.up import up as run_up  # lazy: boto3

    if check_provider not in PROVIDERS:  # before anything runs
        raise fail(f"--check-provider must be efa or tcp; got {check_provider!r}")
    stack = _stack(config, stack)
    report = _ops(
        lambda: run_up(
            config,
            stack,
            hostfile_path=hostfile_out,
            skip_preflight=skip_preflight,
            wait_seconds=None if wait_minutes is None else wait_minutes * 60,
            allow_replace=allow_replace,
            update_image=update_image,
        )
    )
    if not report.ok:
        raise typer.Exit(1)
    if check:
        Console().print(f"checking the fabric of {escape(report.cluster)} (hpcc check fabric)")
        run_fabric_check(report.cluster, report.region, provider=check_provider)


@app.command()
def replace(
    nodes: list[str] = typer.Argument(..., metavar="NODE...", help="nodes to give new instances: gpu-001 ..."),
    cluster: str = typer.Option(None, "--cluster", help="cluster name (its hpcc:cluster tag)"),
    stack: str = typer.Option(None, "--stack", help="Pulumi stack whose clusterName output to use (needs the CLI)"),
    region: str = typer.Option(None, "--region", help="AWS region (default: AWS_REGION or your profile's)"),
    wait_minutes: float = typer.Option(
        0, "--wait-minutes", help="wait this long for the nodes to be ready on new instances (default: do not wait)"
    ),
):
    """Ask the cluster's controller for new instances under the named nodes (recorded in its ledger; no Pulumi run).
    Works with the deployer's credentials, or on the head with its instance role."""
    from infra.ops.replace_run import UnknownNodes, run_replace  # lazy: boto3

    name, region = _stack_cluster(stack, cluster, region)

    def run():
        try:
            return run_replace(_aws(region), name, nodes, Console(), wait_seconds=wait_minutes * 60)
        except UnknownNodes as e:  # a usage error (exit 2), not an operation that failed
            return e

    result = _ops(run)
    if isinstance(result, UnknownNodes):
        raise fail(str(result), 2)
    if not result:
        raise typer.Exit(1)


@app.command()
def destroy(
    config: Path = typer.Argument(..., help="stack config file (Pulumi.<stack>.yaml format)"),
    stack: str = typer.Option(
        None, "--stack", help="Pulumi stack name (default: <stack> of a Pulumi.<stack>.yaml file)"
    ),
):
    """`pulumi destroy` (streamed), then list anything still tagged for the cluster."""
    from infra.ops.up import destroy as run_destroy  # lazy: boto3

    stack = _stack(config, stack)
    left = _ops(lambda: run_destroy(config, stack))
    if left.items:
        raise typer.Exit(1)


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
    """Write a Pulumi project of your own that runs this installed hpcc: Pulumi.yaml, a stack file, a README."""
    try:
        written = init_project(directory, example, stack, refresh=refresh)
    except ProjectError as e:
        raise fail(str(e)) from None
    for f in written.files:
        print(f"wrote {f}")
    if not refresh:
        print(f"next: cd {directory} && hpcc plan Pulumi.{written.stack}.yaml   (then README.md there)")


@app.command("rotate-keys")
def rotate_keys(
    cluster: str = typer.Option(..., "--cluster", help="cluster name (its hpcc:cluster tag)"),
    region: str = typer.Option(None, "--region", help="AWS region (default: AWS_REGION or your profile's)"),
    resume: bool = typer.Option(False, "--resume", help="carry on the rotation that is running"),
    timeout_minutes: int = typer.Option(30, "--timeout-minutes", min=1, help="per phase, for every node"),
):
    """A new host CA and new SSH keys for root and the login user on the running cluster: add, switch, retire,
    waiting for every node between phases."""
    from infra.ops.rotate_keys import rotate  # lazy: boto3

    _ops(
        lambda: rotate(
            _aws(region),
            cluster,
            resume,
            timeout_minutes * 60,
            lambda line: Console().print(line, markup=False, highlight=False),
        )
    )


@app.command("deployer-policy")
def deployer_policy() -> None:
    """Print the least-privilege IAM policy for whoever runs `hpcc up` (attach it to your deploying user or role)."""
    from infra.ops.deployer_policy import shipped  # lazy: pulumi, moto

    sys.stdout.write(shipped())


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
