"""Waiting until a controller-run cluster is ready: the head, and in every group as many ready nodes as asked,
each on the current membership generation, replacements included.

`hpcc up` and `hpcc replace --wait-minutes` wait here; each poll reads `infra.ops.status.cluster.cluster_status`, the
one place that decides a node's state. Readiness is per node (the controller marks a slot ready; no node waits for its
peers), so progress is shown per group. The wait ends early when what is left cannot come on its own: a node the
controller left failed (attempt cap, a bundle or hook failure) or a group in protected mode."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from hpcc_contract.names import HEAD
from hpcc_node.controller import model
from infra.ops.aws import Aws
from infra.ops.status.cluster import ClusterStatus, GroupRow, NodeStatus, cluster_status
from infra.ops.status.view import controller_line, node_text, print_failures, what_controller_does

LOG_TAIL_LINES = 10


def kept(r: NodeStatus) -> bool:
    """A named node that stays in the cluster (not being removed by a shrink, not ended with its Capacity Block)."""
    return r.slot in model.ACTIVE_STATES


@dataclass
class Readiness:
    status: ClusterStatus = field(default_factory=lambda: ClusterStatus(""))
    asked: dict[str, int] = field(default_factory=dict)  # group -> nodes asked
    timed_out: bool = False
    replaced: dict[str, str] = field(default_factory=dict)  # node -> the instance id it must no longer run on

    def still_old(self, r: NodeStatus) -> bool:
        return r.node in self.replaced and r.instance_id == self.replaced[r.node]

    def done(self, r: NodeStatus) -> bool:
        return r.ready and r.converged and not self.still_old(r) and not r.replacing

    @property
    def head(self) -> NodeStatus:
        return self.status.rows().get(HEAD) or NodeStatus(HEAD, HEAD)

    def group_nodes(self, group: str) -> list[NodeStatus]:
        return [r for r in self.status.nodes if r.group == group and r.role != HEAD and kept(r)]

    def ready_in(self, group: str) -> int:
        return sum(self.done(r) for r in self.group_nodes(group))

    @property
    def stuck(self) -> list[NodeStatus]:
        """Nodes nothing will fix without a person: left failed by the controller, or in a protected group, or
        a dead head."""
        protected = {g.name for g in self.status.groups if g.protected}
        out = [
            r
            for r in self.status.nodes
            if r.role != HEAD and (r.slot == model.FAILED or (r.group in protected and r.failed))
        ]
        return ([self.head] if self.head.failed else []) + out

    @property
    def protected(self) -> list[GroupRow]:
        return [g for g in self.status.groups if g.protected and g.name in self.asked]

    @property
    def waiting(self) -> list[NodeStatus]:
        stuck = {r.node for r in self.stuck}  # once, not per node: 4,096 nodes
        return [
            r for r in self.status.nodes if (r.role == HEAD or kept(r)) and not self.done(r) and r.node not in stuck
        ]

    @property
    def ok(self) -> bool:
        groups_full = all(self.ready_in(g) >= n for g, n in self.asked.items())
        mine = [r for r in self.status.nodes if r.role == HEAD or r.group in self.asked]
        named = [r for r in mine if r.role == HEAD or kept(r)]
        return self.done(self.head) and groups_full and all(self.done(r) for r in named) and not self.stuck

    @property
    def hopeless(self) -> bool:
        return bool(self.stuck or self.protected)


def wait_ready(
    aws: Aws,
    cluster: str,
    asked: dict[str, int],
    timeout: float,
    poll: float = 15.0,
    console: Console | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    replaced: dict[str, str] | None = None,
    read: Callable[[], ClusterStatus] | None = None,
) -> Readiness:
    """Poll until ready, hopeless, or `timeout` passes; `asked` is each group's count. `replaced` maps nodes to
    the instance id each is leaving: until its live instance differs, a node is not done."""
    console = console or Console()
    read = read or (lambda: cluster_status(aws, cluster))
    deadline = clock() + timeout
    result = Readiness(asked=dict(asked), replaced=dict(replaced or {}))
    with Progress(
        TextColumn("{task.description:>14}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[note]}"),
        console=console,
        transient=False,
    ) as progress:
        tasks = {HEAD: progress.add_task(HEAD, total=1, note="")}
        tasks.update({g: progress.add_task(g, total=n, note="") for g, n in asked.items()})
        seen: set[tuple[str, str | None]] = set()
        while True:
            result.status = read()
            fresh = [r for r in result.status.nodes if r.failed and (r.node, r.instance_id) not in seen]
            seen.update((r.node, r.instance_id) for r in fresh)
            print_failures(console, result.status, fresh, LOG_TAIL_LINES)  # as they happen, once per instance
            down = "; controller not running" if result.status.controller_down and result.done(result.head) else ""
            progress.update(tasks[HEAD], completed=int(result.done(result.head)), note=result.head.phase + down)
            rows = {g.name: g for g in result.status.groups}
            for g in asked:
                row = rows.get(g, GroupRow(g))
                note = (
                    f"launched {row.launched}, failed {row.failed}, being replaced {row.replacing}"
                    + (f", PROTECTED: {row.protected}" if row.protected else "")
                    + (f", {row.note}" if row.note else "")
                )
                progress.update(tasks[g], completed=min(result.ready_in(g), asked[g]), note=note)
            if result.ok or result.hopeless:
                return result
            if clock() >= deadline:
                result.timed_out = True
                return result
            sleep(poll)


def why_waiting(result: Readiness, r: NodeStatus) -> Text:
    """One line on why a node is not done yet (node-written text kept plain)."""
    if result.still_old(r):
        return Text(f"{r.node} not replaced yet: its live instance is still {r.instance_id}")
    if r.ready and not r.converged:
        have = "none" if r.generation is None else str(r.generation)
        return Text(f"{r.node} ready but not on membership generation {r.generation_target} (has {have})")
    step = f" (step {r.step})" if r.step and r.step != r.phase else ""
    ledger = f", ledger {r.slot}" if r.slot else ""
    return Text.assemble(
        f"{r.node} not ready: instance {r.state}{ledger}, bootstrap phase ",
        node_text(r.phase),
        node_text(step),
        ("; " if r.message else ""),
        node_text(r.message),
    )


def report_failures(console: Console, result: Readiness) -> None:
    """At the end: what is still failed (each was named, with its log, when it failed) and what is stuck."""
    if result.status.controller_down and not result.ok:
        console.print(controller_line(result.status), highlight=False)
    for r in result.status.nodes:
        if r.failed:
            console.print(
                Text.assemble(node_text(f"{r.node} is failed: ", "bold red"), node_text(r.message or r.reason)),
                highlight=False,
            )
    for g in result.protected:
        console.print(
            Text.assemble(
                node_text(f"group {g.name} is protected: ", "bold red"),
                node_text(g.protected),
                "; the controller stops replacing its nodes until one becomes ready",
            ),
            highlight=False,
        )
    short = {g: n - result.ready_in(g) for g, n in result.asked.items() if result.ready_in(g) < n}
    if result.timed_out or result.hopeless:
        for r in result.waiting:
            console.print(why_waiting(result, r), style="yellow", highlight=False)
        for g, n in short.items():
            console.print(f"group {g}: {n} of {result.asked[g]} asked nodes not ready", style="yellow", highlight=False)
    for r in result.stuck:
        console.print(Text("  ") + node_text(f"{r.node}: {what_controller_does(r)}"), highlight=False)


def summary_line(result: Readiness) -> str:
    parts = [f"{g} {result.ready_in(g)}/{n}" for g, n in result.asked.items()]
    text = f"head {'ready' if result.done(result.head) else result.head.phase}; ready per group: {', '.join(parts)}"
    if result.ok:
        return text
    stuck = ", ".join(r.node for r in result.stuck) or "-"
    why = "timed out" if result.timed_out else "stopped: nothing left can come up on its own" if result.hopeless else ""
    return f"{text}; {why}; failed for good: {stuck}; waiting: {', '.join(r.node for r in result.waiting) or '-'}"
