"""`hpcc hostfile`: the compute nodes' hostfile rebuilt from the instances tagged for the cluster.

Order is deterministic (node name: compute-000, compute-001, ...) and formats are infra/hostfile.py's, the
same the stack output and the nodes' /etc/hpcc files use.
"""

from __future__ import annotations

from infra.hostfile import FORMATS, HostEntry
from infra.instance_facts import from_description
from infra.ops import OpsError
from infra.ops.aws import Aws
from infra.ops.status import instances


def slots_for(aws: Aws, instance_type: str, cache: dict[str, int]) -> int:
    """The program's slots (InstanceType.slots: per GPU, per NeuronCore, else per core), from EC2's answer."""
    if instance_type not in cache:
        info = aws.call("ec2", "describe_instance_types", InstanceTypes=[instance_type])["InstanceTypes"][0]
        cache[instance_type] = from_description(info).slots
    return cache[instance_type]


def entries(aws: Aws, cluster: str, role: str = "compute") -> list[HostEntry]:
    cache: dict[str, int] = {}
    out = [HostEntry(i.node, i.private_ip, slots_for(aws, i.instance_type, cache))
           for i in instances(aws, cluster) if i.role == role and i.state in ("pending", "running") and i.private_ip]
    return sorted(out, key=lambda e: e.name)


def format_problem(fmt: str) -> str | None:
    """What is wrong with a `--format` value, or None: the one check, used by the CLI before it asks AWS."""
    return None if fmt in FORMATS else f"--format must be one of {', '.join(FORMATS)}; got {fmt!r}"


def render(aws: Aws, cluster: str, fmt: str = "openmpi") -> str:
    problem = format_problem(fmt)
    if problem:
        raise OpsError(problem)
    found = entries(aws, cluster)
    if not found:
        raise OpsError(f"no running compute instances tagged hpcc:cluster={cluster} in {aws.region}; "
                       "check the name and region (`hpcc status --cluster NAME`)")
    return FORMATS[fmt](found)
