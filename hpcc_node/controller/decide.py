"""decide(snapshot, groups, now) -> [Action]: the controller's whole judgement, pure (no clock, no AWS, no Slurm),
level-triggered: each loop compares what it observes with what is wanted, so a missed event or a restart costs
nothing (the shape of Kubernetes controllers; clustermgtd's lessons in its rules, not its structure).

Order within a loop: shrink victims, each slot's verdict (ready, failed, ...), the failure rules, the name moving
to replacements, launches for what is still missing, orphans, and the membership to publish.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set

from .assess import answering, assess, drained, gone_quiet, held_by_person
from .decide_failures import (
    Failure,
    down_and_replace,
    failure_actions,
    requested_within_budget,
    slurm_reason,
    unprotect,
)
from .decide_fill import fill, predecessor_gone
from .decide_rolling import rolling_actions, rolling_drained
from .fleet import launch_tokens
from .health.decide import health_actions
from .metric_alerts import alert_actions
from .model import (
    ACTIVE_STATES,
    BOOTING,
    DRAIN,
    DRAINING,
    ENDED,
    FAILED,
    FORGET,
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
    Action,
    Group,
    Slot,
    Snapshot,
    Why,
)
from .orphans import orphans
from .timers import DEFAULT, Timers


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
    slot: Slot, group: Group, snap: Snapshot, now: float, timers: Timers, failures: List[Failure], others_answer: bool
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
    verdict = assess(slot, group, snap, now, timers, others_answer)
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


def membership_body(
    slots: Mapping[str, Slot], snap: Snapshot, groups: Sequence[Group], unlisted: Optional[Mapping[str, str]] = None
) -> Dict:
    """What every node follows: each named node with its group, address and state (and `out`, why, when its health
    verdict took it out of service without Slurm, or neither Slurm nor its status hears from it: hosts.py leaves it
    out of the hostfiles), the groups' sizes, and
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


def overwritten(snap: Snapshot) -> str:
    """Why the membership must be written again though it did not change: its object is not the one the ledger
    recorded publishing (overwritten, corrupted, deleted): a node booting now could read nothing whole. "": it is."""
    found, recorded = snap.membership_found, snap.membership_etag
    if found is None or not recorded or found == recorded:
        return ""
    return f"the membership object is not the one published (ETag {found[:40] or 'none'}, recorded {recorded[:40]})"


def decide(snap: Snapshot, groups: Sequence[Group], now: float, timers: Timers = DEFAULT) -> List[Action]:
    out: List[Action] = []
    raised: set = set()
    cluster_nodes = sum(g.count for g in groups)
    known = {g.name for g in groups}
    by_group: Dict[str, List[Slot]] = {g.name: [] for g in groups}
    for s in snap.slots.values():
        by_group.setdefault(s.group, []).append(s)
    failures: List[Failure] = []
    others_answer = answering(snap)
    for group in groups:
        out += unprotect(group.name, by_group[group.name], snap)
        victims = _shrink_victims(group, by_group[group.name], snap)
        out += _shrink_actions(victims, snap, now, timers)
        skip = {v.name for v in victims}
        for slot in sorted(by_group[group.name], key=lambda s: s.index):
            if slot.name not in skip and not rolling_drained(slot):  # a roll's drain: decide_rolling's
                out += _slot_actions(slot, group, snap, now, timers, failures, others_answer)
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
    for s in snap.slots.values():
        if gone_quiet(s, snap, now, timers):
            unlisted.setdefault(s.name, "unreachable: neither slurmd nor its status answers")
    out += health + failure_actions(failures, snap, now, timers, cluster_nodes, raised)
    touched = {a.node for a in out if a.node} | {f.slot.name for f in failures}
    out += rolling_actions(groups, snap, touched, raised)[0]
    busy = {a.node for a in out if a.node} | touched
    out += alert_actions(snap, busy, raised, timers.systemic_threshold(cluster_nodes))  # the head's Prometheus
    named = {s.instance_id for s in snap.slots.values() if s.instance_id}
    taken: Set[str] = set()
    size, refill = timers.launch_bucket_size, timers.launch_bucket_refill_per_second
    tokens = [launch_tokens(snap.launches, now, size, refill)]  # shared by the groups, in their order
    leaving = {a.node for a in out if a.kind == REPLACE}
    for group in groups:
        out += fill(group, by_group[group.name], snap, now, timers, named, taken, tokens, leaving)
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
    why = "membership changed" if sha != snap.membership_digest else overwritten(snap)
    if why:
        data = {"body": body, "digest": sha, "recorded": snap.membership_generation}  # the count goes on past it
        out.append(Action(PUBLISH, why=Why("", why), data=data))
    return out
