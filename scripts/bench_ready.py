#!/usr/bin/env python3
"""Issue 19's figures computed for AWS (`make bench`): seconds from a node's death to its replacement idle in
Slurm, and from `hpcc up` to every node ready at 512 and 4,096 nodes with 0.1% of nodes failing at boot; issue
20's: from a fatal Xid logged to the node out of service (target 60 s). The
box measures the same paths with namespace nodes that boot in about a minute (tests/box/test_box_fleet.py prints
`[fleet]` lines); here the controller's own timers (hpcc_node/controller/timers.py) and Slurm's ping
(infra/facts/slurm.py's SlurmdTimeout) are combined with a p5's launch and boot, which no machine here
can measure: they are the assumptions below, stated so they can be replaced by a real cluster's figures.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpcc_node.controller.timers import DEFAULT as TIMERS  # noqa: E402 - after sys.path gets the checkout
from hpcc_node.health.verdict import INTERVAL_S as HEALTH_PERIOD  # noqa: E402 - after sys.path gets the checkout
from infra.facts.slurm import SLURMD_TIMEOUT_SECONDS as SLURMD_TIMEOUT  # noqa: E402 - after sys.path gets the checkout

# Assumptions (seconds), a p5.48xlarge from a DLAMI. EC2 documents no launch time; these are what operators
# report and what ParallelCluster's 30-minute boot grace is sized above.
P5_PENDING = 150  # CreateFleet to `running` (a large instance's host and network set-up)
P5_BOOTSTRAP = 420  # running to ready: OS boot and drivers, EFA (fi_info), FSx mount, the checks, slurmd registered
FAIL_AT = P5_BOOTSTRAP  # a failing node fails at its last step (the worst case: a slurmd never registered fails sooner)
MESSAGE_TIMEOUT = 10  # Slurm's MessageTimeout default: a ping to a dead node fails after it
FAILING = 0.001


def boot() -> int:
    return P5_PENDING + P5_BOOTSTRAP


def death_to_idle() -> int:
    """Worst case: the node dies right after a ping; the next one fails (NOT_RESPONDING), the controller's next
    loop terminates it and, the same loop, launches the replacement under the name, which then boots."""
    seen = SLURMD_TIMEOUT // 3 + MESSAGE_TIMEOUT
    return seen + TIMERS.loop_seconds + boot()


LOOP_WORK = 10  # a loop's own reads before it acts at 4,096 nodes (describe pages, the ledger scan, the listing)


def xid_out_of_service(wake: bool = True) -> int:
    """Worst case from a fatal Xid logged to the node DOWN: the agent reads it within a health period and writes
    its status at once; the verdict is acted on once settled. With the status poll between loops, the loop runs
    at the settle time (the poll sees it sooner); without it, a loop that saw it unsettled waits a whole loop."""
    if wake:
        return HEALTH_PERIOD + max(TIMERS.wake_poll_seconds, TIMERS.health_settle_seconds) + LOOP_WORK
    return HEALTH_PERIOD + 2 * TIMERS.loop_seconds + LOOP_WORK


def waves(nodes: int) -> int:
    """Loops it takes to launch `nodes`: launch_batch_size instances a CreateFleet, launch_batches_per_loop a loop."""
    return math.ceil(nodes / (TIMERS.launch_batch_size * TIMERS.launch_batches_per_loop))


def all_ready(nodes: int) -> tuple[int, int]:
    """Seconds until every node is ready: when none fails, and when one of the last wave fails at boot (its failed
    report is seen within a loop; the replacement is launched that loop and boots)."""
    last_wave = (waves(nodes) - 1) * TIMERS.loop_seconds
    return last_wave + boot(), last_wave + P5_PENDING + FAIL_AT + TIMERS.loop_seconds + boot()


def p_failure(nodes: int, failing: float = FAILING) -> float:
    """The chance that at least one of `nodes` fails at boot, each independently with `failing`."""
    return 1 - (1 - failing) ** nodes


def main() -> None:
    print(
        f"assumed p5.48xlarge: {P5_PENDING} s to running, {P5_BOOTSTRAP} s bootstrap; controller loop "
        f"{TIMERS.loop_seconds} s, launches {TIMERS.launch_batch_size} x {TIMERS.launch_batches_per_loop} a loop; "
        f"SlurmdTimeout {SLURMD_TIMEOUT} s"
    )
    print(
        f"a node's death to its replacement idle in Slurm: {death_to_idle()} s "
        f"(seen {SLURMD_TIMEOUT // 3 + MESSAGE_TIMEOUT} s, a loop {TIMERS.loop_seconds} s, launch and boot {boot()} s)"
    )
    print(
        f"a fatal Xid logged to its node DOWN: {xid_out_of_service()} s at most (target 60 s; health period "
        f"{HEALTH_PERIOD} s, status poll {TIMERS.wake_poll_seconds} s, settle {TIMERS.health_settle_seconds} s, "
        f"a loop's reads {LOOP_WORK} s); {xid_out_of_service(False)} s without the poll between loops"
    )
    print(f"{'nodes':>6} {'waves':>6} {'P(a node fails)':>16} {'all ready, none fails':>22} {'one fails':>10}")
    for nodes in (512, 4096):
        clean, failed = all_ready(nodes)
        print(f"{nodes:>6} {waves(nodes):>6} {p_failure(nodes):>15.0%} {clean / 60:>18.1f} min {failed / 60:>6.1f} min")
    print(
        "with 0.1% failing, a failed node costs one loop and one more boot; every other node is ready on its own "
        "time (no node waits for its peers: the box's fleet test asserts it)"
    )


if __name__ == "__main__":
    main()
