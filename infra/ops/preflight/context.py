"""What preflight knows about the region: a `Context` that asks AWS each question once (types, offerings, the
kept AZ, the image, prices, the reservation), the node roles it checks, and the vCPU quota table. The rules that
read it are in infra/ops/preflight/rules.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property

from botocore.exceptions import ClientError

from hpcc_contract.names import Paths
from infra.config.model import StackConfig
from infra.config.nodes import NodeGroup
from infra.facts import prices
from infra.facts.az import first_az
from infra.facts.images import DLAMI_OWNER
from infra.ops.aws import Aws, error_code

# The config fields preflight's findings name.
HEAD_FIELD = "cluster.headNode.instanceType"
AZ_FIELD = "cluster.availabilityZone"
IMAGE_FIELD = "cluster.image"

# vCPU quotas (Service Quotas, service code ec2) by instance-family letter group: (on-demand, spot).
QUOTAS = {
    "standard": ("L-1216C47A", "L-34B43A08", "Standard (A, C, D, H, I, M, R, T, Z)"),
    "p": ("L-417A185B", "L-7212CCBC", "P"),
    "g": ("L-DB2E81BA", "L-3819A6DF", "G and VT"),
    "trn": ("L-2C3B7624", "L-6B0D517C", "Trn"),
    "inf": ("L-1945791B", "L-B5D1601B", "Inf"),
    "dl": ("L-6E869C2A", "L-85EED4F7", "DL"),
    "x": ("L-7295265B", "L-E3A00192", "X"),
    "f": ("L-74FC7D96", "L-88CF9481", "F"),
    "hpc": ("L-F7808C92", None, "HPC"),
}


def quota_group(instance_type: str) -> str:
    family = instance_type.split(".", 1)[0]
    for prefix in ("trn", "inf", "dl", "hpc"):
        if family.startswith(prefix):
            return prefix
    if family[0] in "pgxf" and not family.startswith("vt"):
        return family[0]
    if family.startswith("vt"):
        return "g"
    return "standard"


@dataclass
class Role:
    name: str  # head, or the node group's name (`compute` for a `compute:` block)
    field: str  # the instance type's config path, as the user wrote it
    instance_type: str
    count: int
    market: str = "on-demand"
    reservation: str | None = None
    base: str = "cluster.headNode"  # the config path of the head or of the group (cluster.nodeGroups[1])
    group: NodeGroup | None = None  # the group's config; None for the head

    def at(self, key: str) -> str:
        """The config path of one of this role's keys: cluster.nodeGroups[1].efa, cluster.compute.market."""
        return f"{self.base}.{key}"


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Context:
    aws: Aws
    cfg: StackConfig
    notes: dict = field(default_factory=dict)
    now: Callable[[], datetime] = utc_now  # injected: reservation start and end are compared with it
    pricing: object = None  # a boto3 "pricing" client; default: the Price List API's us-east-1 endpoint

    def pricing_client(self):
        if self.pricing is None:  # the Price List API answers in us-east-1 (and ap-south-1, eu-central-1) only
            import boto3

            self.pricing = boto3.client("pricing", region_name=prices.PRICE_LIST_REGION)
        return self.pricing

    @property
    def cluster(self):
        return self.cfg.cluster

    @cached_property
    def roles(self) -> list[Role]:
        """The head, then every node group (`compute:` is the one group named compute), fields as written."""
        return [Role("head", HEAD_FIELD, self.cluster.head_node.instance_type, 1), *self.groups]

    @cached_property
    def groups(self) -> list[Role]:
        c = self.cluster
        return [
            Role(
                g.name,
                c.group_field(i, "instanceType"),
                g.instance_type,
                g.count,
                g.market,
                g.capacity_reservation_id,
                base=c.group_field(i),
                group=g,
            )
            for i, g in enumerate(c.node_groups)
        ]

    @cached_property
    def types(self) -> list[str]:
        return sorted({r.instance_type for r in self.roles})

    @cached_property
    def type_info(self) -> dict[str, dict]:
        """EC2's facts for each type the region knows; a missing key means the region does not have it."""
        out = {}
        for t in self.types:
            try:
                out[t] = self.aws.call("ec2", "describe_instance_types", InstanceTypes=[t])["InstanceTypes"][0]
            except ClientError as e:
                if error_code(e) not in ("InvalidInstanceType", "InvalidParameterValue"):
                    raise
        return out

    @cached_property
    def offerings(self) -> dict[str, set[str]]:
        """AZ -> the configured types it offers."""
        out: dict[str, set[str]] = {}
        for o in self.aws.pages(
            "ec2",
            "describe_instance_type_offerings",
            "InstanceTypeOfferings",
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": self.types}],
        ):
            out.setdefault(o["Location"], set()).add(o["InstanceType"])
        return out

    @cached_property
    def offered(self) -> dict[str, set[str]]:
        """Instance type -> the AZs offering it (the orientation infra/facts/az.py takes)."""
        out: dict[str, set[str]] = {t: set() for t in self.types}
        for zone, have in self.offerings.items():
            for t in have:
                out.setdefault(t, set()).add(zone)
        return out

    @cached_property
    def kept_az(self) -> str | None:
        """The AZ an earlier `pulumi up` of this cluster pinned (infra/program/components/pins.py), if there was one."""
        try:
            return self.aws.call("ssm", "get_parameter", Name=Paths(self.cluster.name).pinned_az)["Parameter"]["Value"]
        except ClientError as e:
            if error_code(e) != "ParameterNotFound":
                raise
            return None

    @cached_property
    def az(self) -> str | None:
        """Where the program puts the cluster: the configured AZ, else the one kept since the first up, else the
        first (sorted) AZ offering every type (infra/facts/az.py)."""
        return self.cluster.availability_zone or self.kept_az or first_az(self.offered, self.types)

    @cached_property
    def architecture(self) -> str:
        """The one architecture every node type runs (x86_64 first), which the image is resolved for
        (infra/config/validators/type_rules.py); x86_64 when the types disagree (type_facts says so)."""
        common = {"x86_64", "arm64"}
        for role in self.roles:
            info = self.type_info.get(role.instance_type)
            if info is not None:
                common &= set(info.get("ProcessorInfo", {}).get("SupportedArchitectures", []))
        return next((a for a in ("x86_64", "arm64") if a in common), "x86_64")

    @cached_property
    def image(self) -> dict | None:
        """The AMI the program would use, or None (the reason is in notes['image'])."""
        img = self.cluster.image
        try:
            if img.ami_id:
                how = f"amiId {img.ami_id}"
                found = self.aws.call("ec2", "describe_images", ImageIds=[img.ami_id])["Images"]
            elif img.name_filter:
                how = f"nameFilter {img.name_filter!r} (owner {DLAMI_OWNER})"
                found = self.aws.call(
                    "ec2",
                    "describe_images",
                    Owners=[DLAMI_OWNER],
                    Filters=[
                        {"Name": "name", "Values": [img.name_filter]},
                        {"Name": "architecture", "Values": [self.architecture]},
                    ],
                )["Images"]
            else:
                param = img.ssm_parameter_for(self.architecture)
                how = f"family {img.resolved_family} (SSM parameter {param})"
                try:
                    ami = self.aws.call("ssm", "get_parameter", Name=param)["Parameter"]["Value"]
                except ClientError as e:
                    if error_code(e) != "ParameterNotFound":
                        raise
                    self.notes["image"] = f"{how}: the parameter does not exist in {self.aws.region}"
                    return None
                found = self.aws.call("ec2", "describe_images", ImageIds=[ami])["Images"]
        except ClientError as e:
            if error_code(e).startswith("InvalidAMIID"):
                found = []
            else:
                raise
        if not found:
            self.notes.setdefault("image", f"{how}: no such image in {self.aws.region}")
            return None
        return max(found, key=lambda i: i.get("CreationDate", ""))


def offered_list(ctx: Context, itype: str) -> str:
    """The AZs of the region that offer the type, for a finding's advice."""
    azs = sorted(az for az, have in ctx.offerings.items() if itype in have)
    return ", ".join(azs) if azs else "none"
