"""From failed slots to actions, by the one taxonomy (hpcc_contract/taxonomy.py) and the budget rules: systemic bursts
alert and touch nothing until the bounded guard lets a canary through (systemic_guard.py); bundle and hook failures
are reported only; protected groups, the per-slot attempt cap and the circuit breaker stop replacements; soft
failures drain first, hard ones go DOWN; then replace. Pure."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional

from hpcc_contract.taxonomy import FailureClass, policy

from .assess import drained, hpcc_reason, signature
from .model import (
    ALERT,
    DOWN,
    DRAIN,
    DRAINING,
    ENDED,
    FAILED,
    MARK,
    PROTECT,
    REASON_PREFIX,
    REPLACE,
    Action,
    GroupState,
    Slot,
    SlurmNode,
    Snapshot,
    Why,
)
from .systemic_guard import alert_key, bursts, released
from .timers import Timers


@dataclass(frozen=True)
class Failure:
    slot: Slot
    failure: str
    evidence: str
    hard: bool = True

    @property
    def why(self) -> Why:
        return Why(self.failure, self.evidence)

    @property
    def signature(self) -> str:
        return signature(self.failure, self.evidence)


def slurm_reason(why: Why) -> str:
    return f"{REASON_PREFIX} {why.text()}"[:200]


def alert(key: str, text: str, snap: Snapshot, raised: set, group: str = "") -> List[Action]:
    """One alert per key: none while the same key was raised recently (the ledger keeps raised keys)."""
    if key in snap.alerts or key in raised:
        return []
    raised.add(key)
    return [
        Action(
            ALERT,
            group=group,
            why=Why(FailureClass.SYSTEMIC.value if key.startswith("systemic") else "", text),
            data={"key": key},
        )
    ]


def systemic(failures: List[Failure], snap: Snapshot, now: float, timers: Timers, cluster_nodes: int) -> set:
    """Signatures failing on so many distinct nodes within the window that the fault is the cluster's (one slot
    failing again and again is that slot's: the attempt cap handles it). A failure of the instance itself is its
    own, never a shared cause: two dead machines read alike, yet share nothing."""
    instance = f"{FailureClass.INSTANCE.value}:"
    recent = [
        (e.signature, e.node)
        for e in snap.events
        if e.kind == REPLACE
        and e.phase == "start"
        and e.signature
        and not e.signature.startswith(instance)
        and now - e.at <= timers.systemic_window_seconds
    ]
    current = [(f.signature, f.slot.name) for f in failures if f.failure != FailureClass.INSTANCE.value]
    return bursts(recent, current, timers.systemic_threshold(cluster_nodes))


def replacements_in_window(snap: Snapshot, now: float, timers: Timers) -> int:
    return sum(
        1
        for e in snap.events
        if e.kind == REPLACE and e.phase == "start" and e.failure and now - e.at <= timers.breaker_window_seconds
    )


def _mark_failed(f: Failure, reason: str) -> List[Action]:
    if f.slot.state == FAILED and f.slot.reason == reason:
        return []
    return [
        Action(
            MARK,
            group=f.slot.group,
            node=f.slot.name,
            instance_id=f.slot.instance_id,
            why=f.why,
            data={"state": FAILED, "reason": reason},
        )
    ]


def failure_actions(
    failures: List[Failure], snap: Snapshot, now: float, timers: Timers, cluster_nodes: int, raised: set
) -> List[Action]:
    out: List[Action] = []
    slurm: Mapping[str, SlurmNode] = snap.slurm or {}
    bursts = systemic(failures, snap, now, timers, cluster_nodes)
    go: set = set()  # the bursts' nodes the bounded guard lets through in this loop (a canary, then batches)
    order = sorted(failures, key=lambda x: (x.slot.group, x.slot.index))
    for sig in sorted(bursts):
        names = [f.slot.name for f in order if f.signature == sig]
        out += alert(
            alert_key(sig),
            f"{len(names)} nodes failing the same way ({sig}); no node touched for {timers.systemic_hold_seconds} s, "
            "then one as a canary",
            snap,
            raised,
        )
        through, notes = released(sig, names, snap, now, timers)
        go |= through
        out += notes
    budget = timers.breaker_limit(cluster_nodes) - replacements_in_window(snap, now, timers)
    bootstrap_now: Dict[str, int] = Counter()
    protected_now: set = set()
    for f in order:
        if f.signature in bursts and f.slot.name not in go:
            continue
        slot, why = f.slot, f.why
        gs = snap.group_states.get(slot.group) or GroupState(slot.group)
        if not policy(f.failure).replace:
            out += _mark_failed(f, f"{why.text()} (reported, not replaced)")
            if f.failure in (FailureClass.BUNDLE.value, FailureClass.HOOK.value):
                out += alert(f"{f.failure}:{f.evidence}", f"{why.text()} on {slot.name}", snap, raised, slot.group)
            continue
        if gs.protected or slot.group in protected_now:
            out += _mark_failed(f, f"{why.text()} (group protected: {gs.protected or 'now'})")
            continue
        if slot.attempts >= timers.slot_attempt_cap:
            out += _mark_failed(f, f"{why.text()} (attempt cap {timers.slot_attempt_cap} reached)")
            out += alert(
                f"cap:{slot.name}",
                f"{slot.name} failed {slot.attempts + 1} times; left failed",
                snap,
                raised,
                slot.group,
            )
            continue
        if f.failure == FailureClass.BOOTSTRAP.value:
            n = gs.consecutive_failures + bootstrap_now[slot.group] + 1
            if n >= timers.protected_failure_count:
                reason = f"{n} bootstrap failures in a row, the last: {f.evidence}"
                protected_now.add(slot.group)
                out.append(Action(PROTECT, group=slot.group, why=why, data={"reason": reason}))
                out += _mark_failed(f, f"{why.text()} (group protected: {reason})")
                continue
        if budget <= 0:
            out += alert(
                "breaker",
                f"circuit breaker open: {timers.breaker_limit(cluster_nodes)} replacements "
                f"within {timers.breaker_window_seconds} s; no more until the window passes",
                snap,
                raised,
            )
            continue
        node = slurm.get(slot.name)
        if not f.hard and snap.slurm is not None and not (slot.state == DRAINING and drained(node)):
            if slot.state != DRAINING or not (node and "DRAIN" in node.states):
                out.append(
                    Action(
                        DRAIN,
                        group=slot.group,
                        node=slot.name,
                        instance_id=slot.instance_id,
                        why=why,
                        data={"reason": slurm_reason(why), "slot_state": DRAINING},
                    )
                )
            continue  # replaced once Slurm has drained it
        if f.failure == FailureClass.BOOTSTRAP.value:
            bootstrap_now[slot.group] += 1
        budget -= 1
        out += down_and_replace(slot, why, node, snap)
    return out


def down_and_replace(
    slot: Slot, why: Why, node: Optional[SlurmNode], snap: Snapshot, counted: bool = True, requested: bool = False
) -> List[Action]:
    """DOWN in Slurm (jobs on it are requeued or fail now, not at the next timeout), then REPLACE: the ledger marks
    the slot replacing and the instance is terminated; the name moves once EC2 shows it shutting down. `requested`:
    an `hpcc replace` request's (requested_within_budget)."""
    out: List[Action] = []
    mark = {"requested": True} if requested else {}
    if snap.slurm is not None and not (node and "DOWN" in node.states and hpcc_reason(node)):
        out.append(
            Action(
                DOWN,
                group=slot.group,
                node=slot.name,
                instance_id=slot.instance_id,
                why=why,
                data={"reason": slurm_reason(why), **mark},
            )
        )
    out.append(
        Action(
            REPLACE,
            group=slot.group,
            node=slot.name,
            instance_id=slot.instance_id,
            why=why,
            data={"counted": counted, "signature": signature(why.failure, why.evidence), **mark},
        )
    )
    return out


def unprotect(group: str, slots: List[Slot], snap: Snapshot) -> List[Action]:
    """A person's `hpcc replace` of a node of a protected group is their word that the cause is fixed: the protection
    is lifted so the replacement launches (clustermgtd leaves protected mode on a fleet restart). The group's
    consecutive failures stay counted, so one more failed boot protects it again at once."""
    gs = snap.group_states.get(group)
    asked = sorted(s.name for s in slots if s.replace_requested and s.state != ENDED)
    if gs is None or not gs.protected or not asked:
        return []
    why = Why("", f"protection lifted: hpcc replace {', '.join(asked)}; the next boot decides")
    return [Action(PROTECT, group=group, data={"reason": ""}, why=why)]


REQUESTED = "requested"  # the ledger event signature of a replacement `hpcc replace` asked for (act.py)


def requested_within_budget(
    actions: List[Action], snap: Snapshot, now: float, timers: Timers, cluster_nodes: int, raised: set
) -> List[Action]:
    """`hpcc replace` requests spend a budget of their own, the circuit breaker's size (Timers.breaker_limit) in
    any breaker window: a request is one ledger write anyone allowed to write the ledger can make for every slot,
    and must not replace the cluster at once. Requests beyond it wait (their flag stays set) for the window to
    pass, said by one alert."""
    spent = sum(
        1
        for e in snap.events
        if e.kind == REPLACE
        and e.phase == "start"
        and e.signature == REQUESTED
        and now - e.at <= timers.breaker_window_seconds
    )
    budget = timers.breaker_limit(cluster_nodes) - spent
    allowed: List[str] = []
    waiting: List[str] = []
    for a in actions:
        if a.data.get("requested") and a.kind == REPLACE and a.node not in allowed + waiting:
            (allowed if len(allowed) < budget else waiting).append(a.node)
    out = [a for a in actions if not (a.data.get("requested") and a.node in waiting)]
    if waiting:
        out += alert(
            "replace-budget",
            f"{timers.breaker_limit(cluster_nodes)} requested replacements within "
            f"{timers.breaker_window_seconds} s; {', '.join(waiting[:10])}{' ...' if len(waiting) > 10 else ''}"
            " wait for the window to pass",
            snap,
            raised,
        )
    return out
