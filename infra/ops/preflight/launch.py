"""Preflight's launch rules: the account's vCPU quota for what the config launches, and a dry run of each role's
launch (RunInstances with DryRun=True: EC2 answers whether it would launch, and why not). The roles are the head
and each node group: the groups of one family and market draw on one quota together, an empty group has no dry run.
Part of infra/ops/preflight/rules.py's RULES."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from botocore.exceptions import ClientError

from infra.config.validators.findings import ERROR, INFO, WARNING, Finding
from infra.ops.aws import error_code, error_message
from infra.ops.preflight.context import AZ_FIELD, HEAD_FIELD, QUOTAS, Context, Role, offered_list, quota_group


def vcpu_quota(ctx: Context) -> Iterable[Finding]:
    """The vCPUs every role needs of each quota (the groups of one family and market share it), against the quota;
    each finding names the first group's field that draws on it (the head's when no group does)."""
    need: dict[tuple[str, str], int] = {}
    fields: dict[tuple[str, str], str] = {}
    for role in ctx.roles:
        info = ctx.type_info.get(role.instance_type)
        if info is None:
            continue
        key = (quota_group(role.instance_type), "spot" if role.market == "spot" else "on-demand")
        need[key] = need.get(key, 0) + info["VCpuInfo"]["DefaultVCpus"] * role.count
        if key not in fields or (fields[key] == HEAD_FIELD and role.group is not None and role.count):
            fields[key] = role.field
    for (group, market), vcpus in sorted(need.items()):
        field = fields[(group, market)]
        on_demand, spot, label = QUOTAS[group]
        code = spot if market == "spot" else on_demand
        what = f"All {label} Spot Instance Requests" if market == "spot" else f"Running On-Demand {label} instances"
        if code is None:
            yield Finding(
                WARNING,
                field.rsplit(".", 1)[0] + ".market",
                f"no vCPU quota is known for {market} {label} instances; check {vcpus} vCPUs fit before `hpcc up`",
            )
            continue
        try:
            quota = ctx.aws.call("service-quotas", "get_service_quota", ServiceCode="ec2", QuotaCode=code)["Quota"]
        except ClientError as e:
            yield Finding(
                WARNING,
                field,
                f"could not read the vCPU quota \"{what}\" ({code}): "
                f"{error_message(e).rstrip('.')}. Not checked: the cluster needs {vcpus} "
                "vCPUs of it; see `aws service-quotas get-service-quota --service-code ec2 "
                f"--quota-code {code}`",
            )
            continue
        limit = int(quota.get("Value", 0))
        if limit < vcpus:
            yield Finding(
                ERROR,
                field,
                f"the cluster needs {vcpus} vCPUs of \"{what}\" but the quota is {limit} "
                "(instances already running count too); request an increase: `aws "
                "service-quotas request-service-quota-increase --service-code ec2 "
                f"--quota-code {code} --desired-value {vcpus}`, or use fewer or smaller nodes",
            )
        else:
            yield Finding(
                INFO,
                field,
                f"vCPU quota \"{what}\" is {limit}; the cluster needs {vcpus} "
                "(instances already running count against it too)",
            )


DRY_RUN_ADVICE: dict[str, Callable[[Context, Role], str]] = {
    "InsufficientInstanceCapacity": lambda ctx, r: (
        f"AWS has no {r.instance_type} capacity for {r.count} instance(s) in {ctx.az} right now. Try another AZ "
        f"offering it ({offered_list(ctx, r.instance_type)}), fewer nodes, a capacity reservation or Capacity Block "
        f"({r.at('capacityReservationId') if r.group else 'capacityReservationId of a node group'}), or retry later"
    ),
    "InstanceLimitExceeded": lambda ctx, r: (
        f"the account's limit for {r.instance_type} would be exceeded by {r.count} more instance(s); request a vCPU "
        f"quota increase (Service Quotas, code {QUOTAS[quota_group(r.instance_type)][0]}) or use fewer nodes"
    ),
    "VcpuLimitExceeded": lambda ctx, r: (
        f"{r.count} x {r.instance_type} exceed the account's vCPU quota; request an increase (Service Quotas, code "
        f"{QUOTAS[quota_group(r.instance_type)][1 if r.market == 'spot' else 0]}) or use fewer nodes"
    ),
    "Unsupported": lambda ctx, r: (
        f"{r.instance_type} cannot be launched this way in {ctx.az} (type, AZ, market or image not supported "
        f"together); AZs offering it: {offered_list(ctx, r.instance_type)}. Change {AZ_FIELD}, the type"
        f"{', or ' + r.at('market') if r.group else ''}"
    ),
    "InsufficientFreeAddressesInSubnet": lambda ctx, r: (
        f"the subnet has too few free addresses for {r.count} instance(s) and their interfaces; hpcc's own private "
        "subnet is a /20 (4091 addresses), so this means a smaller or fuller subnet: free addresses or use fewer nodes"
    ),
}


def dry_run_launch(ctx: Context) -> Iterable[Finding]:
    if ctx.image is None or ctx.az is None or not set(ctx.types) <= set(ctx.type_info):
        return
    for role in ctx.roles:
        if role.count == 0:
            yield Finding(INFO, role.field, f"group {role.name} has no nodes (count 0): no dry run")
            continue
        kwargs = dict(
            DryRun=True,
            ImageId=ctx.image["ImageId"],
            InstanceType=role.instance_type,
            MinCount=role.count,
            MaxCount=role.count,
            Placement={"AvailabilityZone": ctx.az},
        )
        if role.market == "spot":
            kwargs["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
            }
        elif role.market == "capacity-block":
            kwargs["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
        if role.reservation:
            kwargs["CapacityReservationSpecification"] = {
                "CapacityReservationTarget": {"CapacityReservationId": role.reservation}
            }
        try:
            ctx.aws.call("ec2", "run_instances", **kwargs)  # throttling retried; DryRunOperation is the answer
        except ClientError as e:
            code = error_code(e)
            if code == "DryRunOperation":
                yield Finding(
                    INFO, role.field, f"dry run: AWS would launch {role.count} x {role.instance_type} in {ctx.az}"
                )
            elif code in DRY_RUN_ADVICE:
                yield Finding(ERROR, role.field, f"dry run refused ({code}): {DRY_RUN_ADVICE[code](ctx, role)}")
            elif code in ("UnauthorizedOperation", "AccessDenied"):
                yield Finding(
                    WARNING,
                    role.field,
                    f"dry run not allowed for these credentials ({code}); `hpcc up` needs "
                    "ec2:RunInstances, so check the role before going further",
                )
            elif code in ("VPCIdNotSpecified", "MissingInput", "VPCResourceNotSpecified"):
                yield Finding(
                    WARNING,
                    role.field,
                    f"dry run not done: the account has no default VPC to try it in ({code}), "
                    "so capacity, quota and subnet refusals are not checked until `hpcc up`",
                )
            else:
                yield Finding(ERROR, role.field, f"dry run refused: {error_message(e)}")
        else:  # an endpoint that ignored DryRun would have launched: say so loudly rather than pass
            yield Finding(
                ERROR,
                role.field,
                "the dry run was not refused as a dry run: this endpoint may have launched "
                "instances; check and terminate them",
            )
