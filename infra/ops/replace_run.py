"""`hpcc replace`'s run: find the ledger, record the requests (infra/ops/replace.py), say what the controller will
do, and optionally wait until each named node is ready on a new instance."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from rich.console import Console

from hpcc_node.controller.timers import DEFAULT as TIMERS
from infra.ops import OpsError, store
from infra.ops.aws import Aws
from infra.ops.readiness import report_failures, summary_line, wait_ready
from infra.ops.replace import Busy, UnknownNodes, check_names, known_names, plan_text, request

__all__ = ["UnknownNodes", "run_replace"]


def run_replace(
    aws: Aws,
    cluster: str,
    nodes: Sequence[str],
    console: Console,
    *,
    wait_seconds: float = 0,
    poll: float = 15.0,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """True when the requests are recorded (and, with a wait, every named node is ready on a new instance)."""
    where = store.names(aws, cluster)
    loaded = store.load_ledger(aws, where.table)
    check_names(known_names(loaded.slots), nodes, cluster)  # a typo writes nothing and asks nothing more
    try:
        done = request(aws.client("dynamodb"), where.table, cluster, nodes, known_names(loaded.slots))
    except Busy as e:
        raise OpsError(str(e)) from None
    for line in plan_text(done, cluster, TIMERS.loop_seconds):
        console.print(line, markup=False, highlight=False)
    if wait_seconds <= 0:
        return True
    counts = {g["name"]: int(g.get("count") or 0) for g in store.groups(aws, cluster)}
    asked = {r.group: counts.get(r.group, sum(s.group == r.group for s in loaded.slots.values())) for r in done}
    result = wait_ready(
        aws,
        cluster,
        asked,
        wait_seconds,
        poll=poll,
        console=console,
        sleep=sleep,
        replaced={r.node: r.instance_id for r in done if r.instance_id},
    )
    report_failures(console, result)
    console.print(summary_line(result), highlight=False)
    return result.ok
