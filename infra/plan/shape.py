"""The cluster as its user sees it, and a change in those terms: the head's type, each node group's type, count,
spares and market, the nodes in all, the cost per hour. `hpcc plan --previous` and `hpcc up` print this before the
resource-level changes ("gpu: 16 -> 24 x p5.48xlarge (+8 nodes)", "cost: $1,584.17/h -> $2,370.73/h (+$786.56/h)"),
so what a change does to the bill and the cluster is read first, and the resources it touches below.

A shape comes from a plan's or a stack's outputs (the program's `nodeGroups`, `headNode.instanceType` and
`estimatedHourlyCostUsd`: infra/program/outputs.py), or from a config with the dated price snapshot
(infra/facts/prices.py), the program's own estimate (infra/config/estimates.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from infra.config.estimates import hourly_cost_of
from infra.facts import prices


@dataclass(frozen=True)
class GroupShape:
    name: str
    instance_type: str
    count: int
    spares: int = 0
    market: str = "on-demand"

    def words(self) -> str:
        extra = [f"{self.spares} spare{'s' * (self.spares != 1)}"] * bool(self.spares)
        extra += [self.market] * (self.market != "on-demand")
        return f"{self.count} x {self.instance_type}" + (f" ({', '.join(extra)})" if extra else "")


@dataclass(frozen=True)
class Shape:
    head_type: str | None  # None: not known (a stack whose outputs predate headNode.instanceType)
    groups: tuple[GroupShape, ...]
    hourly_usd: float | None  # None: a type's price is unknown

    @property
    def nodes(self) -> int:
        return sum(g.count for g in self.groups)

    def group(self, name: str) -> GroupShape | None:
        return next((g for g in self.groups if g.name == name), None)


def from_outputs(outputs: dict | None) -> Shape | None:
    """The shape a plan's or a stack's outputs describe; None when they describe none (no stack yet)."""
    groups = (outputs or {}).get("nodeGroups")
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        return None
    try:
        shaped = tuple(
            GroupShape(
                str(g["name"]),
                str(g["instanceType"]),
                int(g["count"]),
                int(g.get("spares") or 0),
                str(g.get("market") or "on-demand"),
            )
            for g in groups
        )
    except (KeyError, TypeError, ValueError):
        return None
    head = (outputs.get("headNode") or {}) if isinstance(outputs.get("headNode"), dict) else {}
    cost = outputs.get("estimatedHourlyCostUsd")
    return Shape(head.get("instanceType"), shaped, float(cost) if isinstance(cost, (int, float)) else None)


def from_config(cfg, price_of: Callable[[str], float | None] = prices.snapshot_price) -> Shape:
    """The shape a config asks for, its cost from the dated snapshot (what the program's output will say)."""
    c = cfg.cluster
    groups = tuple(GroupShape(g.name, g.instance_type, g.count, g.spares, g.market) for g in c.node_groups)
    return Shape(c.head_node.instance_type, groups, hourly_cost_of(c, price_of))


def usd(value: float) -> str:
    return f"${value:,.2f}/h"


def cost_line(before: float | None, after: float | None) -> str:
    if after is None:
        return "cost: price unknown (a node type is not in the price snapshot; `hpcc preflight` asks AWS)"
    if before is None:
        return f"cost: {usd(after)} (on-demand list prices)"
    delta = after - before
    sign = "+" if delta >= 0 else "-"
    return f"cost: {usd(before)} -> {usd(after)} ({sign}{usd(abs(delta))}, on-demand list prices)"


def change_lines(before: Shape | None, after: Shape) -> list[str]:
    """The change from `before` (None: a new cluster) to `after`, one line each: groups added and removed, counts,
    types, markets and spares changed, the head's type, the nodes in all, the cost per hour before and after."""
    if before is None:
        groups = "; ".join(f"{g.name}: {g.words()}" for g in after.groups)
        return [
            f"new cluster: head {after.head_type}; {groups}",
            f"nodes: {after.nodes} in {len(after.groups)} group(s)",
            cost_line(None, after.hourly_usd),
        ]
    lines = []
    if before.head_type and after.head_type and before.head_type != after.head_type:
        lines.append(f"head: {before.head_type} -> {after.head_type} (the head node is replaced)")
    for g in after.groups:
        old = before.group(g.name)
        if old is None:
            lines.append(f"+ group {g.name}: {g.words()} (new)")
            continue
        if old.count != g.count:
            delta = g.count - old.count
            lines.append(
                f"{g.name}: {old.count} -> {g.count} x {g.instance_type} ({delta:+d} node{'s' * (abs(delta) != 1)})"
            )
        if old.instance_type != g.instance_type:
            lines.append(
                f"{g.name}: {old.instance_type} -> {g.instance_type} (nodes launched from now on; running "
                "ones keep theirs until replaced)"
            )
        if old.market != g.market:
            lines.append(f"{g.name}: market {old.market} -> {g.market}")
        if old.spares != g.spares:
            lines.append(f"{g.name}: spares {old.spares} -> {g.spares}")
    for old in before.groups:
        if after.group(old.name) is None:
            lines.append(f"- group {old.name}: {old.words()} (removed: its nodes are terminated)")
    if before.nodes != after.nodes:
        lines.append(f"nodes: {before.nodes} -> {after.nodes} ({after.nodes - before.nodes:+d})")
    if lines or before.hourly_usd != after.hourly_usd:
        lines.append(cost_line(before.hourly_usd, after.hourly_usd))
    return lines or ["no change to the head, the groups, the nodes or the cost"]


def changes_anything(before: Shape | None, after: Shape) -> bool:
    return before is None or change_lines(before, after) != change_lines(after, after)
