"""`hpcc events --cluster C`: every action the controller kept in its ledger (Timers.event_keep_seconds, a day),
each with when, what, on which node or group, and why; `hpcc status` shows the newest 15. Read only."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from hpcc_node.controller import model
from infra.ops import OpsError, store
from infra.ops.aws import Aws


def select(
    events: Sequence[model.Event],
    now: float,
    since_seconds: float | None = None,
    nodes: Sequence[str] = (),
    kinds: Sequence[str] = (),
) -> list[model.Event]:
    """The events within `since_seconds` of now, on these nodes (or groups), of these kinds; oldest first."""
    return [
        e
        for e in sorted(events, key=lambda e: e.at)
        if (since_seconds is None or now - e.at <= since_seconds)
        and (not nodes or e.node in nodes)
        and (not kinds or e.kind in kinds)
    ]


def cluster_events(
    aws: Aws,
    cluster: str,
    since_seconds: float | None = None,
    nodes: Sequence[str] = (),
    kinds: Sequence[str] = (),
    clock: Callable[[], float] = time.time,
) -> list[model.Event]:
    unknown = sorted(set(kinds) - set(model.RECORDED))
    if unknown:
        raise OpsError(
            f"--kind {', '.join(unknown)}: not an action the controller records; one of {', '.join(model.RECORDED)}"
        )
    loaded = store.load_ledger(aws, store.names(aws, cluster).table)
    return select(loaded.events, clock(), since_seconds, nodes, kinds)
