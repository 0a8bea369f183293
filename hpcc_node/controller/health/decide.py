"""What the controller does about a running node's health verdict (hpcc_node/health/verdict.py), before the
generic failure rules (decide_failures.py) see it. Pure; decide() calls health_actions once a loop.

For each node whose report is a failed verdict:
- systemic first: many nodes failing the same check the same way within the window (a driver change, a parser
  bug, a Lustre server hiccup) is the cluster's fault: one alert and no node touched, for a bounded hold, then a
  canary (systemic_guard.py);
- out of service: DOWN when the verdict says so (Slurm requeues the batch jobs that may be requeued; a drain never
  touches a running job), else DRAIN, with the reason `hpcc: <check>: <evidence>`;
- a job that already failed with the node around the fault is requeued (`scontrol requeue`), up to
  MaxBatchRequeue requeues (Timers.max_batch_requeue);
- once the node is idle: the catalog's cheaper remedy first (a reset or a reboot: `scontrol reboot`, which resets
  every GPU), once per instance; the node's next verdict decides: healthy -> resumed (assess.py), failing again
  or silent past the reboot timeout -> replaced, as is a `replace` remedy (contact support, a hardware fault);
- a boot-time health failure (the bootstrap's health step) counts as a failed boot: repeated, it protects the group.
Without Slurm, out of service means out of the hostfiles: the DOWN or DRAIN is recorded once per verdict, the
membership leaves the node out while its verdict fails (hosts.py), and a RESUME is recorded when it passes again;
the remedy is EC2's reboot, and replacement as above.
With `spares: N` on a group, N idle healthy nodes are held by the Slurm reservation hpcc-spares-<group>; each node
of the group out of service releases one, so a requeued job starts at once, and the replacement, once ready and
idle, is held in its place (level-triggered: the reservation is recomputed every loop). A held spare runs the deep
checks again every Timers.spare_check_seconds, as a Slurm job in the reservation (Slurm then sees it busy); a
released spare's running check is cancelled, so the requeued job never waits for it. A failed deep check is a
failed verdict like any other: the spare is drained and replaced, and another node is held.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from hpcc_contract.taxonomy import FailureClass
from hpcc_node.health.verdict import CheckResult, slurm_reason

from ..assess import BUSY_STATES, HELD_STATES, drained, hpcc_reason, signature
from ..decide_failures import Failure, alert
from ..model import (
    BOOTING,
    DOWN,
    DRAIN,
    READY,
    REBOOT,
    REQUEUE,
    RESUME,
    START_NOW,
    Action,
    Group,
    Report,
    Slot,
    SlurmNode,
    Snapshot,
    Why,
)
from ..systemic_guard import alert_key, bursts, released
from ..timers import Timers
from .spares import deep_checks, spare_reservation, spares_actions

HEALTH = FailureClass.HEALTH.value
FAILED_JOB_STATES = ("FAILED", "NODE_FAIL")


def health_signature(check: str, evidence: str) -> str:
    """The fault without the node's own details: PCI addresses and GPU indexes go, the Xid number stays (Xid 79 on
    every node is one fault; Xid 79 here and Xid 13 there are two)."""
    text = re.sub(r"\(?PCI:[0-9A-Fa-f:.]+\)?|\bGPU \d+\b", "", evidence)
    text = re.sub(r"\bXid (\d+)", r"Xid_\1", text)
    return signature(HEALTH, f"{check}: {' '.join(text.split())}")


def _verdict(snap: Snapshot, f: Failure) -> Optional[Report]:
    """The running node's failed verdict behind a health failure; None for other failures (a bootstrap report,
    slurmd not responding) and for a booting node's."""
    r = snap.reports.get(f.slot.name)
    if (
        f.failure != HEALTH
        or r is None
        or r.ok
        or r.instance_id != f.slot.instance_id
        or not r.action
        or r.action == "none"
        or f.slot.state == BOOTING
    ):
        return None
    return r


def _reason(r: Report) -> str:
    return slurm_reason(
        CheckResult(r.check or "health", "fail", r.evidence, r.action, r.remedy if r.remedy else "none")
    )


def _reboot_sig(instance_id: str) -> str:
    return f"{REBOOT}:{instance_id}"


def _rebooted_at(snap: Snapshot, instance_id: str) -> Optional[float]:
    times = [
        e.at for e in snap.events if e.kind == REBOOT and e.signature == _reboot_sig(instance_id) and e.phase == "start"
    ]
    return max(times) if times else None


OutTimes = Dict[str, Tuple[float, float]]


def _out_times(snap: Snapshot) -> OutTimes:
    """node -> (the last time it was taken out of service, the last time it was put back), in one pass over the
    events: a cluster without Slurm keeps no node state but these."""
    times: OutTimes = {}
    for e in snap.events:
        if e.phase == "start" and e.kind in (DOWN, DRAIN, RESUME):
            taken, back = times.get(e.node, (0.0, 0.0))
            times[e.node] = (max(taken, e.at), back) if e.kind != RESUME else (taken, max(back, e.at))
    return times


def _back_in_service(snap: Snapshot, outs: OutTimes) -> List[Action]:
    """Without Slurm: a ready node taken out of the hostfiles whose own instance now reports healthy is listed
    again (the membership follows the verdict); the RESUME records it."""
    out = []
    for name in sorted(outs):
        slot, r = snap.slots.get(name), snap.reports.get(name)
        if slot is None or slot.state != READY or r is None or not r.ok or r.instance_id != slot.instance_id:
            continue
        taken, back = outs[name]
        if taken > max(back, slot.since):
            out.append(
                Action(
                    RESUME,
                    group=slot.group,
                    node=name,
                    instance_id=slot.instance_id,
                    why=Why("", "its checks pass again: back in the hostfiles"),
                )
            )
    return out


def _requeues(r: Report, name: str, snap: Snapshot, timers: Timers) -> List[Action]:
    out = []
    for job in sorted(snap.jobs, key=lambda j: j.job_id):
        if (
            name in job.nodes
            and job.state in FAILED_JOB_STATES
            and job.requeue
            and abs(job.end - r.at) <= timers.requeue_window_seconds
        ):
            if job.restarts >= timers.max_batch_requeue:
                continue  # Slurm's own bound: a job that keeps failing is left failed for a person
            out.append(
                Action(
                    REQUEUE,
                    node=name,
                    why=Why(HEALTH, f"job {job.job_id} failed on {name}: {r.evidence}"),
                    data={"job": job.job_id, "restarts": job.restarts, "user": job.user, "name": job.name},
                )
            )
    return out


def _start_now(snap: Snapshot, now: float, timers: Timers) -> List[Action]:
    """Jobs Slurm requeued off a node hpcc took out (DOWN within the requeue window) wait for their EligibleTime
    (Reason=BeginTime, about two minutes on): they may start at once, on a released spare. A job a user set to begin
    later than the window is left alone."""
    downs = sorted(
        {
            e.node
            for e in snap.events
            if e.kind == DOWN and e.phase == "start" and now - e.at <= timers.requeue_window_seconds
        }
    )
    if not downs:
        return []
    return [
        Action(
            START_NOW,
            data={"job": j.job_id, "user": j.user, "name": j.name},
            why=Why(
                HEALTH, f"job {j.job_id} requeued off {', '.join(downs)}: eligible now, not in {j.eligible - now:.0f} s"
            ),
        )
        for j in sorted(snap.jobs, key=lambda j: j.job_id)
        if j.state == "PENDING"
        and j.restarts >= 1
        and j.reason == "BeginTime"
        and 0 < j.eligible - now <= timers.requeue_window_seconds
    ]


def _one(
    f: Failure, r: Report, snap: Snapshot, now: float, timers: Timers, sig: str, outs: OutTimes
) -> Tuple[List[Action], Optional[Failure]]:
    """The actions for one node's failed verdict, and the failure to hand on to replacement (None: not yet)."""
    slot, name = f.slot, f.slot.name
    node: Optional[SlurmNode] = (snap.slurm or {}).get(name)
    why = Why(HEALTH, f"{r.check}: {r.evidence}" if r.check else r.evidence)
    common: Dict[str, Any] = dict(group=slot.group, node=name, instance_id=slot.instance_id, why=why)
    out: List[Action] = []
    if snap.slurm is not None:
        held = node is not None and bool(node.states & HELD_STATES) and hpcc_reason(node)
        if r.action == "down" and not (node is not None and "DOWN" in node.states and hpcc_reason(node)):
            out.append(Action(DOWN, data={"reason": _reason(r), "signature": sig}, **common))
        elif r.action == "drain" and not held:
            out.append(Action(DRAIN, data={"reason": _reason(r), "signature": sig}, **common))
        out += _requeues(r, name, snap, timers)
        if out or not drained(node) or (node is not None and node.states & BUSY_STATES):
            return out, None  # a running job finishes (drain) or is requeued by Slurm (down) first
    elif r.action in ("down", "drain") and outs.get(name, (0.0, 0.0))[0] < r.at:  # once per verdict
        out.append(
            Action(
                DOWN if r.action == "down" else DRAIN,
                data={"reason": _reason(r), "signature": sig, "via": "hostfiles"},
                **common,
            )
        )
    rebooted = _rebooted_at(snap, slot.instance_id)
    if rebooted is not None:
        if r.at <= rebooted and now - rebooted <= timers.reboot_timeout_seconds:
            return out, None  # rebooting: its next verdict decides
        evidence = (
            f"{r.evidence} (again after a reboot)"
            if r.at > rebooted
            else f"{r.evidence} (no verdict within {timers.reboot_timeout_seconds} s of a reboot)"
        )
        return out, Failure(slot, HEALTH, f"{r.check}: {evidence}" if r.check else evidence, hard=True)
    if r.remedy in ("reset", "reboot"):
        out.append(
            Action(
                REBOOT,
                data={
                    "reason": f"hpcc: reboot for {r.remedy}: {_reason(r)[6:]}"[:200],
                    "signature": _reboot_sig(slot.instance_id),
                    "via": "slurm" if snap.slurm is not None else "ec2",
                },
                **common,
            )
        )
        return out, None
    if r.remedy == "replace":
        return out, Failure(slot, HEALTH, why.evidence, hard=True)
    return out, None  # remedy none (a full disk): out of service until its verdict clears, then resumed


def _systemic(
    verdicts: List[Tuple[Failure, Report, str]], snap: Snapshot, now: float, timers: Timers, cluster_nodes: int
) -> Set[str]:
    recent = [
        (e.signature, e.node)
        for e in snap.events
        if e.kind in (DOWN, DRAIN, REBOOT)
        and e.phase == "start"
        and e.signature.startswith(f"{HEALTH}:")
        and now - e.at <= timers.systemic_window_seconds
    ]
    current = [(sig, f.slot.name) for f, _, sig in verdicts]
    return bursts(recent, current, timers.systemic_threshold(cluster_nodes))


def health_actions(
    failures: List[Failure],
    snap: Snapshot,
    groups: Sequence[Group],
    now: float,
    timers: Timers,
    cluster_nodes: int,
    raised: set,
) -> Tuple[List[Action], List[Failure], Dict[str, str]]:
    """(the health rules' actions, the failures left for decide_failures: replacements and everything else, and
    without Slurm the nodes out of service: name -> reason, for the membership)."""
    out: List[Action] = []
    rest: List[Failure] = []
    unlisted: Dict[str, str] = {}
    verdicts: List[Tuple[Failure, Report, str]] = []
    for f in failures:
        r = _verdict(snap, f)
        if r is not None:
            verdicts.append((f, r, health_signature(r.check, r.evidence)))
        elif f.failure == HEALTH and f.slot.state == BOOTING:  # the boot checks failed: a failed boot
            rest.append(Failure(f.slot, FailureClass.BOOTSTRAP.value, f"health check at boot: {f.evidence}", f.hard))
        else:
            rest.append(f)
    bursts = _systemic(verdicts, snap, now, timers, cluster_nodes)
    outs = _out_times(snap) if snap.slurm is None else {}
    order = sorted(verdicts, key=lambda v: (v[0].slot.group, v[0].slot.index))
    go: Set[str] = set()  # the bursts' nodes the bounded guard lets through in this loop (a canary, then batches)
    for sig in sorted(bursts):
        names = [f.slot.name for f, _, s in order if s == sig]
        out += alert(
            alert_key(sig),
            f"{len(names)} node(s) failing the same health check ({sig}) within "
            f"{timers.systemic_window_seconds} s: the cluster's fault, no node touched for "
            f"{timers.systemic_hold_seconds} s, then one as a canary",
            snap,
            raised,
        )
        through, notes = released(sig, names, snap, now, timers)
        go |= through
        out += notes
    for f, r, sig in order:
        if (sig in bursts and f.slot.name not in go) or now - r.at < timers.health_settle_seconds:
            continue
        acts, handed = _one(f, r, snap, now, timers, sig, outs)
        out += acts
        if handed is not None:
            rest.append(handed)
        if snap.slurm is None and r.action in ("down", "drain"):
            unlisted[f.slot.name] = _reason(r)
    by_group: Mapping[str, List[Slot]] = {g.name: [s for s in snap.slots.values() if s.group == g.name] for g in groups}
    for group in groups:
        spares = spares_actions(group, by_group[group.name], snap)
        held = snap.reservations.get(spare_reservation(group.name), frozenset())
        out += spares + deep_checks(group, held & set(spares[0].data["nodes"]) if spares else held, snap, now, timers)
    if snap.slurm is not None:
        out += _start_now(snap, now, timers)
    else:
        out += _back_in_service(snap, outs)
    return out, rest, unlisted
