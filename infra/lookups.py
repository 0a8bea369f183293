"""Read-only questions the program asks AWS before it creates anything: which AZ, which image."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.config import DLAMI_OWNER, ClusterConfig


class LookupFailed(pulumi.RunError):
    """A lookup found nothing usable; the message says which config field to change."""


def availability_zone(cluster: ClusterConfig) -> pulumi.Output[str]:
    """The configured AZ, or the first (sorted) AZ that offers both node types."""
    if cluster.availability_zone:
        return pulumi.Output.from_input(cluster.availability_zone)
    types = sorted({cluster.head_node.instance_type, cluster.compute.instance_type})
    offerings = aws.ec2.get_instance_type_offerings_output(
        location_type="availability-zone", filters=[{"name": "instance-type", "values": types}])

    def pick(result) -> str:
        offered: dict[str, set[str]] = {}
        for itype, az in zip(result.instance_types, result.locations):
            offered.setdefault(az, set()).add(itype)
        good = sorted(az for az, have in offered.items() if have >= set(types))
        if not good:
            raise LookupFailed(f"cluster.availabilityZone: no availability zone in this region offers all of "
                               f"{', '.join(types)}; choose other instance types or another aws:region")
        return good[0]

    return offerings.apply(pick)


@dataclass(frozen=True)
class ImageInfo:
    ami_id: str
    root_device_name: str
    architecture: str
    name: str


def image(cluster: ClusterConfig) -> pulumi.Output[ImageInfo]:
    img = cluster.image
    if img.ami_id:
        filters = [{"name": "image-id", "values": [img.ami_id]}]
        owners = None
    elif img.name_filter:
        filters = [{"name": "name", "values": [img.name_filter]}]
        owners = [DLAMI_OWNER]
    else:
        ami_id = aws.ssm.get_parameter_output(name=img.ssm_parameter).value
        filters = [{"name": "image-id", "values": [ami_id]}]
        owners = [DLAMI_OWNER]
    result = aws.ec2.get_ami_output(most_recent=True, owners=owners, filters=filters)

    def info(r) -> ImageInfo:
        if r.architecture != "x86_64":
            raise LookupFailed(f"cluster.image: {r.id} ({r.name}) is {r.architecture}; hpcc builds x86_64 clusters")
        return ImageInfo(r.id, r.root_device_name, r.architecture, r.name)

    return result.apply(info)

