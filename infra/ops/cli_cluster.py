"""The `hpcc` commands that act on a running cluster: ssh, status, events, top, dashboard, hostfile, replace,
rotate-keys, reap. Each takes the cluster the same way: its stack file first (`hpcc status Pulumi.llm.yaml`), or
--cluster NAME or --stack NAME, the region from the stack file unless --region says (infra/ops/cli_support.py
target). Registered on the app by infra/ops/cli.py, in WORKFLOW order."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from hpcc_contract.hostfile import FORMATS
from infra.config.stackfile import load
from infra.ops import cli_support as support
from infra.ops.cli_report import err, fail
from infra.ops.cli_support import ClusterName, Region, StackFile, StackName
from infra.ops.project import split_stack_file


def ssh(
    args: list[str] = typer.Argument(
        None,
        metavar="[STACK_FILE] [NODE]",
        help="the stack file, then a node (default: the head): gpu-003 is reached through the head",
    ),
    cluster: ClusterName = None,
    stack: StackName = None,
    region: Region = None,
    user: str = typer.Option(None, "--user", help="the login user (default: the stack file's image user, else ubuntu)"),
    print_only: bool = typer.Option(False, "--print", help="print the command instead of running it"),
):
    """A shell on the head, or on a node through the head: Session Manager or SSH, whichever the stack uses."""
    from infra.ops import ssh as ops_ssh  # lazy: boto3

    config, rest = split_stack_file(args)
    if len(rest) > 1:
        raise fail(f"one node at most; got {' '.join(rest)}")
    name, region = support.target_of(config, cluster, stack, region)
    via_ssh, login_user = None, user
    if config is not None:
        cfg = support.ops(lambda: load(config))
        via_ssh, login_user = bool(cfg.cluster.ssh.allowed_cidrs), user or cfg.cluster.image.user
    aws = support.aws_for(region)
    found = support.ops(
        lambda: ops_ssh.login(
            aws, name, rest[0] if rest else None, user=login_user or "ubuntu", via_ssh=via_ssh, region=aws.region
        )
    )
    if print_only:
        print(found.shown())
        return
    missing = ops_ssh.missing_tools(found.how)
    if missing:
        raise fail(f"{missing}. The command, to run elsewhere: {found.shown()}", 1)
    err.print(f"{found.how} to {escape(name)}'s head {found.head}: {escape(found.shown())}", highlight=False)
    ops_ssh.run_session(found.argv)


def status(
    config: StackFile = None,
    cluster: ClusterName = None,
    stack: StackName = None,
    region: Region = None,
):
    """Per group asked/launched/ready/failed, the controller's actions and alerts, and every node's state."""
    from infra.ops.status.cluster import cluster_status  # lazy: boto3
    from infra.ops.status.view import show  # lazy: boto3

    name, region = support.target_of(config, cluster, stack, region)
    aws = support.aws_for(region)
    found = support.ops(lambda: cluster_status(aws, name))
    if not found.nodes and not found.groups:
        raise fail(f"nothing tagged hpcc:cluster={name} found in {aws.region}; check the name and the region", 1)
    show(Console(), found)
    if any(r.failed for r in found.nodes) or found.alerts or found.controller_down:
        raise typer.Exit(1)


def events(
    config: StackFile = None,
    cluster: ClusterName = None,
    stack: StackName = None,
    node: list[str] = typer.Option(None, "--node", help="only this node or group (repeatable)"),
    kind: list[str] = typer.Option(None, "--kind", help="only this action: down, drain, replace, ... (repeatable)"),
    since: int = typer.Option(
        None, "--since-minutes", min=1, help="only the last N minutes (default: all the ledger keeps, a day)"
    ),
    region: Region = None,
):
    """Every action the controller took and kept (a day): when, what, on which node or group, and why."""
    from infra.ops.events import cluster_events  # lazy: boto3
    from infra.ops.status.view import events_table  # lazy: boto3

    name, region = support.target_of(config, cluster, stack, region)
    found = support.ops(
        lambda: cluster_events(support.aws_for(region), name, since * 60 if since else None, node or (), kind or ())
    )
    if not found:
        Console().print(f"no action of the controller recorded for {escape(name)} with these filters")
        return
    Console().print(events_table(found, "the controller's actions (ledger events, UTC)"))


def hostfile(
    config: StackFile = None,
    cluster: ClusterName = None,
    stack: StackName = None,
    fmt: str = typer.Option("openmpi", "--format", help=" | ".join(FORMATS)),
    group: list[str] = typer.Option(None, "--group", help="only this node group (repeatable; default: all)"),
    region: Region = None,
    out: Path = typer.Option(None, "--out", help="write here instead of stdout"),
):
    """The ready compute nodes' hostfile, from the membership the controller published (all groups, or --group)."""
    from infra.ops.hostfile import format_problem, render  # lazy: boto3

    problem = format_problem(fmt)
    if problem:  # a usage error (exit 2), found before any AWS call
        raise fail(problem)
    name, region = support.target_of(config, cluster, stack, region)
    text = support.ops(lambda: render(support.aws_for(region), name, fmt, groups=group or None))
    if out:
        out.write_text(text)
    else:
        sys.stdout.write(text)


def replace(
    args: list[str] = typer.Argument(
        ..., metavar="[STACK_FILE] NODE...", help="the stack file, then the nodes to give new instances: gpu-001 ..."
    ),
    cluster: ClusterName = None,
    stack: StackName = None,
    region: Region = None,
    wait_minutes: float = typer.Option(
        0, "--wait-minutes", help="wait this long for the nodes to be ready on new instances (default: 0, do not wait)"
    ),
):
    """New instances under the named nodes, by the cluster's controller (its ledger; no Pulumi run)."""
    from infra.ops.replace_run import UnknownNodes, run_replace  # lazy: boto3

    config, nodes = split_stack_file(args)
    name, region = support.target_of(config, cluster, stack, region)

    def run():
        try:
            return run_replace(support.aws_for(region), name, nodes, Console(), wait_seconds=wait_minutes * 60)
        except UnknownNodes as e:  # a usage error (exit 2), not an operation that failed
            return e

    result = support.ops(run)
    if isinstance(result, UnknownNodes):
        raise fail(str(result), 2)
    if not result:
        raise typer.Exit(1)


def rotate_keys(
    config: StackFile = None,
    cluster: ClusterName = None,
    stack: StackName = None,
    region: Region = None,
    resume: bool = typer.Option(False, "--resume", help="carry on the rotation that is running"),
    timeout_minutes: int = typer.Option(30, "--timeout-minutes", min=1, help="per phase, for every node"),
):
    """A new host CA and SSH keys on the running cluster: add, switch, retire, waiting for every node."""
    from infra.ops.rotate_keys import rotate  # lazy: boto3

    name, region = support.target_of(config, cluster, stack, region)
    support.ops(
        lambda: rotate(
            support.aws_for(region),
            name,
            resume,
            timeout_minutes * 60,
            lambda line: Console().print(line, markup=False, highlight=False),
        )
    )


def reap(
    config: StackFile = None,
    cluster: ClusterName = None,
    stack: StackName = None,
    region: Region = None,
    yes: bool = typer.Option(False, "--yes", help="really delete (default: dry run, list only)"),
):
    """Delete everything tagged for a cluster, in dependency order (when `pulumi destroy` cannot)."""
    from infra.ops.reap.report import print_notes, table  # lazy: boto3
    from infra.ops.reap.run import reap as run_reap  # lazy: boto3

    name, region = support.target_of(config, cluster, stack, region)
    out = Console()
    inv = support.ops(
        lambda: run_reap(
            support.aws_for(region),
            name,
            yes=yes,
            on_step=lambda kind, items: out.print(f"deleting {len(items)} {kind}(s)", highlight=False),
        )
    )
    if inv.empty:
        out.print(f"nothing tagged hpcc:cluster={name} in {inv.region}", highlight=False)
    else:
        out.print(table(inv, f"hpcc:cluster={name} in {inv.region}" + ("" if yes else " (dry run: --yes deletes)")))
    print_notes(out, inv)
    if any(i.failed for i in inv.items):
        raise typer.Exit(1)


def top(
    config: StackFile = None,
    cluster: ClusterName = None,
    stack: StackName = None,
    region: Region = None,
    once: bool = typer.Option(False, "--once", help="print one frame and exit (for scripts)"),
    sort: str = typer.Option("name", "--sort", help="name, nodes, gpu, worst, memory, power, efa, draining, replacing"),
    every: int = typer.Option(5, "--every", min=1, max=300, help="seconds between frames"),
    prometheus: str = typer.Option(
        None,
        "--prometheus",
        help="the head's Prometheus where you reach it (http://<head address>:9090 inside the VPC); default: a "
        "Session Manager port forward hpcc opens and closes",
    ),
):
    """The cluster at a glance from the head's Prometheus: per group and per running job, GPU utilisation (the mean
    and the worst node), GPU memory, power, EFA throughput, and the nodes draining or being replaced."""
    import contextlib

    from rich.live import Live

    from infra.ops import top as ops_top  # lazy: boto3 for the forward

    if sort not in ops_top.COLUMNS:
        raise fail(f"--sort {sort}: one of {', '.join(ops_top.COLUMNS)}")
    if prometheus is not None and not prometheus.startswith(("http://", "https://")):
        raise fail(f"--prometheus {prometheus!r}: give its URL, http://<address>:9090")
    console = Console(width=None if sys.stdout.isatty() else 200)  # a script's frame is not wrapped at 80 columns

    def run() -> None:
        if prometheus is not None:
            reach = contextlib.nullcontext(prometheus)
        else:
            name, where = support.target_of(config, cluster, stack, region)
            aws = support.aws_for(where)
            reach = ops_top.head_forward(aws, name, aws.region)
        with reach as base:
            if once:
                console.print(ops_top.render(ops_top.read_frame(base), sort))
                return
            with Live(console=console, auto_refresh=False) as live:
                while True:
                    live.update(ops_top.render(ops_top.read_frame(base), sort), refresh=True)
                    time.sleep(every)

    try:
        support.ops(run)
    except KeyboardInterrupt:
        return


def dashboard(
    config: StackFile = None,
    cluster: ClusterName = None,
    stack: StackName = None,
    region: Region = None,
    port: int = typer.Option(
        None, "--port", min=1, max=65535, help="the local port to open Grafana on (default: a free one)"
    ),
):
    """The head's Grafana (the cluster, node, job and fleet dashboards) through a Session Manager port forward hpcc
    opens and holds until Ctrl-C; prints the URL and where the admin password is."""
    from infra.ops import dashboard as ops_dashboard  # lazy: boto3 for the forward

    if port is not None and ops_dashboard.port_taken(port):
        raise fail(f"--port {port}: something here listens on it already; give another or leave it out")
    name, where = support.target_of(config, cluster, stack, region)
    login = (
        f"hpcc ssh {config}"
        if config is not None
        else f"hpcc ssh --cluster {name}" + (f" --region {where}" if where else "")
    )

    def run() -> None:
        aws = support.aws_for(where)
        fwd = ops_dashboard.head_grafana(aws, name, aws.region, port)
        with fwd as url:
            Console().print(ops_dashboard.how_to_log_in(url, login), markup=False, highlight=False)
            ops_dashboard.hold(fwd)

    try:
        support.ops(run)
    except KeyboardInterrupt:
        return
