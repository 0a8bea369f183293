"""Preflight per node group: each group's count and type, and how long the controller takes to launch them at the
account's EC2 launch rate (RunInstances' resource bucket: 1,000 instances at once, then 2 a second, per account and
Region, shared with every other launch there: infra/config/estimates.py). A count above the bucket is a warning: it
works, but the last nodes come minutes after the first, and anything else launching in the account slows it further."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hpcc_node.controller.timers import DEFAULT as TIMERS
from infra.config.estimates import RUN_INSTANCES_BUCKET, RUN_INSTANCES_REFILL_PER_SECOND, launch_minutes
from infra.config.validators.findings import INFO, WARNING, Finding


@dataclass(frozen=True)
class GroupAsk:
    name: str
    instance_type: str
    count: int
    field: str  # the config field that sets the count


def groups_of(cfg) -> list[GroupAsk]:
    """`cluster.nodeGroups`, or the one group `compute` the older `compute:` block means, each with its count's
    config path as the user wrote it."""
    return [
        GroupAsk(g.name, g.instance_type, g.count, cfg.cluster.group_field(i, "count"))
        for i, g in enumerate(cfg.cluster.node_groups)
    ]


def per_minute() -> int:
    """Instances the controller launches a minute at most (its batches a loop)."""
    return TIMERS.launch_batch_size * TIMERS.launch_batches_per_loop * 60 // TIMERS.loop_seconds


def launch_rate(ctx) -> Iterable[Finding]:
    groups = groups_of(ctx.cfg)
    total = sum(g.count for g in groups)
    for g in groups:
        yield Finding(
            INFO,
            g.field,
            (
                f"group {g.name}: {g.count} x {g.instance_type}, launched by the controller on the head with EC2 Fleet "
                f"(instant) in calls of up to {TIMERS.launch_batch_size}, {per_minute()} a minute at most"
            ),
        )
    minutes = launch_minutes(total, per_minute())
    rate = (
        f"EC2 lets this account launch {RUN_INSTANCES_BUCKET:,} instances at once, then "
        f"{RUN_INSTANCES_REFILL_PER_SECOND} a second (RunInstances' resource bucket, per account and Region)"
    )
    if total > RUN_INSTANCES_BUCKET:
        yield Finding(
            WARNING,
            ctx.cfg.cluster.count_field,
            (
                f"{total:,} compute nodes in {len(groups)} group(s): {rate}, so launching them all takes about "
                f"{minutes} "
                "min, longer while anything else in the account launches; `hpcc up` waits for that. To go faster, ask "
                "AWS "
                "for a higher RunInstances rate (EC2 API reference, 'Request throttling for the Amazon EC2 API')"
            ),
        )
    else:
        yield Finding(
            INFO,
            ctx.cfg.cluster.count_field,
            f"{total:,} compute nodes in {len(groups)} group(s): {rate}; launching them takes about {minutes} min",
        )
