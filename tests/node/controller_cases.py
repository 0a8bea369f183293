"""Plain-value clusters for the controller's tests: a group, its slots, instances, reports and Slurm nodes, all
ready, which a test then breaks in one place."""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import replace

from hpcc_contract.names import node_name
from hpcc_node.controller.decide import decide
from hpcc_node.controller.model import READY, Action, Group, Instance, LaunchRecord, Report, Slot, SlurmNode, Snapshot

NOW = 1_000_000.0
GPU = Group("gpu", "p5.48xlarge", 4, launch_template="lt-gpu", subnet_id="subnet-1")


def iid(group: str, index: int, gen: int = 0) -> str:
    return f"i-{zlib.crc32(group.encode()) % 0xFFF:03x}{gen:02x}{index:05x}"


def ip(index: int, gen: int = 0) -> str:
    return f"10.{gen}.{index // 250}.{index % 250 + 4}"


def cluster(group: Group = GPU, slurm: bool = True, n: int | None = None, **snap) -> Snapshot:
    """`n` (default: the group's count) ready nodes of one group, seen an hour after they were named."""
    slots, insts, reps, nodes = {}, {}, {}, {}
    for i in range(group.count if n is None else n):
        name, i_id = node_name(group.name, i), iid(group.name, i)
        slots[name] = Slot(name, group.name, i, i_id, READY, NOW - 3600, version=2)
        insts[i_id] = Instance(i_id, "running", NOW - 3700, group.name, ip(i), True, name_tag=name)
        reps[name] = Report(name, i_id, True, at=NOW - 60)
        nodes[name] = SlurmNode(name, frozenset({"IDLE"}), "", ip(i))
    return Snapshot(now=NOW, slots=slots, instances=insts, reports=reps, slurm=nodes if slurm else None, **snap)


def merge(groups: Iterable[Group], slurm: bool = True) -> Snapshot:
    parts = [cluster(g, slurm) for g in groups]
    first = parts[0]
    return replace(
        first,
        slots={k: v for p in parts for k, v in p.slots.items()},
        instances={k: v for p in parts for k, v in p.instances.items()},
        reports={k: v for p in parts for k, v in p.reports.items()},
        slurm={k: v for p in parts for k, v in (p.slurm or {}).items()} if slurm else None,
    )


def with_instance(snap: Snapshot, name: str, **changes) -> Snapshot:
    i_id = snap.slots[name].instance_id
    return replace(snap, instances={**snap.instances, i_id: replace(snap.instances[i_id], **changes)})


def with_launched(snap: Snapshot, *instances: Instance) -> Snapshot:
    """The instances in the snapshot, as this controller's launch (a ledger launch record holds their ids)."""
    rec = LaunchRecord(
        f"t-{len(snap.launches)}", instances[0].group, len(instances), NOW - 30, tuple(i.instance_id for i in instances)
    )
    return replace(
        snap, instances={**snap.instances, **{i.instance_id: i for i in instances}}, launches=snap.launches + (rec,)
    )


def with_slot(snap: Snapshot, name: str, **changes) -> Snapshot:
    return replace(snap, slots={**snap.slots, name: replace(snap.slots[name], **changes)})


def with_slurm(snap: Snapshot, name: str, states: Iterable[str], reason: str = "") -> Snapshot:
    node = snap.slurm[name]
    return replace(snap, slurm={**snap.slurm, name: replace(node, states=frozenset(states), reason=reason)})


def with_report(snap: Snapshot, name: str, ok: bool, failure: str = "", evidence: str = "") -> Snapshot:
    rep = Report(name, snap.slots[name].instance_id, ok, failure, evidence, NOW)
    return replace(snap, reports={**snap.reports, name: rep})


def run(snap: Snapshot, groups: Iterable[Group] = (GPU,), now: float = NOW, **timers) -> list[Action]:
    from hpcc_node.controller.timers import Timers

    return decide(snap, list(groups), now, Timers(**timers))


def kinds(actions: list[Action], node: str | None = None) -> list[str]:
    return [a.kind for a in actions if node is None or a.node == node]


def by_kind(actions: list[Action], kind: str) -> list[Action]:
    return [a for a in actions if a.kind == kind]


def nothing_but_publish(actions: list[Action]) -> dict[str, list[str]]:
    return {a.node or a.group: [a.kind] for a in actions if a.kind != "publish-membership"}
