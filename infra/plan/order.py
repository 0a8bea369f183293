"""The order a second `pulumi up` would take the changes in, and what AWS would refuse on the way.

The engine (pulumi/pulumi pkg/resource/deploy/step_generator.go) walks the program's resources in dependency
order: creates, updates and create-before-delete replacements as it reaches them; a replacement marked
`deleteBeforeReplace` first deletes the dependents that must be replaced with it (calculateDependentReplacements:
those whose inputs read it or another of them, and whose provider diff then replaces them), in reverse dependency
order, then the resource itself, then creates it. The old copies of other replaced resources, and deleted
resources, go last, in reverse dependency order of the old state. This is one serialisation of that walk.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from graphlib import TopologicalSorter

from infra.plan.guard import Change
from infra.plan.paths import parse_path

SUBNET = "aws:ec2/subnet:Subnet"
INSTANCE = "aws:ec2/instance:Instance"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
PLACEMENT = "aws:ec2/placementGroup:PlacementGroup"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
# What puts network interfaces in a subnet, and the input that names it (AWS's DeleteSubnet refuses while any is there)
IN_SUBNET = {"aws:fsx/lustreFileSystem:LustreFileSystem": "subnetIds", "aws:ec2/natGateway:NatGateway": "subnetId"}


@dataclass(frozen=True)
class Step:
    op: str  # "create" or "delete" (an update changes nothing AWS checks here)
    name: str
    old: bool  # the step acts on the old plan's copy


def _graph(records: list[dict]) -> dict[str, set[str]]:
    names = {r["name"] for r in records}
    return {r["name"]: {d for d in r.get("dependsOn") or [] if d in names} for r in records if r.get("custom", True)}


def _topo(records: list[dict]) -> list[str]:
    graph = _graph(records)
    return [n for n in TopologicalSorter(graph).static_order() if n in graph]


def _dependents(records: list[dict]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for name, deps in _graph(records).items():
        for d in deps:
            out.setdefault(d, set()).add(name)
    return out


def _dependent_replacements(root: str, old: dict[str, dict], by_name: dict[str, Change], order: list[str]) -> list[str]:
    """The replaced resources whose replacement comes from reading `root` (or another of these): deleted first."""
    below, todo = set(), [root]
    dependents = _dependents(list(old.values()))
    while todo:
        for d in dependents.get(todo.pop(), ()):
            if d not in below:
                below.add(d)
                todo.append(d)
    chosen, replace_set = [], {root}
    for name in order:
        change = by_name.get(name)
        if name not in below or change is None or change.action != "replace":
            continue
        deps = old[name].get("propertyDependencies") or {}
        props = {parse_path(p)[0] for p in change.properties}
        if any(set(deps.get(p, ())) & replace_set for p in props):
            chosen.append(name)
            replace_set.add(name)
    return chosen


def update_steps(changes: list[Change], old_records: list[dict], new_records: list[dict]) -> list[Step]:
    by_name = {c.name: c for c in changes}
    old = {r["name"]: r for r in old_records if r.get("custom", True)}
    new_opts = {r["name"]: r.get("options") or {} for r in new_records}
    old_order = _topo(old_records)
    steps: list[Step] = []
    gone: set[str] = set()
    for name in _topo(new_records):
        change = by_name.get(name)
        if change is None or change.action == "update":
            continue
        if change.action == "replace" and new_opts.get(name, {}).get("deleteBeforeReplace"):
            for d in reversed(_dependent_replacements(name, old, by_name, old_order)):
                if d not in gone:
                    steps.append(Step("delete", d, True))
                    gone.add(d)
            if name not in gone:
                steps.append(Step("delete", name, True))
                gone.add(name)
        steps.append(Step("create", name, False))
    for name in reversed(old_order):
        change = by_name.get(name)
        if change is not None and change.action in ("replace", "delete") and name not in gone:
            steps.append(Step("delete", name, True))
    return steps


def _launch_template(record: dict, side: dict[str, dict]) -> dict:
    lt_id = ((record.get("inputs") or {}).get("launchTemplate") or {}).get("id")
    return next((r for r in side.values() if r["type"] == LAUNCH_TEMPLATE and r.get("id") == lt_id), {})


def _subnet_of(record: dict, side: dict[str, dict]) -> str | None:
    """The subnet id a resource's interfaces are in (a node: its launch template's primary interface's)."""
    inputs = record.get("inputs") or {}
    if record["type"] in IN_SUBNET:
        value = inputs.get(IN_SUBNET[record["type"]])
        return value[0] if isinstance(value, list) and value else value
    if record["type"] == INSTANCE:
        nics = (_launch_template(record, side).get("inputs") or {}).get("networkInterfaces") or []
        return nics[0].get("subnetId") if nics else None
    return None


def _groups_of(record: dict, side: dict[str, dict]) -> set[str]:
    """The security group ids on a resource's interfaces (a node: its launch template's)."""
    inputs = record.get("inputs") or {}
    if record["type"] == INSTANCE:
        nics = (_launch_template(record, side).get("inputs") or {}).get("networkInterfaces") or []
        return {g for nic in nics for g in nic.get("securityGroups") or []}
    return set(inputs.get("securityGroupIds") or []) if record["type"] in IN_SUBNET else set()


def _vpc(record: dict, replaced: set[str], side: str) -> tuple[str, str]:
    """Which VPC a subnet is in: the VPC resource it reads, old or new copy when the update replaces it."""
    vpc = ((record.get("propertyDependencies") or {}).get("vpcId") or [""])[0]
    return vpc, side if vpc in replaced else ""


def _group(record: dict, sides: dict[str, dict], side: str, replaced: set[str]) -> tuple[str, str] | None:
    """A node's placement group (its launch template's), old or new copy when the update replaces the group."""
    if record["type"] != INSTANCE:
        return None
    name = ((_launch_template(record, sides[side]).get("inputs") or {}).get("placement") or {}).get("groupName")
    owner = next(
        (r["name"] for r in sides[side].values() if r["type"] == PLACEMENT and r["inputs"].get("name") == name), ""
    )
    return (name, side if owner in replaced else "") if name else None


def refusals(steps: list[Step], changes: list[Change], old_records: list[dict], new_records: list[dict]) -> list[str]:
    """What AWS refuses on the way: a subnet whose CIDR overlaps a live one in its VPC (CreateSubnet
    InvalidSubnet.Conflict), deleting a subnet that still holds interfaces or a security group still on one
    (DeleteSubnet, DeleteSecurityGroup DependencyViolation),
    nodes of one cluster placement group in two AZs (EC2 User Guide, "Placement groups": a cluster placement
    group is in a single Availability Zone)."""
    sides = {"old": {r["name"]: r for r in old_records}, "new": {r["name"]: r for r in new_records}}
    replaced = {c.name for c in changes if c.action == "replace"}
    live = {("old", n): r for n, r in sides["old"].items() if r.get("custom", True)}
    problems = []
    for step in steps:
        side = "old" if step.old else "new"
        record = sides[side][step.name]
        if step.op == "delete":
            live.pop((side, step.name), None)
            if record["type"] == SECURITY_GROUP:
                users = sorted(
                    f"{n} ({s})" for (s, n), r in live.items() if record.get("id") in _groups_of(r, sides[s])
                )
                if users:
                    problems.append(f"delete {step.name}: DependencyViolation, in use by {', '.join(users)}")
            if record["type"] == SUBNET:
                holders = sorted(
                    f"{n} ({s})" for (s, n), r in live.items() if _subnet_of(r, sides[s]) == record.get("id")
                )
                if holders:
                    problems.append(f"delete {step.name}: DependencyViolation, {', '.join(holders)} still in it")
            continue
        if record["type"] == SUBNET:
            cidr = ipaddress.ip_network(record["inputs"]["cidrBlock"])
            for (s, n), other in live.items():
                if (
                    other["type"] == SUBNET
                    and _vpc(other, replaced, s) == _vpc(record, replaced, side)
                    and ipaddress.ip_network(other["inputs"]["cidrBlock"]).overlaps(cidr)
                ):
                    problems.append(f"create {step.name}: InvalidSubnet.Conflict, {cidr} overlaps {n} ({s})")
        group = _group(record, sides, side, replaced)
        if group:
            az = (record.get("outputs") or {}).get("availabilityZone")
            others = sorted(
                {
                    (r.get("outputs") or {}).get("availabilityZone")
                    for (s, n), r in live.items()
                    if _group(r, sides, s, replaced) == group
                }
                - {None, az}
            )
            if az and others:
                problems.append(
                    f"create {step.name}: the cluster placement group {group[0]} has nodes in "
                    f"{', '.join(others)}, not {az}"
                )
        live[(side, step.name)] = record
    return problems
