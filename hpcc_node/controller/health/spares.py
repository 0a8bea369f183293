"""The spares (issue 20): `spares: N` on a group holds N idle healthy nodes in the Slurm reservation
hpcc-spares-<group>, taken when a node fails; and a held spare's deep check every 12 h, as an `sbatch` job in its
reservation. Part of the health rules (decide.py health_actions)."""

from __future__ import annotations

from typing import Dict, FrozenSet, List, Sequence

from ..assess import BUSY_STATES, HELD_STATES, held_by_person
from ..model import DEEP_CHECK, READY, SPARES, Action, Group, Slot, SlurmJob, Snapshot, Why
from ..slurm_records import DEEP_CHECK_JOB, DEEP_CHECK_USER
from ..timers import Timers

SPARES_PREFIX = "hpcc-spares-"


def _deep_check(job: SlurmJob) -> bool:
    """The controller's own deep check: its name and root as its owner, both as Slurm holds them (a user's job of
    the same name is the user's)."""
    return job.name == DEEP_CHECK_JOB and job.user == DEEP_CHECK_USER


def spare_reservation(group: str) -> str:
    return f"{SPARES_PREFIX}{group}"


def spares_actions(group: Group, slots: Sequence[Slot], snap: Snapshot) -> List[Action]:
    """The group's reservation holds max(0, spares - nodes out of service) idle healthy nodes: those it holds
    already first, then the highest-numbered idle ones. A group whose spares went to 0 has its reservation deleted
    (its nodes take jobs again)."""
    name = spare_reservation(group.name)
    if snap.slurm is None or (group.spares <= 0 and name not in snap.reservations):
        return []
    if group.spares <= 0:
        held = snap.reservations[name]
        cancel = sorted(j.job_id for j in snap.jobs if _deep_check(j) and j.nodes & held and not j.ended)
        freed = ", ".join(sorted(held)) or "none"
        why = Why("", f"spares: 0 now; released {freed}, reservation deleted")
        return [
            Action(
                SPARES,
                group=group.name,
                why=why,
                data={"reservation": name, "nodes": [], "exists": True, "cancel": cancel},
            )
        ]
    slurm = snap.slurm
    failing = {
        n
        for n, r in snap.reports.items()
        if not r.ok
        and n in snap.slots  # out this very loop: its
        and r.instance_id == snap.slots[n].instance_id
    }  # spare is released now, not a loop later
    healthy = [
        s
        for s in slots
        if s.state == READY
        and s.name in slurm
        and s.name not in failing
        and not (slurm[s.name].states & (HELD_STATES | {"NOT_RESPONDING"}))
    ]
    fine = {s.name for s in healthy}
    out_of_service = sum(1 for s in slots if s.name not in fine and not held_by_person(slurm.get(s.name)))
    want = max(0, group.spares - out_of_service)
    held = snap.reservations.get(name, frozenset())
    keep = [s.name for s in healthy if s.name in held]
    idle = [
        s.name
        for s in sorted(healthy, key=lambda s: -s.index)
        if s.name not in held and not (slurm[s.name].states & BUSY_STATES)
    ]
    chosen = sorted((keep + idle)[:want])
    if set(chosen) == set(held):
        return []
    released = sorted(set(held) - set(chosen))
    text = (f"hold {', '.join(chosen)}" if chosen else "hold none") + (
        f"; released {', '.join(released)} ({out_of_service} node(s) of the group out of service)" if released else ""
    )
    cancel = sorted(j.job_id for j in snap.jobs if _deep_check(j) and j.nodes & set(released) and not j.ended)
    return [
        Action(
            SPARES,
            group=group.name,
            why=Why("", f"spares: {text}"),
            data={
                "reservation": name,
                "nodes": chosen,
                "exists": bool(held) or name in snap.reservations,
                "cancel": cancel,
            },
        )
    ]


def deep_checks(group: Group, held: FrozenSet[str], snap: Snapshot, now: float, timers: Timers) -> List[Action]:
    """A deep check for each held spare that is idle, healthy, and has had none for Timers.spare_check_seconds:
    none reported (at boot, or a spare's) and none asked (a check that never reports, on a node booted before
    /usr/local/sbin/hpcc-deep, is asked again on the timer, not every loop). Never while one runs."""
    if timers.spare_check_seconds <= 0 or snap.slurm is None:
        return []
    running = {n for j in snap.jobs if _deep_check(j) and not j.ended for n in j.nodes}
    asked: Dict[str, float] = {}
    for e in snap.events:
        if e.kind == DEEP_CHECK and e.phase == "start":
            asked[e.node] = max(asked.get(e.node, 0.0), e.at)
    out = []
    for name in sorted(held - running):
        slot, r, node = snap.slots.get(name), snap.reports.get(name), snap.slurm.get(name)
        if (
            slot is None
            or slot.state != READY
            or r is None
            or not r.ok
            or r.instance_id != slot.instance_id
            or node is None
            or node.states & (BUSY_STATES | HELD_STATES | {"NOT_RESPONDING"})
        ):
            continue
        last = max(r.deep_checked, asked.get(name, 0.0)) or slot.since
        if now - last < timers.spare_check_seconds:
            continue
        out.append(
            Action(
                DEEP_CHECK,
                group=group.name,
                node=name,
                instance_id=slot.instance_id,
                why=Why(
                    "",
                    f"held spare, its last deep check {int(now - last)} s ago (every {timers.spare_check_seconds} s)",
                ),
                data={"reservation": spare_reservation(group.name), "partition": group.name},
            )
        )
    return out
