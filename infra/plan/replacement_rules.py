"""Which input changes make Pulumi replace a resource, per type the program registers: ONE table.

pulumi-aws bridges terraform-provider-aws, so the provider decides: schema `ForceNew` fields and `CustomizeDiff`
(`ForceNew`, `ForceNewIf`, `ComputedIf`) in hashicorp/terraform-provider-aws `internal/service/<svc>/<file>.go`,
and where pulumi-aws 7.51.1's own docstrings say more (they follow a newer provider than some indexed sources),
those. Paths are Pulumi wire names as in resources.json; a block with MaxItems 1 is an object (`launchTemplate.id`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from infra.plan.paths import covers, parse_path

TF = "terraform-provider-aws internal/service/"

# (path, old inputs, new inputs) -> does the provider's CustomizeDiff force a new resource?
Conditional = Callable[[str, dict, dict], bool]


@dataclass(frozen=True)
class Rule:
    force_new: tuple[str, ...]  # a change at (or inside, or covering) one of these replaces
    source: str
    conditional: Conditional | None = None  # CustomizeDiff decisions that depend on the values
    # (changed top-level inputs, new inputs) -> outputs the provider leaves unknown after an in-place update
    recomputed: Callable[[set[str], dict], tuple[str, ...]] | None = None


def _subnet_ipv6(path: str, old: dict, new: dict) -> bool:
    # ForceNewIf("ipv6_cidr_block"): only when the old subnet assigned IPv6 addresses on creation.
    return path == "ipv6CidrBlock" and bool(old.get("assignIpv6AddressOnCreation"))


def _endpoint_private_dns(path: str, old: dict, new: dict) -> bool:
    return path == "privateDnsEnabled" and new.get("vpcEndpointType", "Gateway") != "Interface"


RULE_SOURCES = ("cidrIpv4", "cidrIpv6", "prefixListId", "referencedSecurityGroupId")


def _rule_source_kind(path: str, old: dict, new: dict) -> bool:
    # ModifyPlan: "you cannot change the rule's source type" -> RequiresReplace on both attributes.
    if path not in RULE_SOURCES:
        return False

    def kind(inputs: dict) -> str | None:
        return next((k for k in RULE_SOURCES if inputs.get(k) not in (None, "")), None)

    return kind(old) != kind(new)


def _parameter_tier(path: str, old: dict, new: dict) -> bool:
    return path == "tier" and old.get("tier") == "Advanced" and new.get("tier") == "Standard"


def _parameter_version(changed: set[str], new: dict) -> tuple[str, ...]:
    # ComputedIf("version"): a new value or description makes a new parameter version.
    return ("version",) if changed & {"value", "insecureValue", "description"} else ()


def _lustre(path: str, old: dict, new: dict) -> bool:
    if path == "storageCapacity":  # CustomizeDiff: a decrease, or any change on SCRATCH_1, forces new
        before, after = old.get(path), new.get(path)
        shrinks = not (isinstance(before, int) and isinstance(after, int)) or after < before
        return shrinks or new.get("deploymentType", "SCRATCH_1") == "SCRATCH_1"
    if path == "fileSystemTypeVersion":  # pulumi-aws 7.51.1: higher upgrades in place, lower replaces
        return _version(new.get(path)) < _version(old.get(path))
    return False


def _version(text) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in str(text).split("."))
    except ValueError:
        return ()


def _launch_template_versions(changed: set[str], new: dict) -> tuple[str, ...]:
    # ComputedIf("latest_version") on any change but name/description/default_version/update_default_version;
    # ComputedIf("default_version") on the same when update_default_version is true.
    if not changed - {"name", "namePrefix", "description", "defaultVersion", "updateDefaultVersion"}:
        return ()
    return ("latestVersion", "defaultVersion") if new.get("updateDefaultVersion") else ("latestVersion",)


def _instance(path: str, old: dict, new: dict) -> bool:
    if path in ("userData", "userDataBase64"):  # ForceNewIf(user_data*) when user_data_replace_on_change
        return bool(new.get("userDataReplaceOnChange"))
    if path == "launchTemplate.version":
        # CustomizeDiff: a changed version forces new unless it names $Latest/$Default and the instance already
        # runs that version, which only the live instance knows: reported as an update.
        return (new.get("launchTemplate") or {}).get("version") not in ("$Latest", "$Default")
    return False


# The file system's ForceNew fields, one citation each: the provider pulumi-aws 7.51.1 bridges (its docstrings say
# which provider they follow; terraform-provider-aws >= 5.31 schema where they are silent). Not here:
# perUnitStorageThroughput (in place since hashicorp/terraform-provider-aws#34932), dataCompressionType,
# logConfiguration, weeklyMaintenanceStartTime, automaticBackupRetentionDays (UpdateFileSystem).
LUSTRE_FSX = TF + "fsx/lustre_file_system.go"
PULUMI_AWS = "pulumi-aws 7.51.1 aws.fsx.LustreFileSystem docstring"
LUSTRE_FORCE_NEW = {
    "backupId": LUSTRE_FSX + " ForceNew",
    "copyTagsToBackups": LUSTRE_FSX + " ForceNew",
    "deploymentType": LUSTRE_FSX + " ForceNew",
    "driveCacheType": LUSTRE_FSX + " ForceNew",
    "efaEnabled": PULUMI_AWS + ' ("must be set at creation. If set this cannot be changed")',
    "exportPath": LUSTRE_FSX + " ForceNew",
    "importPath": LUSTRE_FSX + " ForceNew",
    "importedFileChunkSize": LUSTRE_FSX + " ForceNew",
    "kmsKeyId": LUSTRE_FSX + " ForceNew",
    "securityGroupIds": LUSTRE_FSX + " ForceNew",
    "storageType": LUSTRE_FSX + " ForceNew",
    "subnetIds": LUSTRE_FSX + " ForceNew",
}

EC2 = TF + "ec2/"
RULES: dict[str, Rule] = {
    "aws:ec2/vpc:Vpc": Rule(("cidrBlock", "ipv4IpamPoolId", "ipv4NetmaskLength"), EC2 + "vpc_.go ForceNew"),
    "aws:ec2/subnet:Subnet": Rule(
        (
            "availabilityZone",
            "availabilityZoneId",
            "cidrBlock",
            "ipv4IpamPoolId",
            "ipv4NetmaskLength",
            "ipv6IpamPoolId",
            "ipv6Native",
            "ipv6NetmaskLength",
            "outpostArn",
            "vpcId",
        ),
        EC2 + "vpc_subnet.go ForceNew; CustomizeDiff ForceNewIf(ipv6_cidr_block)",
        _subnet_ipv6,
    ),
    "aws:ec2/internetGateway:InternetGateway": Rule((), EC2 + "vpc_internet_gateway.go (vpc_id detaches/attaches)"),
    "aws:ec2/eip:Eip": Rule(
        ("address", "domain", "ipamPoolId", "networkBorderGroup", "publicIpv4Pool"), EC2 + "ec2_eip.go ForceNew"
    ),
    "aws:ec2/natGateway:NatGateway": Rule(
        ("allocationId", "connectivityType", "privateIp", "secondaryPrivateIpAddressCount", "subnetId"),
        EC2 + "vpc_nat_gateway.go ForceNew",
    ),
    "aws:ec2/routeTable:RouteTable": Rule(("vpcId",), EC2 + "vpc_route_table.go ForceNew"),
    "aws:ec2/route:Route": Rule(
        ("routeTableId", "destinationCidrBlock", "destinationIpv6CidrBlock", "destinationPrefixListId"),
        EC2 + "vpc_route.go ForceNew (targets use ReplaceRoute)",
    ),
    "aws:ec2/routeTableAssociation:RouteTableAssociation": Rule(
        ("gatewayId", "subnetId"), EC2 + "vpc_route_table_association.go ForceNew (route_table_id updates)"
    ),
    "aws:ec2/vpcEndpoint:VpcEndpoint": Rule(
        (
            "dnsOptions.privateDnsPreference",
            "dnsOptions.privateDnsSpecifiedDomains",
            "resourceConfigurationArn",
            "serviceName",
            "serviceNetworkArn",
            "serviceRegion",
            "vpcEndpointType",
            "vpcId",
        ),
        EC2 + "vpc_endpoint.go ForceNew; CustomizeDiff ForceNew(private_dns_enabled) unless Interface",
        _endpoint_private_dns,
    ),
    "aws:ec2/securityGroup:SecurityGroup": Rule(
        ("description", "name", "namePrefix", "vpcId"), EC2 + "vpc_security_group.go ForceNew"
    ),
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": Rule(
        ("securityGroupId",),
        EC2 + "vpc_security_group_ingress_rule.go RequiresReplace; ModifyPlan source type",
        _rule_source_kind,
    ),
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": Rule(
        ("securityGroupId",),
        EC2 + "vpc_security_group_egress_rule.go (shares the ingress rule's schema)",
        _rule_source_kind,
    ),
    "aws:ec2/placementGroup:PlacementGroup": Rule(
        ("name", "partitionCount", "spreadLevel", "strategy"),
        EC2 + "ec2_placement_group.go ForceNew (tags only update)",
    ),
    "aws:secretsmanager/secret:Secret": Rule(("name", "namePrefix"), TF + "secretsmanager/secret.go ForceNew"),
    "aws:iam/role:Role": Rule(("name", "namePrefix", "path"), TF + "iam/role.go ForceNew"),
    "aws:iam/rolePolicy:RolePolicy": Rule(("name", "namePrefix", "role"), TF + "iam/role_policy.go ForceNew"),
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": Rule(
        ("policyArn", "role"), TF + "iam/role_policy_attachment.go ForceNew"
    ),
    "aws:iam/instanceProfile:InstanceProfile": Rule(
        ("name", "namePrefix", "path"), TF + "iam/instance_profile.go ForceNew (role updates)"
    ),
    "aws:ssm/parameter:Parameter": Rule(
        ("dataType", "name"),
        TF + "ssm/parameter.go ForceNew; ForceNewIfChange(tier Advanced->Standard)",
        _parameter_tier,
        _parameter_version,
    ),
    "aws:fsx/lustreFileSystem:LustreFileSystem": Rule(
        tuple(LUSTRE_FORCE_NEW),
        "; ".join(f"{k}: {v}" for k, v in LUSTRE_FORCE_NEW.items())
        + "; storageCapacity: "
        + LUSTRE_FSX
        + " CustomizeDiff (decrease, or any change on SCRATCH_1); "
        "fileSystemTypeVersion: " + PULUMI_AWS + " (higher upgrades in place, lower replaces); "
        "perUnitStorageThroughput: updated in place since hashicorp/terraform-provider-aws#34932 (FSx "
        "UpdateFileSystem)",
        _lustre,
    ),
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": Rule(
        ("dataRepositoryPath", "fileSystemId", "fileSystemPath"), TF + "fsx/data_repository_association.go ForceNew"
    ),
    # S3 (terraform-provider-aws internal/service/s3): the bundle store (infra/program/components/bundle.py).
    "aws:s3/bucket:Bucket": Rule(("bucket", "bucketPrefix", "objectLockEnabled"), TF + "s3/bucket.go ForceNew"),
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": Rule(
        ("bucket",), TF + "s3/bucket_public_access_block.go ForceNew"
    ),
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": Rule(
        ("bucket", "expectedBucketOwner"), TF + "s3/bucket_server_side_encryption_configuration.go ForceNew"
    ),
    "aws:s3/bucketVersioning:BucketVersioning": Rule(
        ("bucket", "expectedBucketOwner"), TF + "s3/bucket_versioning.go ForceNew"
    ),
    "aws:s3/bucketPolicy:BucketPolicy": Rule(("bucket",), TF + "s3/bucket_policy.go ForceNew"),
    "aws:s3/bucketObjectv2:BucketObjectv2": Rule(
        ("bucket", "key"), TF + "s3/object.go ForceNew (content updates in place)"
    ),
    # The controller's ledger (infra/program/components/state.py).
    "aws:dynamodb/table:Table": Rule(("name", "hashKey", "rangeKey"), TF + "dynamodb/table.go ForceNew"),
    # A group's resource: its provider replaces it for another cluster, group, region, subnet or security group.
    "pulumi-python:dynamic:Resource": Rule(
        ("cluster", "group", "region", "subnet_id", "security_group_id"),
        "infra/program/components/groups.py GroupProvider.diff",
    ),
    "aws:ec2/launchTemplate:LaunchTemplate": Rule(
        (),
        EC2 + "ec2_launch_template.go: every edit is a new version in place; "
        "CustomizeDiff ComputedIf(latest_version, default_version)",
        recomputed=_launch_template_versions,
    ),
    "aws:ec2/instance:Instance": Rule(
        (
            "ami",
            "associatePublicIpAddress",
            "availabilityZone",
            "ebsOptimized",
            "hibernation",
            "hostId",
            "instanceMarketOptions",
            "ipv6Addresses",
            "keyName",
            "launchTemplate.id",
            "launchTemplate.name",
            "placementGroup",
            "placementPartitionNumber",
            "privateIp",
            "securityGroups",
            "subnetId",
            "tenancy",
        ),
        EC2 + "ec2_instance.go ForceNew; CustomizeDiff ForceNew(launch_template.0.version), "
        "ForceNewIf(user_data*, user_data_replace_on_change)",
        _instance,
    ),
}


# pulumi-aws 7 bridges terraform-provider-aws 6, whose "enhanced region support" gives every regional resource a
# top-level `region` argument (pulumi-aws injects the provider's region when it is not set: pulumi/pulumi-aws#5521);
# a resource cannot move between regions, so a new region is a new resource. IAM is global: no `region`.
REGION_SOURCE = (
    "terraform-provider-aws 6 enhanced region support (hashicorp.github.io/terraform-provider-aws/"
    "enhanced-region-support); pulumi/pulumi-aws#5521 (v7 injects `region`)"
)
GLOBAL_SERVICES = ("aws:iam/",)


def regional(type_token: str) -> bool:
    return type_token.startswith("aws:") and not type_token.startswith(GLOBAL_SERVICES)


def overlaps(changed: str, rule_path: str) -> bool:
    """A change at a path, inside it (`launchTemplate.id` in `launchTemplate`), or covering it (a whole
    unknown `launchTemplate` covers `launchTemplate.id`)."""
    return covers(rule_path, changed) or covers(changed, rule_path)


def rule_for(type_token: str) -> Rule:
    if type_token not in RULES:
        raise KeyError(f"no replacement rule for {type_token}; add it to infra/plan/replacement_rules.py")
    return RULES[type_token]


def forcing_paths(type_token: str, changed: list[str], old: dict, new: dict) -> list[str]:
    """The changed input paths that make the provider replace the resource."""
    rule = rule_for(type_token)
    forced = [p for p in changed if p == "region" and regional(type_token)]
    for path in (p for p in changed if p not in forced):
        conditional = rule.conditional is not None and rule.conditional(path, old, new)
        if conditional or any(overlaps(path, p) for p in rule.force_new):
            forced.append(path)
    return forced


def recomputed_outputs(type_token: str, changed: list[str], new: dict) -> tuple[str, ...]:
    """Outputs the provider leaves unknown at preview when it updates the resource in place."""
    rule = rule_for(type_token)
    return rule.recomputed({parse_path(p)[0] for p in changed}, new) if rule.recomputed else ()
