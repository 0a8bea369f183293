"""Which availability zone a cluster lives in: one rule for the program (infra/program/components/pins.py via
infra/program/lookups.py) and for preflight. Every node and the file system share one AZ, because EFA traffic does not
cross AZs or subnets (EC2 User Guide, "Elastic Fabric Adapter": "EFA traffic can't cross Availability Zones or VPCs").
"""

from __future__ import annotations

import re

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
    return AZ_FIELD, (
        f"no availability zone in this region offers all of {', '.join(types)}; "
        "choose other instance types or another aws:region"
    )


REGION_FIELD = "aws:region"
_AZ_REGION = re.compile(r"^([a-z]{2}(?:-[a-z]+)+-\d+)(?:[a-z]|-[a-z0-9-]+)$")  # us-east-1c, us-east-1-bos-1a


def region_of(az: str) -> str | None:
    """The region an AZ name belongs to (AZ names start with their region's: EC2 User Guide, "Regions and Zones")."""
    m = _AZ_REGION.match(az or "")
    return m.group(1) if m else None


def moved_region_problem(az: str, region: str) -> tuple[str, str] | None:
    """(field, message) when the AZ kept since the first `pulumi up` is in another region: the stack's region changed.
    Every regional resource would be replaced, and what the first `up` resolved (AZ, image) belongs to the old one."""
    old = region_of(az)
    if not old or old == region:
        return None
    return REGION_FIELD, (
        f"this cluster was created in {old} (its availability zone {az} is kept since its first `pulumi up`) and "
        f"cannot move to {region}: a region change is a new cluster. Every resource but the IAM roles would be "
        f"replaced, the file system with its data (refused while it is protected), and the image resolved in {old} "
        f"does not exist in {region}. Create a new stack for {region} (`pulumi stack init`, then `hpcc up`), copy "
        f"the data, then `hpcc destroy` this one; or set {REGION_FIELD} back to {old}"
    )


def kept_az_problem(
    az: str,
    offered: dict[str, set[str]],
    head_type: str,
    compute_type: str,
    configured: bool,
    region: str | None = None,
    compute_field: str = COMPUTE_FIELD,
) -> tuple[str, str] | None:
    """(field, message) when `az` is in another region than the stack's, or lacks a node type. A cluster never
    moves by itself: a new AZ means a new subnet, and with it a new file system."""
    moved = moved_region_problem(az, region) if region else None
    if moved:
        return moved
    for field, itype in ((compute_field, compute_type), (HEAD_FIELD, head_type)):
        if az in offered.get(itype, ()):
            continue
        where = ", ".join(sorted(offered.get(itype, ()))) or "no AZ of this region"
        if configured:
            return field, (
                f"{itype} is not offered in {az} ({AZ_FIELD}; offered in: {where}); "
                "choose another type or another availability zone"
            )
        return field, (
            f"{itype} is not offered in {az}, the availability zone this cluster has used since its first "
            f"`pulumi up` (offered in: {where}). Choose a type offered in {az}, or set {AZ_FIELD} to move "
            "the cluster, which replaces its subnets and file system"
        )
    return None
