"""Rolling replacement of a group whose launch changed in a way only new instances take (issue 37): pure.

The program publishes each group's launch-template version and launch spec (hpcc_contract/groups.py); every
instance carries those it was launched with as tags. A node whose spec tag is not the group's is stale: with
`updateStrategy: rolling` it is drained (its jobs finish) and replaced once idle, with `terminate` it goes DOWN
and is replaced now; `manual` leaves it to `hpcc replace`. Never more than `maxUnavailable` of the group out at
once (draining, replacing, booting: HyperPod's MaximumBatchSize, https://docs.aws.amazon.com/sagemaker/latest/
APIReference/API_RollingDeploymentPolicy.html); held spares first (idle by design), then nodes already out of
service, then by index. The replacement is decide_failures.down_and_replace's, uncounted: no failure budget,
breaker or systemic count. An instance without the tag (launched before it) is never rolled: reported only.

A new version that fails to boot stops the roll for its group: the group's bootstrap failures in a row (any
ready boot resets them) or its protection (decide_failures: repeated bootstrap failures) say so; one alert names
the cause and the nodes still draining for the roll go back to service. The IMDS options differ in place only:
ModifyInstanceMetadataOptions on each running instance (act.py), no replacement, whatever the strategy.

Without Slurm no job is visible: a rolling node is replaced without a drain, still within the bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from hpcc_contract.groups import ROLLING_STRATEGIES

from .assess import drained, held_by_person
from .decide_failures import alert, down_and_replace, slurm_reason
from .health.spares import spare_reservation
from .model import (
    BOOTING,
    DRAIN,
    DRAINING,
    FAILED,
    LIVE,
    MARK,
    METADATA,
    READY,
    REPLACING,
    RESUME,
    Action,
    Group,
    Instance,
    Slot,
    Snapshot,
    Why,
)

ROLL = "roll"  # the ledger reason prefix of a slot drained for a roll (decide.py leaves it to this module)
STRATEGIES = ROLLING_STRATEGIES  # the strategies the controller acts on; manual: hpcc replace
OUT = (BOOTING, REPLACING, DRAINING)  # a group's nodes out of service for the bound


@dataclass(frozen=True)
class Progress:
    """Where a group's roll stands (`hpcc status`): nodes on the group's spec, stale ones, those out for it."""

    group: str
    version: int
    total: int
    on: int
    stale: int
    unknown: int  # live instances without the spec tag: launched before it, never rolled
    draining: int
    booting: int

    @property
    def rolling(self) -> bool:
        return self.stale > 0

    def text(self) -> str:
        where = f"rolling to version {self.version}" if self.version else "rolling"
        parts = [f"{where}: {self.on} of {self.total} on it"]
        parts += [f"{n} {what}" for n, what in ((self.draining, "draining"), (self.booting, "booting")) if n]
        if self.unknown:
            parts.append(f"{self.unknown} version unknown (launched before version tags: hpcc replace them)")
        return ", ".join(parts)


def _live(slot: Slot, instances: Mapping[str, Instance]) -> Optional[Instance]:
    inst = instances.get(slot.instance_id)
    return inst if inst is not None and inst.state in LIVE else None


def is_stale(slot: Slot, group: Group, instances: Mapping[str, Instance]) -> bool:
    """Its instance runs another launch spec than the group's (both known)."""
    inst = _live(slot, instances)
    return bool(group.spec and inst is not None and inst.launch_spec and inst.launch_spec != group.spec)


def progress(group: Group, slots: Sequence[Slot], instances: Mapping[str, Instance]) -> Progress:
    active = [s for s in slots if s.group == group.name and s.state in (BOOTING, READY, DRAINING, FAILED, REPLACING)]
    live = [(s, _live(s, instances)) for s in active]
    return Progress(
        group.name,
        group.lt_version,
        len(active),
        sum(1 for _, i in live if i is not None and group.spec and i.launch_spec == group.spec),
        sum(1 for s, _ in live if is_stale(s, group, instances)),
        sum(1 for _, i in live if i is not None and not i.launch_spec),
        sum(1 for s in active if s.state == DRAINING),
        sum(1 for s in active if s.state in (BOOTING, REPLACING)),
    )


def rolling_drained(slot: Slot) -> bool:
    return slot.state == DRAINING and slot.reason.startswith(ROLL)


def _stopped(group: Group, snap: Snapshot) -> str:
    """Why the group's roll is stopped ("" when it is not): its new version does not boot."""
    gs = snap.group_states.get(group.name)
    if gs is None:
        return ""
    if gs.protected:
        return f"the group is protected: {gs.protected}"
    if gs.consecutive_failures:
        return f"{gs.consecutive_failures} replacement(s) in a row failed to boot"
    return ""


def _resume(slot: Slot, why: Why) -> List[Action]:
    common: Dict[str, Any] = dict(group=slot.group, node=slot.name, instance_id=slot.instance_id, why=why)
    return [Action(MARK, data={"state": READY, "reason": why.evidence}, **common), Action(RESUME, **common)]


def _order(slots: List[Slot], group: Group, snap: Snapshot) -> List[Slot]:
    """Held spares first, then nodes out of service (failed, down, failing their checks), then by index."""
    held = snap.reservations.get(spare_reservation(group.name), frozenset())
    slurm = snap.slurm or {}

    def failing(s: Slot) -> bool:
        node, rep = slurm.get(s.name), snap.reports.get(s.name)
        down = node is not None and bool(node.states & {"DOWN", "NOT_RESPONDING", "FAIL"})
        return s.state == FAILED or down or (rep is not None and not rep.ok)

    return sorted(slots, key=lambda s: (s.name not in held, not failing(s), s.index))


def _go(slot: Slot, group: Group, why: Why, snap: Snapshot) -> List[Action]:
    """Start one stale node's roll: drain it (rolling, with Slurm, jobs on it), or DOWN and replace it now."""
    node = (snap.slurm or {}).get(slot.name)
    if group.update_strategy == "rolling" and snap.slurm is not None and not drained(node):
        reason = f"{ROLL}: {why.evidence}"
        data = {"reason": slurm_reason(why), "slot_state": DRAINING, "slot_reason": reason}
        return [Action(DRAIN, group=slot.group, node=slot.name, instance_id=slot.instance_id, why=why, data=data)]
    return down_and_replace(slot, why, node, snap, counted=False)


def metadata_actions(group: Group, slots: Sequence[Slot], instances: Mapping[str, Instance]) -> List[Action]:
    """The group's IMDS hop limit on each running instance that has another: in place, never a replacement. Only
    from a program that says its launch spec (before it, the hop limit was not said either)."""
    out = []
    want = group.metadata_hop_limit
    for s in sorted(slots, key=lambda s: s.index):
        inst = instances.get(s.instance_id)
        if not group.spec or inst is None or inst.state != "running" or inst.hop_limit in (0, want):
            continue
        why = Why("", f"IMDS hop limit {inst.hop_limit} -> {want}: applied in place, no replacement")
        out.append(
            Action(METADATA, group=s.group, node=s.name, instance_id=s.instance_id, why=why, data={"hop_limit": want})
        )
    return out


def rolling_actions(
    groups: Sequence[Group], snap: Snapshot, touched: Set[str], raised: set
) -> Tuple[List[Action], Dict[str, Progress]]:
    """Each group's roll this loop, and where it stands. `touched`: nodes other rules act on this loop (left be)."""
    out: List[Action] = []
    where: Dict[str, Progress] = {}
    by_group: Dict[str, List[Slot]] = {}
    for s in snap.slots.values():
        by_group.setdefault(s.group, []).append(s)
    for group in groups:
        slots = [s for s in by_group.get(group.name, []) if s.name not in touched]
        out += metadata_actions(group, slots, snap.instances)
        prog = progress(group, by_group.get(group.name, []), snap.instances)
        where[group.name] = prog
        out += _roll(group, slots, by_group.get(group.name, []), prog, snap, raised)
    return out, where


def _roll(
    group: Group, slots: List[Slot], every: List[Slot], prog: Progress, snap: Snapshot, raised: set
) -> List[Action]:
    slurm = snap.slurm or {}
    in_roll = [s for s in slots if rolling_drained(s)]
    if group.update_strategy not in STRATEGIES or not group.spec:
        why = Why("", f"group {group.name}'s update strategy is {group.update_strategy}: the roll ends here")
        return [a for s in in_roll for a in _resume(s, why)]
    step = (
        f"rolling {group.name} to launch template version {group.lt_version}: {prog.on} of "
        f"{prog.total} done, {group.max_unavailable} at a time"
    )
    stopped = _stopped(group, snap)
    if stopped and prog.stale:
        out = alert(
            f"rolling-stopped:{group.name}:{group.spec}",
            f"rolling {group.name} to launch template version {group.lt_version} stopped: "
            f"{stopped}; {prog.stale} node(s) keep the old launch (fix the config and hpcc up, or hpcc replace)",
            snap,
            raised,
            group.name,
        )
        why = Why("", f"the roll of {group.name} stopped: {stopped}; back in service")
        return out + [a for s in in_roll for a in _resume(s, why)]
    out = []
    for s in in_roll:  # drained for the roll: replaced once its jobs are done (or at once, strategy terminate)
        gone = _live(s, snap.instances) is None  # died while draining: nothing left to wait for
        if not gone and not is_stale(s, group, snap.instances):
            out += _resume(s, Why("", "its launch is the group's again: back in service"))
        elif gone or group.update_strategy == "terminate" or drained(slurm.get(s.name)):
            out += down_and_replace(s, Why("", step), slurm.get(s.name), snap, counted=False)
    unavailable = sum(1 for s in every if s.state in OUT)
    room = group.max_unavailable - unavailable
    stale = [
        s
        for s in slots
        if s.state in (READY, FAILED) and is_stale(s, group, snap.instances) and not held_by_person(slurm.get(s.name))
    ]
    for s in _order(stale, group, snap)[: max(0, room)]:  # a failed one too: replacing, then booting, it is out
        out += _go(s, group, Why("", step), snap)
    return out
