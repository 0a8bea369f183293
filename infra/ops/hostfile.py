"""`hpcc hostfile`: the ready compute nodes' hostfile, from the membership the controller published
(`membership.json` in the state bucket: hpcc_node/controller/membership.py), all groups or some.

Order is deterministic (by name: gpu-000, gpu-001, ..., holes left as they are) and formats are
hpcc_contract/hostfile.py's, the same the nodes' /etc/hpcc files use. Slots per node come from the group's instance type
(the groups parameter) through EC2's DescribeInstanceTypes, once per type."""

from __future__ import annotations

from hpcc_contract.hostfile import FORMATS, HostEntry
from infra.facts.instance_types import from_description
from infra.ops import OpsError, store
from infra.ops.aws import Aws
from infra.ops.status.cluster import status_ip

IN_HOSTFILE = ("ready",)  # membership states whose nodes take ranks: booting, draining and failed ones do not


def slots_for(aws: Aws, instance_type: str, cache: dict[str, int]) -> int:
    """The program's slots (InstanceType.slots: per GPU, per NeuronCore, else per core), from EC2's answer."""
    if instance_type not in cache:
        info = aws.call("ec2", "describe_instance_types", InstanceTypes=[instance_type])["InstanceTypes"][0]
        cache[instance_type] = from_description(info).slots
    return cache[instance_type]


def entries(aws: Aws, cluster: str, groups: list[str] | None = None) -> list[HostEntry]:
    where = store.names(aws, cluster)
    doc = store.read_membership(aws, where.bucket)
    types = {g["name"]: g.get("instance_type") for g in store.groups(aws, cluster)}
    nodes = [n for n in doc.get("nodes", []) if isinstance(n, dict)]
    known = sorted({str(n.get("group")) for n in nodes} | set(types))
    unknown = [g for g in groups or [] if g not in known]
    if unknown:
        raise OpsError(
            f"--group {', '.join(unknown)}: not a group of cluster {cluster}; its groups are: "
            f"{', '.join(known) or 'none yet'}"
        )
    cache: dict[str, int] = {}
    out = []
    for n in nodes:
        if n.get("state") not in IN_HOSTFILE or not status_ip(n.get("ip")) or (groups and n.get("group") not in groups):
            continue
        itype = types.get(n.get("group"))
        if not itype:
            raise OpsError(
                f"group {n.get('group')} of {n.get('name')} is not in {store.groups_parameter(cluster)}: "
                "its instance type (and slots) are unknown; run `hpcc up` to write the parameter"
            )
        out.append(HostEntry(str(n["name"]), str(n["ip"]), slots_for(aws, itype, cache)))
    return sorted(out, key=lambda e: e.name)


def format_problem(fmt: str) -> str | None:
    """What is wrong with a `--format` value, or None: the one check, used by the CLI before it asks AWS."""
    return None if fmt in FORMATS else f"--format must be one of {', '.join(FORMATS)}; got {fmt!r}"


def render(aws: Aws, cluster: str, fmt: str = "openmpi", groups: list[str] | None = None) -> str:
    problem = format_problem(fmt)
    if problem:
        raise OpsError(problem)
    found = entries(aws, cluster, groups)
    if not found:
        which = f" in group {', '.join(groups)}" if groups else ""
        raise OpsError(
            f"no ready compute node{which} in cluster {cluster}'s membership ({aws.region}); "
            f"`hpcc status --cluster {cluster}` shows where they are"
        )
    return FORMATS[fmt](found)
