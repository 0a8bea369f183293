"""`hpcc hostfile`: the compute nodes' hostfile rebuilt from the instances tagged for the cluster.

Order is deterministic (node name: compute-000, compute-001, ...) and formats are infra/hostfile.py's, the
same the stack output and the nodes' /etc/hpcc files use.
"""

from __future__ import annotations

from infra.catalog import lookup
from infra.hostfile import FORMATS, HostEntry
from infra.ops import OpsError
from infra.ops.aws import Aws
from infra.ops.status import instances


def slots_for(aws: Aws, instance_type: str, cache: dict[str, int]) -> int:
    """One rank per GPU, else one per physical core (infra/catalog.py), asking EC2 for types it lacks."""
    if instance_type not in cache:
        known = lookup(instance_type)
        if known is not None:
            cache[instance_type] = known.slots
        else:
            info = aws.call("ec2", "describe_instance_types", InstanceTypes=[instance_type])["InstanceTypes"][0]
            gpus = sum(g.get("Count", 0) for g in info.get("GpuInfo", {}).get("Gpus", []))
            cache[instance_type] = gpus or info["VCpuInfo"].get("DefaultCores", info["VCpuInfo"]["DefaultVCpus"])
    return cache[instance_type]


def entries(aws: Aws, cluster: str, role: str = "compute") -> list[HostEntry]:
    cache: dict[str, int] = {}
    out = [HostEntry(i.node, i.private_ip, slots_for(aws, i.instance_type, cache))
           for i in instances(aws, cluster) if i.role == role and i.state in ("pending", "running") and i.private_ip]
    return sorted(out, key=lambda e: e.name)


def render(aws: Aws, cluster: str, fmt: str = "openmpi") -> str:
    if fmt not in FORMATS:
        raise OpsError(f"--format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    found = entries(aws, cluster)
    if not found:
        raise OpsError(f"no running compute instances tagged hpcc:cluster={cluster} in {aws.region}; "
                       "check the name and region (`hpcc status --cluster NAME`)")
    return FORMATS[fmt](found)
