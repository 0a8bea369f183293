"""One slot at a time: is it ready, failed (which class, what evidence, hard or soft), or fine? Pure; decide()
calls it for every slot and then applies the budget rules (decide_failures.py).

Evidence strings name no instance id or address, so the same fault on many nodes has one signature (systemic).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional

from hpcc_contract.taxonomy import FailureClass

from .model import (
    ALERT_REASON,
    BOOTING,
    DRAINING,
    GONE,
    READY,
    REASON_PREFIX,
    SHRINK,
    Group,
    Instance,
    Report,
    Slot,
    SlurmNode,
    Snapshot,
)
from .timers import Timers

# ReturnToService=1 (templates/steps/slurm.sh.j2) keeps such a node DOWN: its agent's next verdict (the boot checks
# again: they run once a boot) decides.
UNEXPECTED_REBOOT = "Node unexpectedly rebooted"
# Reasons Slurm writes itself (slurmctld's own node reasons): not a person's, so they do not hold a node.
SLURM_OWN_REASONS = (
    "Not responding",
    UNEXPECTED_REBOOT,
    "Kill task failed",
    "Prolog error",
    "Epilog error",
    "batch job complete failure",
    "Low RealMemory",
    "Low socket*core*thread count",
    "NO NETWORK ADDRESS FOUND",
    "Unexpected registration",
)
HELD_STATES = frozenset({"DRAIN", "DOWN", "FAIL"})
BUSY_STATES = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})
# EC2 scheduled events (DescribeInstanceStatus `Events[].Code`): each needs the instance gone or rebooted by AWS.
SCHEDULED_EVENTS = ("instance-retirement", "instance-stop", "instance-reboot", "system-reboot", "system-maintenance")


@dataclass(frozen=True)
class Verdict:
    kind: str  # "ready" | "failure" | "ended" | "resume" | "undrain" | "set-address" | "cb-drain"
    failure: str = ""
    evidence: str = ""
    hard: bool = True


def hpcc_reason(node: Optional[SlurmNode]) -> bool:
    return node is not None and node.reason.startswith(REASON_PREFIX)


def held_by_person(node: Optional[SlurmNode]) -> bool:
    """Drained or down with a reason neither the controller's nor Slurm's own: a person's, never undone."""
    if not node or not (node.states & HELD_STATES):
        return False
    reason = node.reason.strip()
    return bool(reason) and not reason.startswith(REASON_PREFIX) and not reason.startswith(SLURM_OWN_REASONS)


def drained(node: Optional[SlurmNode]) -> bool:
    """No job left on a draining node (Slurm shows DRAINED: DRAIN without ALLOCATED/MIXED/COMPLETING)."""
    return node is None or ("DRAIN" in node.states and not (node.states & BUSY_STATES)) or "DOWN" in node.states


def registered(node: Optional[SlurmNode], inst: Instance) -> bool:
    """slurmd registered from this instance: Slurm knows its address and hears from it."""
    return (
        node is not None
        and node.addr == inst.private_ip
        and not (node.states & {"NOT_RESPONDING", "POWERED_DOWN", "FUTURE", "INVALID_REG"})
    )


def signature(failure: str, evidence: str) -> str:
    """The failure's class and evidence without a node's own details (ids, addresses, numbers)."""
    generic = re.sub(r"\bi-[0-9a-f]+\b|\b\d+\.\d+\.\d+\.\d+\b|\b\d+\b", "#", evidence)
    return f"{failure}:{generic}"


def block_phase(group: Group, now: float, timers: Timers) -> str:
    """before | active | ending (EC2's warning is due: drain) | over (instances are being reclaimed); active
    without a Capacity Block."""
    block = group.capacity_block
    if block is None:
        return "active"
    if now < block.start:
        return "before"
    if now >= block.end - timers.capacity_block_termination_seconds:
        return "over"
    if now >= block.end - timers.capacity_block_warning_seconds:
        return "ending"
    return "active"


def _silent(slot: Slot, report: Optional[Report], now: float, timers: Timers) -> bool:
    """In service, and its status unwritten past the heartbeat timeout: its agent, or the node, stopped."""
    return (
        slot.state in (READY, DRAINING)
        and report is not None
        and report.instance_id == slot.instance_id
        and bool(report.heard)
        and now - report.heard > timers.heartbeat_timeout_seconds
    )


def _not_responding(slot: Slot, node: Optional[SlurmNode]) -> bool:
    return slot.state in (READY, DRAINING) and node is not None and "NOT_RESPONDING" in node.states


def gone_quiet(slot: Slot, snap: Snapshot, now: float, timers: Timers) -> bool:
    """Neither Slurm nor S3 hears from it: never published as a ready member, whatever the systemic guard decides."""
    return _not_responding(slot, (snap.slurm or {}).get(slot.name)) and _silent(
        slot, snap.reports.get(slot.name), now, timers
    )


def answering(snap: Snapshot) -> bool:
    """Does Slurm hear from any ready node? Then a node it does not hear from, whose agent writes nothing to S3 either,
    is that machine's failure, not the head's network's."""
    slurm = snap.slurm or {}
    return any(
        s.state == READY and (n := slurm.get(s.name)) is not None and "NOT_RESPONDING" not in n.states
        for s in snap.slots.values()
    )


def assess(
    slot: Slot, group: Group, snap: Snapshot, now: float, timers: Timers, others_answer: bool = True
) -> Optional[Verdict]:
    """What this loop should know about one booting, ready or draining slot (`others_answer`: answering(snap))."""
    slurm: Mapping[str, SlurmNode] = snap.slurm or {}
    node = slurm.get(slot.name)
    inst = snap.instances.get(slot.instance_id)
    phase = block_phase(group, now, timers)
    if phase == "over":
        if inst is not None and inst.state not in GONE:
            return None
        return Verdict("ended", evidence="capacity block ended")
    if phase == "ending":
        if snap.slurm is not None and not (node and "DRAIN" in node.states):
            return Verdict("cb-drain", evidence="capacity block ends; EC2 reclaims its instances 30 min before")
        return None
    if inst is None:
        if now - slot.since > timers.describe_lag_seconds:
            return Verdict("failure", FailureClass.INSTANCE.value, "instance not found in EC2")
        return None
    if inst.state in GONE:
        return Verdict("failure", FailureClass.INSTANCE.value, f"instance {inst.state}")
    if inst.status_ok is False:
        return Verdict("failure", FailureClass.INSTANCE.value, "EC2 status check failed")
    events = [e for e in inst.events if e.startswith(SCHEDULED_EVENTS)]
    if events:
        return Verdict("failure", FailureClass.INSTANCE.value, f"scheduled {events[0]}", hard=False)
    report = snap.reports.get(slot.name)
    if report is not None and report.instance_id != slot.instance_id:
        report = None  # the predecessor's verdict
    if report is not None and not report.ok:
        return Verdict("failure", report.failure or FailureClass.BOOTSTRAP.value, report.evidence or "reported failed")
    if snap.slurm is not None and inst.private_ip and (node is None or node.addr != inst.private_ip):
        return Verdict("set-address", evidence=f"slurm address for the instance at {inst.private_ip}")
    silent = _silent(slot, report, now, timers)
    not_responding = _not_responding(slot, node)
    if not_responding and silent and others_answer:  # the hard signal and the soft one: the machine is gone
        return Verdict(
            "failure",
            FailureClass.INSTANCE.value,
            "unreachable: slurmd not responding and its status unwritten for over "
            f"{timers.heartbeat_timeout_seconds} s",
        )
    if not_responding and slot.state == READY:  # before the heartbeat: the hard signal wins over the soft one
        return Verdict("failure", FailureClass.HEALTH.value, "slurmd not responding")
    if silent:
        return Verdict(
            "failure",
            FailureClass.HEALTH.value,
            f"no heartbeat: its status unwritten for over "
            f"{timers.heartbeat_timeout_seconds} s (its agent, or the node, stopped)",
            hard=False,
        )
    if slot.state == BOOTING:
        up = report is not None and report.ok
        if up and (snap.slurm is None or registered(node, inst)):
            return Verdict("ready", evidence="bootstrap passed" + ("" if snap.slurm is None else ", slurmd registered"))
        if now - slot.since > timers.boot_grace_seconds:
            what = "slurmd never registered" if up else "no ready report"
            return Verdict(
                "failure", FailureClass.BOOTSTRAP.value, f"{what} within the boot grace ({timers.boot_grace_seconds} s)"
            )
        return None
    if (
        slot.state == READY
        and node is not None
        and node.states & HELD_STATES
        and hpcc_reason(node)
        and not node.reason.startswith(ALERT_REASON)  # an alert's drain ends with the alert (metric_alerts.py)
    ):
        return Verdict("resume", evidence=f"ready again (was: {node.reason})")
    if (
        slot.state == READY
        and node is not None
        and "DOWN" in node.states
        and node.reason.startswith(UNEXPECTED_REBOOT)
        and report is not None
        and report.ok
    ):
        return Verdict("resume", evidence=f"its checks pass after the reboot (was: {node.reason})")
    if slot.state == DRAINING and not slot.reason.startswith(SHRINK) and report is not None and report.ok:
        # A soft failure drains first and is replaced once drained; found again no more (a long tick's heartbeat
        # came late, an event cancelled), the node goes back to service instead of staying drained for no one.
        return Verdict("undrain", evidence=f"its failure cleared while it drained (was: {slot.reason})")
    return None
