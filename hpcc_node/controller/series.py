"""The controller's own series (hpcc_contract/metrics.py SERIES), written once a loop to TEXTFILE_CONTROLLER in
node_exporter's textfile directory on the head: the last loop's seconds, the loops run holding the lease, actions
by kind, the ledger's slots by group and state, spares held, replacements by group and reason, alerts raised, and
the membership generation published. Fed from what a loop has anyway (its snapshot, decide()'s actions, the
executor's slots and publication): nothing here reads a store or a clock.

The counters live in memory and start at 0 with the process: Prometheus' rate() and increase() take a counter's
reset ("Counter", https://prometheus.io/docs/concepts/metric_types/#counter). A counter's known label values are
written at 0 from the start, so its first increment is seen by rate() ("Avoid missing metrics",
https://prometheus.io/docs/practices/instrumentation/#avoid-missing-metrics).
"""

from __future__ import annotations

import logging
from typing import AbstractSet, Dict, List, Mapping, Optional, Sequence, Tuple

from hpcc_contract.metrics import JOB_NODE_LABEL, TEXTFILE_CONTROLLER
from hpcc_contract.taxonomy import POLICIES
from hpcc_node.metrics import Sample, render, write_textfile

from . import model as m
from .health.spares import spare_reservation
from .membership import Published
from .slurm_records import JOB_BASE_STATES

SLOT_STATES = (m.BOOTING, m.READY, m.DRAINING, m.REPLACING, m.FAILED, m.REMOVING, m.ENDED)
KINDS = (
    m.LAUNCH,
    m.ADOPT,
    m.NAME,
    m.PUBLISH,
    m.DRAIN,
    m.DOWN,
    m.RESUME,
    m.SET_ADDR,
    m.TAG,
    m.REPLACE,
    m.MARK,
    m.REMOVE,
    m.FORGET,
    m.TERMINATE_ORPHAN,
    m.ALERT,
    m.PROTECT,
    m.WAIT_CAPACITY_BLOCK,
    m.REQUEUE,
    m.REBOOT,
    m.SPARES,
    m.START_NOW,
    m.DEEP_CHECK,
    m.METADATA,
)
REQUESTED, ROLL = "requested", "roll"  # `hpcc replace`; a group's roll to its new launch (decide_rolling.py)
REASONS = tuple(c.value for c, p in POLICIES.items() if p.replace) + (REQUESTED, ROLL)


def replacement_reason(a: m.Action, snap: m.Snapshot) -> Optional[str]:
    """The reason a replacement starts (its failure class, `requested` or `roll`); None when the action is not one:
    another kind, or a slot already replacing (the same replacement finished, counted when it started)."""
    if a.kind != m.REPLACE:
        return None
    slot = snap.slots.get(a.node)
    if slot is not None and slot.state == m.REPLACING:
        return None
    return a.why.failure or (REQUESTED if a.data.get("requested") else ROLL)


# Slurm's queue and nodes, from the jobs and nodes the loop reads anyway (slurm_records.py): nothing read again.
# One state a node, the most telling first (sinfo(1), "NODE STATE CODES": DRAIN and NOT_RESPONDING are flags on a
# base state); a job's base state (squeue(1), "JOB STATE CODES"), lower case. The ones written at 0 from the start
# (rate() and absence both read them); any other base state is written when Slurm shows it.
SLURM_NODE_STATES = ("down", "drain", "allocated", "mixed", "idle", "other")
SLURM_JOB_STATES = ("pending", "running", "completing")
JOB_NAME_CHARS = 64  # a job's name is the user's text: a label value, cut (Slurm allows 200)


def slurm_node_state(states: AbstractSet[str]) -> str:
    if states & {"DOWN", "NOT_RESPONDING", "FAIL"}:
        return "down"
    if states & {"DRAIN", "DRAINING", "DRAINED"}:
        return "drain"
    for state in ("allocated", "mixed", "idle"):
        if state.upper() in states:
            return state
    return "other"


def slurm_samples(snap: m.Snapshot, groups: Sequence[str]) -> List[Sample]:
    """Slurm's nodes by group and state, its jobs by state, and each running job's nodes (value 1, the job's id,
    node, owner and name as labels: a dashboard or `hpcc top` joins a node's GPU series to its job). None
    without Slurm. A node the ledger does not know (the head) counts under group ""."""
    if snap.slurm is None:
        return []
    group_of = {name: slot.group for name, slot in snap.slots.items()}
    nodes = {(g, st): 0 for g in groups for st in SLURM_NODE_STATES}
    for name, node in snap.slurm.items():
        key = (group_of.get(name, ""), slurm_node_state(node.states))
        nodes[key] = nodes.get(key, 0) + 1
    jobs = {st: 0 for st in SLURM_JOB_STATES}
    for job in snap.jobs:
        state = job.state.lower() if job.state in JOB_BASE_STATES or job.state == "COMPLETING" else "other"
        jobs[state] = jobs.get(state, 0) + 1
    out = [Sample("hpcc_slurm_nodes", {"group": g, "state": st}, n) for (g, st), n in nodes.items()]
    out += [Sample("hpcc_slurm_jobs", {"state": st}, n) for st, n in jobs.items()]
    out += [
        Sample(
            "hpcc_slurm_job_node_info",
            {"job_id": job.job_id, JOB_NODE_LABEL: node, "user": job.user, "job_name": job.name[:JOB_NAME_CHARS]},
            1,
        )
        for job in snap.jobs
        if job.state == "RUNNING"
        for node in sorted(job.nodes)
    ]
    return out


def spares_held(groups: Sequence[str], snap: m.Snapshot, actions: Sequence[m.Action]) -> Dict[str, int]:
    """Nodes in each group's spares reservation after the loop: as observed, or as this loop's SPARES set it."""
    held = {g: len(snap.reservations.get(spare_reservation(g), ())) for g in groups}
    for a in actions:
        if a.kind == m.SPARES:
            held[a.group] = len(a.data.get("nodes", ()))
    return held


class ControllerSeries:
    def __init__(self, directory: Optional[str] = None):
        self.directory = directory  # None: kept in memory, never written (the tests, the scale simulator)
        self.seconds = 0.0
        self.loops = 0
        self.actions: Dict[str, int] = {k: 0 for k in KINDS}
        self.replacements: Dict[Tuple[str, str], int] = {}
        self.alerts = 0
        self.alerts_seen: Optional[Dict[str, float]] = None  # the ledger's alerts as the last loop read them
        self.nodes: Dict[Tuple[str, str], int] = {}
        self.spares: Dict[str, int] = {}
        self.generation = 0
        self.slurm: List[Sample] = []

    def looped(
        self,
        snap: m.Snapshot,
        actions: Sequence[m.Action],
        slots: Mapping[str, m.Slot],
        published: Optional[Published],
        groups: Sequence[str],
    ) -> None:
        """One loop run holding the lease: its actions, and the cluster as it left it. An alert is counted when a
        loop reads it in the ledger newer than the loop before did (the executor's own alerts and a failed
        launch's alike; the first loop of a process reads the ones raised before it, not counted)."""
        self.loops += 1
        for a in actions:
            self.actions[a.kind] = self.actions.get(a.kind, 0) + 1
            reason = replacement_reason(a, snap)
            if reason is not None:
                self.replacements[(a.group, reason)] = self.replacements.get((a.group, reason), 0) + 1
        for g in groups:
            for reason in REASONS:
                self.replacements.setdefault((g, reason), 0)
        if self.alerts_seen is not None:
            self.alerts += sum(1 for k, at in snap.alerts.items() if at > self.alerts_seen.get(k, float("-inf")))
        self.alerts_seen = dict(snap.alerts)
        every = sorted(set(groups) | {s.group for s in slots.values()})
        self.nodes = {(g, state): 0 for g in every for state in SLOT_STATES}
        for s in slots.values():
            self.nodes[(s.group, s.state)] = self.nodes.get((s.group, s.state), 0) + 1
        self.spares = spares_held(groups, snap, actions)
        self.generation = published.generation if published is not None else snap.membership_generation
        self.slurm = slurm_samples(snap, groups)

    def samples(self) -> List[Sample]:
        out = [
            Sample("hpcc_controller_loop_seconds", {}, round(self.seconds, 3)),
            Sample("hpcc_controller_loops_total", {}, self.loops),
            Sample("hpcc_controller_alerts_total", {}, self.alerts),
            Sample("hpcc_controller_membership_generation", {}, self.generation),
        ]
        out += [Sample("hpcc_controller_actions_total", {"kind": k}, n) for k, n in self.actions.items()]
        out += [
            Sample("hpcc_controller_replacements_total", {"group": g, "reason": r}, n)
            for (g, r), n in self.replacements.items()
        ]
        out += [Sample("hpcc_controller_nodes", {"group": g, "state": s}, n) for (g, s), n in self.nodes.items()]
        out += [Sample("hpcc_controller_spares", {"group": g}, n) for g, n in self.spares.items()]
        return out + self.slurm

    def finished(self, seconds: float, log: logging.Logger) -> None:
        """After each loop, lease or not: its seconds, and the file; a failed write is logged, the loop goes on."""
        self.seconds = seconds
        if self.directory is None:
            return
        try:
            write_textfile(self.directory, TEXTFILE_CONTROLLER, render(self.samples()))
        except Exception as e:  # a full disk, a bug here: the controller's work is not the series'
            log.warning("the controller's series not written to %s: %s: %s", self.directory, type(e).__name__, e)
