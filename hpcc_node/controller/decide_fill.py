"""decide()'s names and launches: a vacated name moves to a replacement once its predecessor is gone, new names go
to unnamed instances this controller launched, and what is still missing is launched, within the batch sizes and
what EC2's launch bucket holds (timers.py), best-effort for replacements. A launch recorded without its answer
(a controller killed mid-launch) is finished from the instances carrying its tag, retried only when none does."""

from __future__ import annotations

from typing import List, Set, Tuple

from hpcc_contract.names import fleet_client_token, node_name

from .assess import block_phase
from .model import (
    ACTIVE_STATES,
    ADOPT,
    ENDED,
    GONE,
    LAUNCH,
    LIVE,
    NAME,
    REPLACING,
    WAIT_CAPACITY_BLOCK,
    Action,
    Group,
    GroupState,
    Slot,
    Snapshot,
    Why,
)
from .orphans import by_launch_tag, launched
from .timers import Timers


def predecessor_gone(slot: Slot, snap: Snapshot, now: float, timers: Timers) -> bool:
    """A name moves only once its instance is shutting down or terminated (or long gone from EC2's answers)."""
    inst = snap.instances.get(slot.instance_id)
    if inst is None:
        return not slot.instance_id or now - slot.since > timers.describe_lag_seconds
    return inst.state in GONE


def _unnamed(group: Group, snap: Snapshot, named: Set[str], now: float, timers: Timers) -> List[Tuple[float, str]]:
    """Live instances of the group that no slot holds and this controller launched, oldest first: from EC2 and from
    launches recorded in the ledger that EC2 does not list yet."""
    ours = launched(snap)
    seen = {
        i.instance_id: (i.launch_time, i.instance_id)
        for i in snap.instances.values()
        if i.group == group.name and i.state in LIVE and i.instance_id not in named and i.instance_id in ours
    }
    for rec in snap.launches:
        if rec.group == group.name and rec.instance_ids and now - rec.at <= timers.orphan_timeout_seconds:
            for iid in rec.instance_ids:
                if iid not in named and iid not in snap.instances:
                    seen[iid] = (rec.at, iid)
    return sorted(seen.values())


def unanswered(group: Group, snap: Snapshot, now: float, timers: Timers) -> Tuple[List[Action], List[Action], int]:
    """The group's launches recorded without their answer: those whose instances carry their tag are recorded
    from them (all listed, or the describe lag passed: a best-effort launch may have fewer), those with none are
    retried with their own ClientToken; with the instances still to come from them. The tag first, so that
    no launch is made twice even where a ClientToken is not honoured (moto's CreateFleet ignores it)."""
    found = by_launch_tag(snap)
    adopt: List[Action] = []
    retry: List[Action] = []
    coming = 0
    for rec in (r for r in snap.launches if r.group == group.name and r.instance_ids is None):
        ids = found.get(rec.token, ())
        if ids and (len(ids) >= rec.count or now - rec.at > timers.describe_lag_seconds):  # its whole answer
            adopt.append(
                Action(
                    ADOPT,
                    group=group.name,
                    why=Why("", f"{len(ids)} of {rec.count} instance(s) carry the launch's tag: not launched again"),
                    data={"token": rec.token, "count": rec.count, "at": rec.at, "ids": list(ids)},
                )
            )
            continue
        coming += rec.count - len(ids)  # those found are named as this controller's meanwhile (orphans.launched)
        if not ids:  # none listed: the same token gets the same fleet from EC2
            retry.append(
                Action(
                    LAUNCH,
                    group=group.name,
                    why=Why("", "retrying a recorded launch: no instance carries its tag"),
                    data={"count": rec.count, "token": rec.token, "min": rec.minimum or rec.count},
                )
            )
    return adopt, retry, coming


def fill(
    group: Group,
    slots: List[Slot],
    snap: Snapshot,
    now: float,
    timers: Timers,
    named: Set[str],
    taken: Set[str],
    tokens: List[int],
    leaving: Set[str],
) -> List[Action]:
    """Names for unnamed instances (vacated names first, then new ones at the lowest free index) and launches for
    whatever is still missing, within the `tokens[0]` instances EC2's launch bucket holds for all groups. A node
    being replaced (`leaving`: this loop's replacements, or a slot still waiting for its instance to go) has its
    successor launched now, named once its predecessor is gone: the launch is in the loop that terminates."""
    gs = snap.group_states.get(group.name) or GroupState(group.name)
    phase = block_phase(group, now, timers)
    out: List[Action] = []
    block = group.capacity_block
    waiting = f"waiting for capacity block {block.reservation_id}" if block is not None and phase == "before" else ""
    if group.capacity_block is not None and gs.status != waiting:
        out.append(
            Action(
                WAIT_CAPACITY_BLOCK,
                group=group.name,
                why=Why("", waiting or "capacity block active"),
                data={"status": waiting},
            )
        )
    active = [s for s in slots if s.state in ACTIVE_STATES]
    vacant = sorted(
        (s for s in active if s.state == REPLACING and predecessor_gone(s, snap, now, timers)), key=lambda s: s.index
    )
    used = {s.index for s in slots if s.state != ENDED}  # a Capacity Block's ended names are taken again
    fresh = [i for i in range(group.size_limit) if i not in used][: max(0, group.count - len(active))]
    targets = [(s.name, s.index) for s in vacant] + [(node_name(group.name, i), i) for i in fresh]
    unnamed = _unnamed(group, snap, named, now, timers)
    adopt, retry, coming = unanswered(group, snap, now, timers)
    out += adopt  # before the names: the ledger holds the instances before one is named
    for (name, index), (_, iid) in zip(targets, unnamed):
        inst = snap.instances.get(iid)
        out.append(
            Action(
                NAME,
                group=group.name,
                node=name,
                instance_id=iid,
                why=Why("", "replacement" if name in snap.slots else "new node"),
                data={"index": index, "ip": inst.private_ip if inst else ""},
            )
        )
        taken.add(iid)
    out += retry
    going = [s for s in active if (s.state == REPLACING or s.name in leaving) and s not in vacant]
    missing = len(targets) + len(going) - len(unnamed) - coming
    if missing <= 0 or phase != "active" or gs.protected or now < gs.backoff_until:
        return out
    budget = min(missing, timers.launch_batch_size * timers.launch_batches_per_loop, tokens[0])
    tokens[0] -= budget
    batch = 0
    while budget > 0:
        count = min(budget, timers.launch_batch_size)
        # Replacements launch best-effort (as many as EC2 has, at least one: ParallelCluster's default too); a
        # group's new nodes all-or-nothing, so a new placement group is not left half-filled (fleet.py); a
        # successor launched before its predecessor is gone is a replacement too
        minimum = 1 if vacant or going else count
        out.append(
            Action(
                LAUNCH,
                group=group.name,
                why=Why("", f"{missing} node(s) missing" + (", best-effort" if minimum < count else "")),
                data={
                    "count": count,
                    "token": fleet_client_token(snap.cluster, group.name, now, batch),
                    "min": minimum,
                },
            )
        )
        budget -= count
        batch += 1
    return out
