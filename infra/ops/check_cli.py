"""`hpcc check ...`: acceptance checks of a running cluster (`hpcc check fabric`: infra/ops/check_fabric.py). Bad
input exits 2 with a message naming the option, a failed check 1, never a traceback."""

from __future__ import annotations

import random
import shlex
import subprocess

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hpcc_node.health.fabric import FLOOR_FRACTION_DEFAULT, ROUNDS_DEFAULT, Floor
from infra.ops import OpsError
from infra.ops.cli_support import ClusterName, HeadUser, Region, StackFile, Via
from infra.ops.project import ProjectError, target

PROVIDERS = ("efa", "tcp")
app = typer.Typer(add_completion=False, no_args_is_help=True, help="Acceptance checks of a running cluster.")


def _fail(message: str, code: int) -> typer.Exit:
    Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


@app.command()
def fabric(
    config: StackFile = None,
    cluster: ClusterName = None,
    region: Region = None,
    via: Via = None,
    user: HeadUser = "ubuntu",
    provider: str = typer.Option("efa", "--provider", help="libfabric provider: efa, or tcp on nodes without EFA"),
    rounds: int = typer.Option(
        ROUNDS_DEFAULT, "--rounds", help="random pairings per group (each node in one pair a round)"
    ),
    floor_fraction: float = typer.Option(
        FLOOR_FRACTION_DEFAULT, "--floor-fraction", help="a node is slow below this fraction of its group's median"
    ),
    floor_gbps: float = typer.Option(None, "--floor-gbps", help="an absolute floor in GB/s instead"),
    seed: int = typer.Option(None, "--seed", help="the pairings' random seed (to repeat a run)"),
    allreduce: bool = typer.Option(
        True, "--allreduce/--no-allreduce", help="then one ring all-reduce per group (torch: NCCL on GPUs, gloo on CPU)"
    ),
    torchrun: str = typer.Option(
        None,
        "--torchrun",
        help="the command that runs torchrun on every node (default: torchrun on the head's PATH, by its full path)",
    ),
    allreduce_procs: int = typer.Option(
        None, "--allreduce-procs", help="all-reduce ranks a node (default: one a GPU, one on a node without GPUs)"
    ),
):
    """Measure every compute node's link in rounds of disjoint pairs (fi_pingpong, from the head), bisect the slow
    ones against a known-good node, and name the nodes under the floor; then one ring all-reduce per group."""
    if rounds < 1 or not 0 < floor_fraction <= 1 or (floor_gbps is not None and floor_gbps <= 0):
        raise _fail("--rounds must be 1 or more, --floor-fraction in (0, 1], --floor-gbps above 0", 2)
    if provider not in PROVIDERS:
        raise _fail(f"--provider must be efa or tcp; got {provider!r}", 2)
    if allreduce_procs is not None and allreduce_procs < 1:
        raise _fail(f"--allreduce-procs must be 1 or more; got {allreduce_procs}", 2)
    try:
        cluster, region = target(config, cluster, None, region)
    except ProjectError as e:
        raise _fail(str(e), 2) from None
    run_fabric_check(
        cluster,
        region,
        via=via,
        user=user,
        provider=provider,
        rounds=rounds,
        floor=Floor(floor_fraction, floor_gbps),
        seed=seed,
        allreduce=allreduce,
        torchrun=torchrun,
        allreduce_procs=allreduce_procs,
    )


def run_fabric_check(
    cluster: str,
    region: str | None,
    *,
    via: str | None = None,
    user: str = "ubuntu",
    provider: str = "efa",
    rounds: int = ROUNDS_DEFAULT,
    floor: Floor = Floor(),
    seed: int | None = None,
    out: Console | None = None,
    allreduce: bool = True,
    torchrun: str | None = None,
    allreduce_procs: int | None = None,
) -> None:
    """`hpcc check fabric` once its options are checked (also `hpcc up --check`): returns when no node is below
    the floor and no group's all-reduce failed; typer.Exit(1) naming them otherwise, or when the cluster cannot
    be measured."""
    from infra.ops.aws import Aws  # lazy: boto3 loads when the check runs, not with every hpcc command
    from infra.ops.check_fabric import check, cluster_nodes, find_torchrun, rows, ssh_runner  # lazy, likewise

    try:
        nodes, head, skipped = cluster_nodes(Aws(region), cluster)
    except OpsError as e:
        raise _fail(str(e), 1) from None
    for line in skipped:  # tag text: printed plain, never markup
        Console(stderr=True).print(f"skipped {line}", markup=False, highlight=False)
    if len(nodes) < 2:
        raise _fail(f"hpcc:cluster={cluster} has {len(nodes)} running compute node(s); a pair needs two", 1)
    if via is None and head is None:
        raise _fail(f"no running head for hpcc:cluster={cluster}; give --via", 1)
    out = out or Console()
    runner = ssh_runner(shlex.split(via) if via else ["ssh", "-o", "BatchMode=yes", f"{user}@{head}"])
    try:
        if allreduce and not torchrun:
            torchrun = find_torchrun(runner)
        report, measured = check(
            nodes,
            runner,
            provider,
            rounds,
            floor,
            random.Random(seed),
            log=lambda line: out.print(line, markup=False),
            allreduce=allreduce,
            torchrun=torchrun,
            procs=allreduce_procs,
        )
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        raise _fail(str(e), 1) from None
    pairs, found = rows(report, measured)
    table = Table("group", "pair", "GB/s", title=f"{cluster}: {report.pairs_measured} pair measurement(s)")
    for row in pairs:
        table.add_row(*map(escape, row))
    out.print(table)
    for group, median in sorted(report.medians.items()):
        out.print(f"{group}: median {median:.2f} GB/s", markup=False)
    if found:
        verdicts = Table("node", "group", "GB/s", "why", title="below the floor or not judged")
        for row in found:
            verdicts.add_row(*map(escape, row))
        out.print(verdicts)
    if report.collectives:
        rings = Table("group", "ranks", "bus GB/s", "result", title="one ring all-reduce per group")
        for c in report.collectives:
            rings.add_row(
                *map(
                    escape,
                    (
                        c.group,
                        str(c.ranks or "-"),
                        "-" if c.busbw is None else f"{c.busbw:.2f}",
                        c.status + (f": {c.why}" if c.why else ""),
                    ),
                )
            )
        out.print(rings)
    if report.slow or any(c.status == "failed" for c in report.collectives):
        raise typer.Exit(1)
