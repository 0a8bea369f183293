"""Which availability zone a cluster lives in: one rule for the program (infra/components/pins.py via
infra/lookups.py) and for preflight. Every node and the file system share one AZ, because EFA traffic does not
cross AZs or subnets (EC2 User Guide, "Elastic Fabric Adapter": "EFA traffic can't cross Availability Zones or VPCs")."""

from __future__ import annotations

HEAD_FIELD = "cluster.headNode.instanceType"
COMPUTE_FIELD = "cluster.compute.instanceType"
AZ_FIELD = "cluster.availabilityZone"


def first_az(offered: dict[str, set[str]], types: list[str]) -> str | None:
    """The first (sorted) AZ offering every type; `offered` maps instance type -> AZs."""
    if not types:
        return None
    good = sorted(set.intersection(*(set(offered.get(t, ())) for t in types)))
    return good[0] if good else None


def no_common_az(types: list[str]) -> tuple[str, str]:
    return AZ_FIELD, (f"no availability zone in this region offers all of {', '.join(types)}; "
                      "choose other instance types or another aws:region")


def kept_az_problem(az: str, offered: dict[str, set[str]], head_type: str, compute_type: str,
                    configured: bool) -> tuple[str, str] | None:
    """(field, message) when `az` lacks a node type. A cluster never moves by itself: a new AZ means a new
    subnet, and with it a new file system."""
    for field, itype in ((COMPUTE_FIELD, compute_type), (HEAD_FIELD, head_type)):
        if az in offered.get(itype, ()):
            continue
        where = ", ".join(sorted(offered.get(itype, ()))) or "no AZ of this region"
        if configured:
            return field, (f"{itype} is not offered in {az} ({AZ_FIELD}; offered in: {where}); "
                           "choose another type or another availability zone")
        return field, (f"{itype} is not offered in {az}, the availability zone this cluster has used since its first "
                       f"`pulumi up` (offered in: {where}). Choose a type offered in {az}, or set {AZ_FIELD} to move "
                       "the cluster, which replaces its subnets and file system")
    return None
