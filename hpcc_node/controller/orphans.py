"""Which instances are the controller's own (issue 33, finding 9): those its ledger's launch records hold (kept
a day: ledger.py), never one for its tags alone. The tags an instance carries say nothing of who launched it
(anyone allowed to tag an instance can write `hpcc:cluster`), so an instance with the cluster's tags that no
launch of the controller's made is neither named into the cluster nor terminated: it is alerted once. Pure."""

from __future__ import annotations

from typing import List, Set

from .decide_failures import alert
from .model import LIVE, TERMINATE_ORPHAN, Action, Snapshot, Why
from .timers import Timers


def launched(snap: Snapshot) -> Set[str]:
    """The instances this controller launched: its ledger's launch records."""
    return {iid for rec in snap.launches for iid in rec.instance_ids or ()}


def orphans(snap: Snapshot, named: Set[str], taken: Set[str], now: float, timers: Timers, raised: set) -> List[Action]:
    """The cluster's live instances no slot holds nor this loop names, past the orphan timeout: terminated when
    this controller launched them (a launch whose naming was lost, a grown-then-shrunk group), else alerted."""
    ours = launched(snap)
    out: List[Action] = []
    for inst in sorted(snap.instances.values(), key=lambda i: i.instance_id):
        if (
            inst.state not in LIVE
            or inst.instance_id in named
            or inst.instance_id in taken
            or now - inst.launch_time <= timers.orphan_timeout_seconds
        ):
            continue
        if inst.instance_id in ours:
            out.append(
                Action(
                    TERMINATE_ORPHAN,
                    group=inst.group,
                    instance_id=inst.instance_id,
                    why=Why("", f"cluster instance with no name after {timers.orphan_timeout_seconds} s"),
                )
            )
        else:  # a tag alone: never named, never terminated; said once
            out += alert(
                f"foreign:{inst.instance_id}",
                f"{inst.instance_id} carries the cluster's tags but no launch "
                "of this controller made it: neither named nor terminated",
                snap,
                raised,
            )
    return out
