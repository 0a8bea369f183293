"""Which instances are the controller's own (issue 33, finding 9): those its ledger's launch records hold (kept
a day: ledger.py), never one for its tags alone. The tags an instance carries say nothing of who launched it
(anyone allowed to tag an instance can write `hpcc:cluster`), so an instance with the cluster's tags that no
launch of the controller's made is neither named into the cluster nor terminated: it is alerted once. The one
use of a tag: a launch recorded without its answer (a controller killed between CreateFleet and recording it)
owns the instances of its group created with its token as hpcc:launch after the launch was recorded. Pure."""

from __future__ import annotations

from typing import Dict, List, Set, Tuple

from .decide_failures import alert
from .model import LIVE, TERMINATE_ORPHAN, Action, Snapshot, Why
from .timers import Timers

# The head's clock (a launch record's time) and EC2's LaunchTime are both NTP-synchronised; LaunchTime has whole
# seconds. An instance created longer than this before the launch was recorded is not that launch's.
CLOCK_SLACK_SECONDS = 60


def by_launch_tag(snap: Snapshot) -> Dict[str, Tuple[str, ...]]:
    """The instances of each launch recorded without its answer, by token: its group's, tagged hpcc:launch with
    its token (fleet.py request), created no earlier than the record, in every state."""
    pending = {rec.token: rec for rec in snap.launches if rec.instance_ids is None}
    out: Dict[str, Tuple[str, ...]] = {}
    if not pending:
        return out
    for inst in sorted(snap.instances.values(), key=lambda i: i.instance_id):
        rec = pending.get(inst.launch_tag)
        if rec is not None and inst.group == rec.group and inst.launch_time >= rec.at - CLOCK_SLACK_SECONDS:
            out[rec.token] = out.get(rec.token, ()) + (inst.instance_id,)
    return out


def launched(snap: Snapshot) -> Set[str]:
    """The instances this controller launched: its ledger's launch records, and those of a launch whose answer
    was not recorded, found by their launch tag."""
    found = {iid for ids in by_launch_tag(snap).values() for iid in ids}
    return found | {iid for rec in snap.launches for iid in rec.instance_ids or ()}


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
