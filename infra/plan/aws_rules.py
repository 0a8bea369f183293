"""AWS API rules that moto does not enforce, checked as EC2/FSx would before accepting a request.

Sources: the EC2 User Guide (EFA, network cards, Capacity Blocks), the FSx for Lustre guide, and the
instance-type data itself (moto's copy of DescribeInstanceTypes: interfaces per card, EFA counts, the
markets a type is sold in).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import ipaddress
import zlib

# Deliberate copies of facts the program also holds (infra/render/userdata.py, infra/program/components/security.py):
# these rules play AWS's part and check the program independently, so they never import what they check.
# tests/test_one_place.py runs both sides on the same cases. "User data is limited to 16 KB, in raw form, before it is
# base64-encoded": https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-add-user-data.html
USER_DATA_LIMIT = 16 * 1024
# "allow inbound traffic on ports 988 and 1018-1023":
# https://docs.aws.amazon.com/fsx/latest/LustreGuide/limit-access-security-groups.html
LUSTRE_REQUIRED_PORTS = (988, *range(1018, 1024))
GZIP_MAGIC = b"\x1f\x8b"


class AwsRejected(Exception):
    """What AWS would answer: an error code and its message, for the named resource."""

    def __init__(self, resource: str, code: str, message: str):
        self.resource, self.code, self.message = resource, code, message
        super().__init__(f"{resource}: {code}: {message}")


def check_launch_template(name: str, inputs: dict, type_info: dict) -> None:
    net = type_info["NetworkInfo"]
    cards = {c["NetworkCardIndex"]: c for c in net.get("NetworkCards", [])}
    interfaces = inputs.get("networkInterfaces") or []
    if interfaces and inputs.get("vpcSecurityGroupIds"):
        raise AwsRejected(
            name,
            "InvalidParameterCombination",
            "Network interfaces and an instance-level security groups may not be specified on the same request",
        )
    seen: set[tuple[int, int]] = set()
    per_card: dict[int, int] = {}
    efa = 0
    for i, nic in enumerate(interfaces):
        card, dev, kind = (
            nic.get("networkCardIndex", 0),
            nic.get("deviceIndex"),
            nic.get("interfaceType") or "interface",
        )
        where = f"networkInterfaces[{i}] (card {card}, device {dev})"
        if dev is None:
            raise AwsRejected(name, "InvalidParameterValue", f"{where}: DeviceIndex is required")
        if (card, dev) in seen:
            raise AwsRejected(
                name, "InvalidParameterValue", f"{where}: two interfaces on the same card and device index"
            )
        seen.add((card, dev))
        if card not in cards:
            raise AwsRejected(
                name,
                "InvalidParameterValue",
                f"{where}: {type_info['InstanceType']} has {len(cards)} network card(s), indices 0-{len(cards) - 1}",
            )
        if kind not in cards[card].get("InterfaceTypes", ["interface"]):
            raise AwsRejected(
                name,
                "InvalidParameterValue",
                f"{where}: interface type {kind!r} is not supported on this card of {type_info['InstanceType']}",
            )
        per_card[card] = per_card.get(card, 0) + 1
        if per_card[card] > cards[card]["MaximumNetworkInterfaces"]:
            raise AwsRejected(
                name,
                "InvalidParameterValue",
                f"{where}: card {card} takes at most {cards[card]['MaximumNetworkInterfaces']} interfaces",
            )
        if kind in ("efa", "efa-only"):
            efa += 1
        if (card, dev) == (0, 0) and kind == "efa-only":
            raise AwsRejected(
                name, "InvalidParameterValue", f"{where}: an efa-only interface cannot be the primary interface"
            )
        if str(nic.get("associatePublicIpAddress")).lower() == "true" and len(interfaces) > 1:
            raise AwsRejected(
                name,
                "InvalidParameterCombination",
                "The associatePublicIPAddress parameter cannot be specified when launching with multiple network "
                "interfaces",
            )
    if len(interfaces) > net.get("MaximumNetworkInterfaces", len(interfaces)):
        raise AwsRejected(
            name,
            "InvalidParameterValue",
            f"{len(interfaces)} network interfaces requested; "
            f"{type_info['InstanceType']} takes at most {net['MaximumNetworkInterfaces']}",
        )
    if interfaces and (0, 0) not in seen:
        raise AwsRejected(name, "InvalidParameterValue", "no primary interface (network card 0, device index 0)")
    max_efa = (net.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0) if net.get("EfaSupported") else 0
    if efa > max_efa:
        raise AwsRejected(
            name,
            "InvalidParameterValue",
            f"{efa} EFA interfaces requested; {type_info['InstanceType']} supports {max_efa}",
        )
    if len({nic.get("subnetId") for nic in interfaces}) > 1:
        raise AwsRejected(
            name,
            "InvalidParameterValue",
            "all interfaces of an instance must be in one subnet here (EFA does not cross subnets)",
        )
    check_market(name, inputs, type_info)
    if inputs.get("userData"):
        decode_user_data(inputs["userData"], name)


def check_market(name: str, inputs: dict, type_info: dict) -> None:
    """The market must be one the type is sold in (InstanceTypeInfo.SupportedUsageClasses), and a Capacity Block
    launch names its reservation (EC2 User Guide, "Launch instances into a Capacity Block")."""
    market = (inputs.get("instanceMarketOptions") or {}).get("marketType") or "on-demand"
    classes = type_info.get("SupportedUsageClasses") or []
    if classes and market not in classes:
        raise AwsRejected(
            name,
            "Unsupported",
            f"{type_info['InstanceType']} is not offered as {market} (supported usage classes: {', '.join(classes)})",
        )
    target = (inputs.get("capacityReservationSpecification") or {}).get("capacityReservationTarget") or {}
    if market == "capacity-block" and not target.get("capacityReservationId"):
        raise AwsRejected(
            name,
            "InvalidParameterCombination",
            "market type capacity-block needs a capacity reservation target (the Capacity Block's id)",
        )


def decode_user_data(b64: str, name: str = "userData") -> str:
    """The script the instance runs: EC2 takes base64 of at most USER_DATA_LIMIT raw bytes (refusing anything
    else), and cloud-init unpacks gzip, which must therefore unpack. The policy pack decodes it too
    (policy/node_rules.py, standalone by design)."""
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise AwsRejected(name, "InvalidParameterValue", "Invalid BASE64 encoding of user data") from None
    if len(raw) > USER_DATA_LIMIT:
        raise AwsRejected(
            name, "InvalidParameterValue", f"user data is {len(raw)} bytes; the limit is {USER_DATA_LIMIT}"
        )
    if raw[:2] == GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error):
            raise AwsRejected(
                name, "InvalidParameterValue", "user data is gzip that does not decompress: cloud-init could not run it"
            ) from None
    return raw.decode("utf-8", errors="replace")


def check_placement_group(name: str, inputs: dict, existing: set[str]) -> None:
    strategy = inputs.get("strategy")
    if strategy not in ("cluster", "spread", "partition"):
        raise AwsRejected(
            name, "InvalidParameterValue", f"placement strategy {strategy!r}: use cluster, spread or partition"
        )
    group = inputs.get("name")
    if not group or len(group) > 255:
        raise AwsRejected(name, "InvalidParameterValue", "placement group name must be 1-255 characters")
    if group in existing:
        raise AwsRejected(name, "InvalidPlacementGroup.Duplicate", f"the placement group {group!r} already exists")


def check_instance_launch(
    name: str, inputs: dict, lt: dict, groups: dict[str, str], subnet_az: str, offered_azs: set[str]
) -> None:
    if lt.get("networkInterfaces") and (inputs.get("subnetId") or inputs.get("vpcSecurityGroupIds")):
        raise AwsRejected(
            name,
            "InvalidParameterCombination",
            "Network interfaces and an instance-level subnet ID or security groups may not be specified on the same "
            "request",
        )
    if inputs.get("availabilityZone") not in (None, subnet_az):
        raise AwsRejected(
            name,
            "InvalidParameterValue",
            f"the instance's AZ {inputs['availabilityZone']} differs from its subnet's AZ {subnet_az}",
        )
    placement = lt.get("placement") or {}
    group = placement.get("groupName")
    if group is not None:
        if group not in groups:
            raise AwsRejected(name, "InvalidPlacementGroup.Unknown", f"the placement group {group!r} is unknown")
        az = placement.get("availabilityZone")
        if az and az != subnet_az:
            raise AwsRejected(
                name, "InvalidParameterValue", f"placement AZ {az} differs from the subnet's AZ {subnet_az}"
            )
    if subnet_az not in offered_azs:
        raise AwsRejected(
            name,
            "Unsupported",
            f"{lt.get('instanceType')} is not offered in {subnet_az}; "
            f"offered in {', '.join(sorted(offered_azs)) or 'no AZ of this region'}",
        )


def lustre_ports_missing(ingress: list[dict], own_groups: set[str]) -> list[int]:
    """Required Lustre ports that no ingress rule admits from the file system's own groups."""
    return [
        port
        for port in LUSTRE_REQUIRED_PORTS
        if not any(_admits(rule, port, group) for rule in ingress for group in own_groups)
    ]


def _admits(perm: dict, port: int, source_group: str) -> bool:
    proto = perm.get("IpProtocol")
    if proto not in ("-1", "tcp", "6"):
        return False
    if proto in ("tcp", "6") and not perm.get("FromPort", 0) <= port <= perm.get("ToPort", 65535):
        return False
    return any(p.get("GroupId") == source_group for p in perm.get("UserIdGroupPairs", []))


def check_data_repository(name: str, inputs: dict, fs: dict, existing: int) -> None:
    lustre = fs.get("LustreConfiguration", {})
    if lustre.get("DeploymentType") == "SCRATCH_1":
        raise AwsRejected(
            name, "BadRequest", "data repository associations are not supported on SCRATCH_1 file systems"
        )
    if fs.get("_version") == "2.10":
        raise AwsRejected(name, "BadRequest", "data repository associations need Lustre 2.12 or later")
    if existing >= 8:
        raise AwsRejected(name, "ServiceLimitExceeded", "a file system takes at most 8 data repository associations")
    if not str(inputs.get("dataRepositoryPath", "")).startswith("s3://"):
        raise AwsRejected(name, "BadRequest", "dataRepositoryPath must be an s3:// URL")
    if not str(inputs.get("fileSystemPath", "")).startswith("/"):
        raise AwsRejected(name, "BadRequest", "fileSystemPath must start with /")


def check_cidr(name: str, cidr: str | None) -> None:
    if cidr is None:
        return
    try:
        ipaddress.ip_network(cidr, strict=True)
    except ValueError as e:
        raise AwsRejected(name, "InvalidParameterValue", f"{cidr}: {e}") from None


# S3 (https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html): moto creates any name.
BUCKET_NAME = r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"
BUCKET_PREFIXES_REFUSED = ("xn--", "sthree-", "amzn-s3-demo-")
BUCKET_SUFFIXES_REFUSED = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def check_bucket_name(name: str, bucket: str) -> None:
    import re

    if (
        not re.fullmatch(BUCKET_NAME, bucket or "")
        or ".." in bucket
        or bucket.startswith(BUCKET_PREFIXES_REFUSED)
        or bucket.endswith(BUCKET_SUFFIXES_REFUSED)
        or re.fullmatch(r"\d+\.\d+\.\d+\.\d+", bucket)
    ):
        raise AwsRejected(name, "InvalidBucketName", f"{bucket!r} breaks S3's bucket naming rules")


def _principals(statement: dict) -> list[str]:
    principal = statement.get("Principal")
    if principal == "*":
        return ["*"]
    values = (principal or {}).get("AWS", []) if isinstance(principal, dict) else []
    return [values] if isinstance(values, str) else list(values)


def check_bucket_policy(name: str, policy: dict, known_principals: set[str], blocks_public: bool) -> None:
    """What S3's PutBucketPolicy refuses and moto takes: a principal that does not exist ("Invalid principal in
    policy", S3 resolves role ARNs when the policy is set) and, with BlockPublicPolicy on, a public policy (one
    granting `*` without a condition: S3 User Guide, "The meaning of 'public'")."""
    for statement in policy.get("Statement", []):
        for principal in _principals(statement):
            if principal == "*" or principal.startswith("arn:aws:iam::*"):
                if blocks_public and statement.get("Effect") == "Allow" and not statement.get("Condition"):
                    raise AwsRejected(name, "AccessDenied", "the bucket blocks public policies (BlockPublicPolicy)")
            elif (
                principal.startswith("arn:aws:iam::") and ":root" not in principal and principal not in known_principals
            ):
                raise AwsRejected(name, "MalformedPolicy", f"Invalid principal in policy: {principal}")


# Parameter Store value limits: "Standard ... Maximum size of parameter value 4 KB", "Advanced ... 8 KB"; an
# Intelligent-Tiering parameter is made Advanced when its value is over 4 KB, so it holds 8 KB at most
# (Systems Manager User Guide, "Managing parameter tiers",
# https://docs.aws.amazon.com/systems-manager/latest/userguide/parameter-store-advanced-parameters.html; quotas:
# AWS General Reference, "AWS Systems Manager endpoints and quotas", https://docs.aws.amazon.com/general/latest/gr/ssm.html).
# Counted in UTF-8 bytes, never fewer than characters: the stricter reading.
SSM_STANDARD_LIMIT = 4 * 1024
SSM_ADVANCED_LIMIT = 8 * 1024
SSM_VALUE_LIMITS = {
    "Standard": SSM_STANDARD_LIMIT,
    "Advanced": SSM_ADVANCED_LIMIT,
    "Intelligent-Tiering": SSM_ADVANCED_LIMIT,
}


def widest_address(cidr: str) -> int:
    """The longest dotted form of an address EC2 may assign in the subnet (its host part is EC2's choice)."""
    return len(str(ipaddress.ip_network(cidr)[-1]))  # the last address has every octet at its largest


def launch_time_size(value: str, subnet_cidrs: list[str]) -> tuple[int, int, int]:
    """(the most bytes the value can take once EC2 has assigned addresses, how many of its lines are such
    addresses, the widest of them): a line that is an address in one of the subnets is counted at that subnet's
    widest address, because the address a real launch gets is not the one the plan's moto picked."""
    nets = [ipaddress.ip_network(c) for c in subnet_cidrs]
    size, addresses, widest = 0, 0, 0
    for line in value.split("\n"):
        try:
            ip = ipaddress.ip_address(line)
        except ValueError:
            size += len(line.encode())
            continue
        net = next((n for n in nets if ip in n), None)
        width = widest_address(str(net)) if net else len(line)
        size, addresses, widest = size + width, addresses + (net is not None), max(widest, width)
    return size + value.count("\n"), addresses, widest


class ValueTooLarge(AwsRejected):
    """A parameter value over its tier's limit; `fits`: for a value of addresses only, how many lines would fit."""

    def __init__(self, resource: str, message: str, fits: int | None):
        super().__init__(resource, "ValidationException", message)
        self.fits = fits


def check_parameter(name: str, inputs: dict, subnet_cidrs: list[str]) -> None:
    """PutParameter refuses a value over its tier's limit; moto takes any size. The value is sized as a real
    launch may write it (launch_time_size)."""
    tier = inputs.get("tier") or "Standard"
    value = inputs["insecureValue"] if inputs.get("insecureValue") is not None else inputs.get("value") or ""
    limit = SSM_VALUE_LIMITS.get(tier)
    if limit is None:
        raise AwsRejected(name, "ValidationException", f"tier {tier!r}: use Standard, Advanced or Intelligent-Tiering")
    size, addresses, widest = launch_time_size(value, subnet_cidrs)
    if size > limit:
        only_addresses = addresses == value.count("\n") + 1
        shown = f"{size} bytes once EC2 assigns its {addresses} addresses" if addresses else f"{size} bytes"
        raise ValueTooLarge(
            name,
            f"the parameter value is {shown}; the {tier} tier holds at most {limit} bytes",
            (limit + 1) // (widest + 1) if only_addresses else None,
        )


# "The first four IP addresses and the last IP address in each subnet CIDR block are not available for your use"
# (Amazon VPC User Guide, "Subnet CIDR blocks", https://docs.aws.amazon.com/vpc/latest/userguide/subnet-sizing.html).
SUBNET_RESERVED_ADDRESSES = 5


def check_free_address(name: str, subnet_cidr: str, in_use: int) -> None:
    """A launch needs a free address in its subnet; moto hands out addresses past the end."""
    usable = ipaddress.ip_network(subnet_cidr).num_addresses - SUBNET_RESERVED_ADDRESSES
    if in_use >= usable:
        raise AwsRejected(
            name,
            "InsufficientFreeAddressesInSubnet",
            f"subnet {subnet_cidr} has {usable} usable addresses and all are in use",
        )


def check_group_addresses(name: str, value: str, subnet_cidrs: dict[str, str], in_use: dict[str, int]) -> None:
    """The controller's fleets launch each group into the subnet its entry names (`/hpcc/<c>/groups`): EC2 refuses
    a launch with no free address (InsufficientFreeAddressesInSubnet), so every group's full count, with what the
    subnet already holds, must fit its usable addresses. Checked here, when the value is written, not at launch."""
    import json

    wanted: dict[str, int] = {}
    for group in json.loads(value).get("groups", []):
        wanted[group["subnet_id"]] = wanted.get(group["subnet_id"], 0) + int(group["count"])
    for subnet, count in wanted.items():
        cidr = subnet_cidrs.get(subnet)
        if cidr is None:
            raise AwsRejected(
                name, "InvalidSubnetID.NotFound", f"the groups name subnet {subnet}, which does not exist"
            )
        usable = ipaddress.ip_network(cidr).num_addresses - SUBNET_RESERVED_ADDRESSES
        if count + in_use.get(subnet, 0) > usable:
            raise AwsRejected(
                name,
                "InsufficientFreeAddressesInSubnet",
                f"the groups launch {count} nodes into subnet {cidr}, which has {usable} usable "
                f"addresses and {in_use.get(subnet, 0)} in use",
            )
