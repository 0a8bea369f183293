"""Waiting until a cluster's nodes are ready and have applied its current membership.

`hpcc up` and `hpcc replace` both wait here; each poll reads `infra.ops.status.cluster_status`, the one place
that decides a node's phase (a status counts only for the instance that wrote it). A node is done when it is
ready and converged (its status `hostsVersion` >= /hosts's Version), or failed; for `hpcc replace` a named
node is not done while its live instance is still the one being replaced.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from infra.ops.aws import Aws
from infra.ops.status import PHASES, STEPS, NodeStatus, cluster_status, node_text, print_failures

LOG_TAIL_LINES = 10


@dataclass
class Readiness:
    nodes: dict[str, NodeStatus] = field(default_factory=dict)
    timed_out: bool = False
    replaced: dict[str, str] = field(default_factory=dict)  # node -> the instance id it must no longer run on

    def still_old(self, r: NodeStatus) -> bool:
        return r.node in self.replaced and r.instance_id == self.replaced[r.node]

    def done(self, r: NodeStatus) -> bool:
        return r.ready and r.converged and not self.still_old(r)

    def is_failed(self, r: NodeStatus) -> bool:
        return r.failed and not self.still_old(r)

    @property
    def ready(self) -> list[str]:
        return sorted(n for n, r in self.nodes.items() if r.ready and not self.still_old(r))

    @property
    def failed(self) -> list[NodeStatus]:
        return [r for _, r in sorted(self.nodes.items()) if self.is_failed(r)]

    @property
    def waiting(self) -> list[NodeStatus]:
        """Nodes neither done nor failed: still bootstrapping, on an old instance, or behind on membership."""
        return [r for _, r in sorted(self.nodes.items()) if not self.done(r) and not self.is_failed(r)]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.waiting


def passed(row: NodeStatus, phase: str) -> bool:
    """Has this node got through `phase` (a bootstrap step, or `ready`)?"""
    if row.phase == "ready":
        return True
    if row.phase not in PHASES:  # failed / unknown: through every step before the failing one
        return row.step in STEPS and phase in STEPS and STEPS.index(phase) < STEPS.index(row.step)
    return phase in STEPS and PHASES.index(row.phase) > PHASES.index(phase)


def wait_ready(aws: Aws, cluster: str, nodes: list[str], timeout: float, poll: float = 15.0,
               console: Console | None = None, sleep: Callable[[float], None] = time.sleep,
               clock: Callable[[], float] = time.monotonic, replaced: dict[str, str] | None = None) -> Readiness:
    """Poll until every node is done (ready and converged) or failed, or `timeout` passes. `replaced` maps
    nodes to the instance id each is leaving: until its live instance differs, a node is not done."""
    console = console or Console()
    deadline = clock() + timeout
    result = Readiness(replaced=dict(replaced or {}))
    with Progress(TextColumn("{task.description:>11}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        tasks = {phase: progress.add_task(phase, total=len(nodes)) for phase in (*STEPS, "ready", "converged")}
        while True:
            rows = {r.node: r for r in cluster_status(aws, cluster)}
            result.nodes = {n: rows.get(n) or NodeStatus(n) for n in nodes}
            fresh = [r for r in result.nodes.values() if not result.still_old(r)]
            for phase, task in tasks.items():
                done = sum(result.done(r) for r in fresh) if phase == "converged" else sum(passed(r, phase) for r in fresh)
                progress.update(task, completed=done)
            if not result.waiting:
                return result
            if clock() >= deadline:
                result.timed_out = True
                return result
            sleep(poll)


def why_waiting(result: Readiness, r: NodeStatus) -> Text:
    """One line on why a node is not done yet (node-written text kept plain)."""
    if result.still_old(r):
        return Text(f"{r.node} not replaced yet: its live instance is still {r.instance_id}")
    if r.ready:
        have = "none" if r.hosts_version is None else str(r.hosts_version)
        return Text(f"{r.node} ready but not converged: applied hosts version {have}, current {r.hosts_target}")
    step = f" (step {r.step})" if r.step and r.step != r.phase else ""
    return Text.assemble(f"{r.node} not ready: instance {r.state}, bootstrap phase ", node_text(r.phase),
                         node_text(step), ("; " if r.message else ""), node_text(r.message))


def report_failures(console: Console, result: Readiness) -> None:
    print_failures(console, result.failed, LOG_TAIL_LINES)
    if result.timed_out:
        for r in result.waiting:
            console.print(why_waiting(result, r), style="yellow", highlight=False)


def summary_line(result: Readiness, total: int) -> str:
    converged = sum(result.done(r) for r in result.nodes.values())
    text = f"{len(result.ready)}/{total} nodes ready, {converged}/{total} on the current hosts version"
    if result.ok:
        return text
    return (text + f"; failed: {', '.join(r.node for r in result.failed) or '-'}; "
            f"waiting: {', '.join(r.node for r in result.waiting) or '-'}")
