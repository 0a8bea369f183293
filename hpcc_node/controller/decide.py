"""decide(snapshot, groups, now) -> [Action]: the controller's whole judgement, pure (no clock, no AWS, no Slurm),
level-triggered: each loop compares what it observes with what is wanted, so a missed event or a restart costs
nothing (the shape of Kubernetes controllers; clustermgtd's lessons in its rules, not its structure).

Order within a loop: shrink victims, each slot's verdict (ready, failed, ...), the failure rules, the name moving
to replacements, launches for what is still missing, orphans, and the membership to publish.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from hpcc_contract.names import fleet_client_token, node_name

from .assess import assess, block_phase, drained, held_by_person
from .decide_failures import (
    Failure,
    down_and_replace,
    failure_actions,
    requested_within_budget,
    slurm_reason,
    unprotect,
)
from .health.decide import health_actions
from .model import (
    ACTIVE_STATES,
    BOOTING,
    DRAIN,
    DRAINING,
    ENDED,
    FAILED,
    FORGET,
    GONE,
    LAUNCH,
    LIVE,
    MARK,
    NAME,
    PUBLISH,
    READY,
    REMOVE,
    REMOVING,
    REPLACE,
    REPLACING,
    RESUME,
    SET_ADDR,
    SHRINK,
    TAG,
    WAIT_CAPACITY_BLOCK,
    Action,
    Group,
    GroupState,
    Slot,
    Snapshot,
    Why,
)
from .orphans import launched, orphans
from .timers import DEFAULT, Timers


def predecessor_gone(slot: Slot, snap: Snapshot, now: float, timers: Timers) -> bool:
    """A name moves only once its instance is shutting down or terminated (or long gone from EC2's answers)."""
    inst = snap.instances.get(slot.instance_id)
    if inst is None:
        return not slot.instance_id or now - slot.since > timers.describe_lag_seconds
    return inst.state in GONE


def _shrink_victims(group: Group, slots: List[Slot], snap: Snapshot) -> List[Slot]:
    """Which slots a shrink removes: those already draining for it, then failed, replacing, booting, ready; the
    highest index first among equals; never one a person holds."""
    slurm = snap.slurm or {}
    active = [s for s in slots if s.state in ACTIVE_STATES]
    excess = len(active) - group.count
    if excess <= 0:
        return []
    rank = {FAILED: 1, REPLACING: 2, BOOTING: 3, DRAINING: 4, READY: 5}
    pool = [s for s in active if not held_by_person(slurm.get(s.name))]
    pool.sort(key=lambda s: (0 if s.reason.startswith(SHRINK) else rank[s.state], -s.index))
    return pool[:excess]


def _shrink_actions(victims: List[Slot], snap: Snapshot, now: float, timers: Timers) -> List[Action]:
    out: List[Action] = []
    slurm = snap.slurm or {}
    for s in victims:
        why = Why("", f"{SHRINK}: the group's count went down")
        if s.state == REPLACING and predecessor_gone(s, snap, now, timers):
            out.append(Action(FORGET, group=s.group, node=s.name, why=why))
        elif s.state == READY and snap.slurm is not None and not drained(slurm.get(s.name)):
            out.append(
                Action(
                    DRAIN,
                    group=s.group,
                    node=s.name,
                    instance_id=s.instance_id,
                    why=why,
                    data={"reason": slurm_reason(why), "slot_state": DRAINING, "slot_reason": why.evidence},
                )
            )
        elif s.state == DRAINING and not drained(slurm.get(s.name)):
            if "DRAIN" not in getattr(slurm.get(s.name), "states", {"DRAIN"}):  # killed between ledger and scontrol
                out.append(
                    Action(
                        DRAIN,
                        group=s.group,
                        node=s.name,
                        instance_id=s.instance_id,
                        why=why,
                        data={"reason": slurm_reason(why)},
                    )
                )
        else:
            out.append(
                Action(
                    REMOVE,
                    group=s.group,
                    node=s.name,
                    instance_id=s.instance_id,
                    why=why,
                    data={"reason": slurm_reason(why)},
                )
            )
    return out


def _slot_actions(
    slot: Slot, group: Group, snap: Snapshot, now: float, timers: Timers, failures: List[Failure]
) -> List[Action]:
    """Routine work on one slot; failures are collected for the budget rules."""
    node = (snap.slurm or {}).get(slot.name)
    if slot.state == REMOVING:
        if predecessor_gone(slot, snap, now, timers):
            return [Action(FORGET, group=slot.group, node=slot.name, why=Why("", "removed; its instance is gone"))]
        return [
            Action(
                REMOVE,
                group=slot.group,
                node=slot.name,
                instance_id=slot.instance_id,
                why=Why("", slot.reason or SHRINK),
            )
        ]
    if slot.state == REPLACING:
        if predecessor_gone(slot, snap, now, timers):
            return []  # vacant: the name goes to the next launched instance
        return [
            Action(
                REPLACE,
                group=slot.group,
                node=slot.name,
                instance_id=slot.instance_id,
                why=Why("", "finishing the recorded replacement"),
                data={"counted": False},
            )
        ]
    if slot.replace_requested and not (slot.state == ENDED):
        return down_and_replace(slot, Why("", "requested by hpcc replace"), node, snap, counted=False, requested=True)
    if slot.state in (ENDED, FAILED) or held_by_person(node):
        return []  # a person's drain or down is never undone; failed slots wait for a person
    verdict = assess(slot, group, snap, now, timers)
    if verdict is None:
        return []
    why = Why(verdict.failure, verdict.evidence)
    common: Dict[str, Any] = dict(group=slot.group, node=slot.name, instance_id=slot.instance_id, why=why)
    if verdict.kind == "failure":
        failures.append(Failure(slot, verdict.failure, verdict.evidence, verdict.hard))
        return []
    if verdict.kind == "ready":
        out = [Action(MARK, data={"state": READY, "reason": verdict.evidence}, **common)]
        if node is not None and node.states & {"DOWN", "DRAIN"}:
            out.append(Action(RESUME, **common))
        return out
    if verdict.kind == "resume":
        return [Action(RESUME, **common)]
    if verdict.kind == "undrain":
        out = [Action(MARK, data={"state": READY, "reason": verdict.evidence}, **common)]
        return out + ([Action(RESUME, **common)] if node is not None and node.states & {"DOWN", "DRAIN"} else [])
    if verdict.kind == "set-address":
        ip = snap.instances[slot.instance_id].private_ip
        return [Action(SET_ADDR, data={"addr": ip, "hostname": slot.name}, **common)]
    if verdict.kind == "cb-drain":
        return [Action(DRAIN, data={"reason": slurm_reason(why)}, **common)]
    if verdict.kind == "ended":
        return [Action(MARK, data={"state": ENDED, "reason": verdict.evidence}, **common)]
    return []


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


def _fill(
    group: Group, slots: List[Slot], snap: Snapshot, now: float, timers: Timers, named: Set[str], taken: Set[str]
) -> List[Action]:
    """Names for unnamed instances (vacated names first, then new ones at the lowest free index) and launches for
    whatever is still missing."""
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
    missing = len(targets) - len(unnamed)
    pending = [r for r in snap.launches if r.group == group.name and r.instance_ids is None]
    for rec in pending:  # a launch whose result was never recorded: the same token gets the same fleet
        out.append(
            Action(
                LAUNCH,
                group=group.name,
                why=Why("", "retrying a recorded launch"),
                data={"count": rec.count, "token": rec.token, "min": rec.minimum or rec.count},
            )
        )
        missing -= rec.count
    if missing <= 0 or phase != "active" or gs.protected or now < gs.backoff_until:
        return out
    budget = min(missing, timers.launch_batch_size * timers.launch_batches_per_loop)
    batch = 0
    while budget > 0:
        count = min(budget, timers.launch_batch_size)
        # Replacements launch best-effort (as many as EC2 has, at least one: ParallelCluster's default too); a
        # group's new nodes all-or-nothing, so a new placement group is not left half-filled (fleet.py)
        minimum = 1 if vacant else count
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


def membership_body(
    slots: Mapping[str, Slot], snap: Snapshot, groups: Sequence[Group], unlisted: Optional[Mapping[str, str]] = None
) -> Dict:
    """What every node follows: each named node with its group, address and state (and `out`, why, when its health
    verdict took it out of service without Slurm: hosts.py leaves it out of the hostfiles), the groups' sizes, and
    the bundle pointer. Sorted, so the same cluster always gives the same bytes."""
    nodes = []
    for s in sorted(slots.values(), key=lambda s: s.name):
        if s.state in (BOOTING, READY, DRAINING, FAILED) and s.instance_id:
            inst = snap.instances.get(s.instance_id)
            nodes.append(
                {
                    "name": s.name,
                    "group": s.group,
                    "ip": inst.private_ip if inst else "",
                    "instance": s.instance_id,
                    "state": s.state,
                    **({"out": unlisted[s.name]} if unlisted and s.name in unlisted else {}),
                }
            )
    body = {"nodes": nodes, "groups": {g.name: g.count for g in groups}, "bundle": dict(snap.bundle)}
    if snap.head:  # the head the nodes join (the controller's own); a replaced head publishes its address
        body["head"] = dict(snap.head)
    return body


def digest(body: Dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def project(slots: Mapping[str, Slot], actions: Sequence[Action], now: float) -> Dict[str, Slot]:
    """The slots as they will be once this loop's actions are done, so membership follows within the loop."""
    out = dict(slots)
    for a in actions:
        s = out.get(a.node)
        if a.kind == NAME:
            prior = out.get(a.node)
            out[a.node] = Slot(
                a.node, a.group, a.data["index"], a.instance_id, BOOTING, now, prior.attempts if prior else 0
            )
        elif s is None:
            continue
        elif a.kind == MARK:
            out[a.node] = Slot(s.name, s.group, s.index, s.instance_id, a.data["state"], now, s.attempts)
        elif a.kind in (REPLACE, REMOVE):
            out[a.node] = Slot(
                s.name, s.group, s.index, s.instance_id, REPLACING if a.kind == REPLACE else REMOVING, now, s.attempts
            )
        elif a.kind == FORGET:
            del out[a.node]
    return out


def decide(snap: Snapshot, groups: Sequence[Group], now: float, timers: Timers = DEFAULT) -> List[Action]:
    out: List[Action] = []
    raised: set = set()
    cluster_nodes = sum(g.count for g in groups)
    known = {g.name for g in groups}
    by_group: Dict[str, List[Slot]] = {g.name: [] for g in groups}
    for s in snap.slots.values():
        by_group.setdefault(s.group, []).append(s)
    failures: List[Failure] = []
    for group in groups:
        out += unprotect(group.name, by_group[group.name], snap)
        victims = _shrink_victims(group, by_group[group.name], snap)
        out += _shrink_actions(victims, snap, now, timers)
        skip = {v.name for v in victims}
        for slot in sorted(by_group[group.name], key=lambda s: s.index):
            if slot.name not in skip:
                out += _slot_actions(slot, group, snap, now, timers, failures)
    for name in sorted(set(by_group) - known):  # a group removed from the config: its nodes go
        for s in sorted(by_group[name], key=lambda s: s.index):
            if s.state == REMOVING and predecessor_gone(s, snap, now, timers):
                out.append(Action(FORGET, group=name, node=s.name, why=Why("", "removed; its instance is gone")))
            elif s.state != ENDED:
                out.append(
                    Action(
                        REMOVE,
                        group=name,
                        node=s.name,
                        instance_id=s.instance_id,
                        why=Why("", f"{SHRINK}: group {name} is no longer configured"),
                    )
                )
    out = requested_within_budget(out, snap, now, timers, cluster_nodes, raised)
    health, failures, unlisted = health_actions(failures, snap, groups, now, timers, cluster_nodes, raised)
    out += health + failure_actions(failures, snap, now, timers, cluster_nodes, raised)
    named = {s.instance_id for s in snap.slots.values() if s.instance_id}
    taken: Set[str] = set()
    for group in groups:
        out += _fill(group, by_group[group.name], snap, now, timers, named, taken)
    out += orphans(snap, named, taken, now, timers, raised)
    for s in sorted(snap.slots.values(), key=lambda s: s.name):  # tags follow the ledger, for people and IAM
        named_inst = snap.instances.get(s.instance_id)
        if (
            s.state in ACTIVE_STATES
            and named_inst is not None
            and named_inst.state in LIVE
            and named_inst.name_tag != s.name
        ):
            out.append(
                Action(
                    TAG,
                    group=s.group,
                    node=s.name,
                    instance_id=s.instance_id,
                    why=Why("", f"its tag says {named_inst.name_tag or 'nothing'}; the ledger says {s.name}"),
                )
            )
    body = membership_body(project(snap.slots, out, now), snap, groups, unlisted)
    sha = digest(body)
    if sha != snap.membership_digest:
        out.append(Action(PUBLISH, why=Why("", "membership changed"), data={"body": body, "digest": sha}))
    return out
