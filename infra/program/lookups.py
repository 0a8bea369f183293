"""Read-only questions the program asks AWS before it creates anything: which AZ offers the node types,
which image a family or name filter names. What is decided from the answers, and kept, is in
`infra/program/components/pins.py`."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import pulumi
import pulumi_aws as aws

from infra.config.model import ClusterConfig
from infra.facts import az
from infra.facts.images import DLAMI_OWNER


class LookupFailed(pulumi.RunError):
    """A lookup found nothing usable; the message says which config field to change."""


def node_types(cluster: ClusterConfig) -> list[str]:
    return sorted({cluster.head_node.instance_type, *(g.instance_type for g in cluster.node_groups)})


def offered_azs(cluster: ClusterConfig) -> pulumi.Output[dict[str, set[str]]]:
    """Instance type -> the AZs of the region that offer it, for the cluster's node types."""
    types = node_types(cluster)
    offerings = aws.ec2.get_instance_type_offerings_output(
        location_type="availability-zone", filters=[{"name": "instance-type", "values": types}]
    )

    def collect(result) -> dict[str, set[str]]:
        offered: dict[str, set[str]] = {t: set() for t in types}
        for itype, zone in zip(result.instance_types, result.locations, strict=True):
            offered.setdefault(itype, set()).add(zone)
        return offered

    return offerings.apply(collect)


def first_az(offered: dict[str, set[str]], types: list[str]) -> str:
    found = az.first_az(offered, types)
    if found is None:
        raise LookupFailed("{}: {}".format(*az.no_common_az(types)))
    return found


def check_kept_az(zone: str, offered: dict[str, set[str]], cluster: ClusterConfig, region: str | None = None) -> str:
    for i, group in enumerate(cluster.node_groups):  # every group's type, as the user named it
        problem = az.kept_az_problem(
            zone,
            offered,
            cluster.head_node.instance_type,
            group.instance_type,
            configured=bool(cluster.availability_zone),
            region=region,
            compute_field=cluster.group_field(i, "instanceType"),
        )
        if problem:
            raise LookupFailed("{}: {}".format(*problem))
    return zone


@dataclass(frozen=True)
class ImageInfo:
    ami_id: str
    root_device_name: str
    architecture: str
    name: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> ImageInfo:
        return ImageInfo(**json.loads(text))


def image_source(cluster: ClusterConfig, arch: str = "x86_64") -> str:
    """Where the image comes from, in the config's words and for the nodes' architecture (changing either
    re-resolves the image)."""
    img = cluster.image
    if img.ami_id:
        return f"amiId {img.ami_id}"
    suffix = "" if arch == "x86_64" else f" ({arch})"  # x86_64 clusters keep the description they always had
    if img.name_filter:
        return f"nameFilter {img.name_filter}{suffix}"
    return f"family {img.resolved_family}{suffix}"


def image(cluster: ClusterConfig, arch: str = "x86_64") -> pulumi.Output[ImageInfo]:
    """The image the config names today for the nodes' architecture (a family's latest release, the newest
    match of a filter)."""
    img = cluster.image
    if img.ami_id:
        filters = [{"name": "image-id", "values": [img.ami_id]}]
        owners = None
    elif img.name_filter:
        filters = [{"name": "name", "values": [img.name_filter]}, {"name": "architecture", "values": [arch]}]
        owners = [DLAMI_OWNER]
    else:
        ami_id = aws.ssm.get_parameter_output(name=img.ssm_parameter_for(arch)).value
        filters = [{"name": "image-id", "values": [ami_id]}]
        owners = [DLAMI_OWNER]
    result = aws.ec2.get_ami_output(most_recent=True, owners=owners, filters=filters)

    def info(r) -> ImageInfo:
        if r.architecture != arch:
            raise LookupFailed(
                f"cluster.image: {r.id} ({r.name}) is {r.architecture}, but the nodes run {arch}; "
                f"pin an {arch} image with cluster.image.amiId"
            )
        return ImageInfo(r.id, r.root_device_name, r.architecture, r.name)

    return result.apply(info)
