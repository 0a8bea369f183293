"""`hpcc reap`: find everything tagged `hpcc:cluster=<name>` and delete it in dependency order.

For when `pulumi destroy` failed half-way or the stack's state is gone. Tags are the source of truth;
resources inside the cluster's own VPC (found by its tag) belong to the cluster too, since the VPC cannot
go while they exist. Every filter is re-checked on our side, so nothing of another cluster is touched.
IAM, the parameters and the secret are found by their names (hpcc_contract/names.py) and deleted only when their
`hpcc:cluster` tag (where they carry one) names this cluster.

KINDS below is the whole procedure, one row per kind in deletion order (each kind only after everything
before it is gone): how it is listed and re-checked, how it is deleted, what is waited for. The generic
finder and deleter are in infra/ops/reap/kinds.py, the few special cases in infra/ops/reap/special.py.
Controller-launched instances carry the cluster's tag like the rest; the head (the controller) is terminated first,
and the ledger table and the buckets come last (infra/ops/reap/stores.py). `inventory()` only reads; `reap(...,
yes=False)` is the dry run. Showing the result is infra/ops/reap/report.py's, for the CLI and `hpcc destroy`."""

from __future__ import annotations

from collections.abc import Callable

from hpcc_contract.names import Paths, placement_group_name
from infra.ops.aws import Aws
from infra.ops.reap import kinds as k
from infra.ops.reap import special, stores
from infra.ops.reap.kinds import Delete, Find, Found, Inventory, Item, Kind, Waits, unless_missing

__all__ = ["DELETERS", "KINDS", "ORDER", "Inventory", "Item", "Waits", "inventory", "reap"]


def _nat_allocations(found: Found) -> dict | None:
    """The addresses of the cluster's NAT gateways: the cluster's through their gateway, tagged or not."""
    allocations = sorted(
        {
            a["AllocationId"]
            for n in found.records.get("nat-gateway", [])
            if _live_nat(n, found)
            for a in n.get("NatGatewayAddresses", [])
            if a.get("AllocationId")
        }
    )
    return {"AllocationIds": allocations} if allocations else None


def _live_nat(nat: dict, found: Found) -> bool:
    return nat["State"] not in ("deleted", "deleting", "failed")


def _address_owner(address: dict, found: Found) -> bool:
    return k.owned(address.get("Tags"), found.cluster) or address["AllocationId"] in (
        (_nat_allocations(found) or {}).get("AllocationIds", [])
    )


def _placement_group_note(cluster: str) -> str:
    name = placement_group_name(cluster)
    return f"if {name} exists, delete it with `aws ec2 delete-placement-group --group-name {name}`"


def _file_system_args(it: Item) -> dict:
    persistent = it.extra.get("deployment", "").startswith("PERSISTENT")
    return {"FileSystemId": it.id, **({"LustreConfiguration": {"SkipFinalBackup": True}} if persistent else {})}


def _disassociate_address(aws: Aws, it: Item) -> None:
    if it.extra.get("association"):
        unless_missing(lambda: aws.call("ec2", "disassociate_address", AssociationId=it.extra["association"]))


def _disassociate_route_table(aws: Aws, it: Item) -> None:
    for association in it.extra.get("associations", []):
        aws.call("ec2", "disassociate_route_table", AssociationId=association)


def _detach_internet_gateway(aws: Aws, it: Item) -> None:
    for vpc in it.extra.get("vpcs", []):
        aws.call("ec2", "detach_internet_gateway", InternetGatewayId=it.id, VpcId=vpc)


def _in_path(param: dict, found: Found) -> bool:
    return param["Name"].startswith(Paths(found.cluster).prefix + "/")


VPCS = Find("describe_vpcs", "VpcId")

KINDS: tuple[Kind, ...] = (
    # The head first: it runs the controller, which would launch again what reap terminates.
    Kind("head-instance", stores.find_heads, stores.terminate),
    Kind("instance", stores.find_instances, stores.terminate),
    Kind(
        "fsx-association",
        special.find_associations,
        Delete(
            "delete_data_repository_association",
            service="fsx",
            args=lambda it: {"AssociationId": it.id, "DeleteDataInFileSystem": False},
        ),
    ),
    Kind(
        "file-system",
        special.FILE_SYSTEMS,
        Delete(
            "delete_file_system",
            _file_system_args,
            service="fsx",
            waiter="FileSystemDeleted",
            wait_args=lambda items: {"FileSystemIds": [i.id for i in items]},
            what="file systems to be deleted (FSx takes minutes)",
        ),
    ),
    Kind(
        "nat-gateway",
        Find("describe_nat_gateways", "NatGatewayId", in_vpc="vpc-id", filter_param="Filter", keep=_live_nat),
        Delete(
            "delete_nat_gateway",
            lambda it: {"NatGatewayId": it.id},
            waiter="NatGatewayDeleted",
            wait_args=lambda items: {"NatGatewayIds": [i.id for i in items]},
            what="NAT gateways to be deleted",
        ),
    ),
    Kind(
        "elastic-ip",
        Find(
            "describe_addresses",
            "AllocationId",
            records="Addresses",
            args=_nat_allocations,
            owner=_address_owner,
            name=lambda a: a.get("PublicIp", ""),
            extra=lambda a: {"association": a.get("AssociationId")},
        ),
        Delete("release_address", lambda it: {"AllocationId": it.id}, first=_disassociate_address),
    ),
    Kind(
        "network-interface",
        Find(
            "describe_network_interfaces",
            "NetworkInterfaceId",
            in_vpc="vpc-id",
            tags="TagSet",
            keep=special.outlives_its_instance,
            name=lambda e: e.get("Description") or k.name_tag(e, "TagSet"),
            extra=lambda e: {
                "attachment": (e.get("Attachment") or {}).get("AttachmentId"),
                "requester_managed": bool(e.get("RequesterManaged")),
            },
        ),
        special.delete_interfaces,
    ),
    Kind(
        "security-group",
        Find(
            "describe_security_groups",
            "GroupId",
            in_vpc="vpc-id",
            keep=lambda g, found: g.get("GroupName") != "default",
            name=lambda g: g.get("GroupName", ""),
        ),
        special.delete_security_groups,
    ),
    Kind(
        "placement-group",
        Find(
            "describe_placement_groups",
            "GroupName",
            records="PlacementGroups",
            name=lambda pg: pg.get("Strategy", ""),
            unlisted=_placement_group_note,
        ),
        Delete("delete_placement_group", lambda it: {"GroupName": it.id}),
    ),
    Kind(
        "launch-template",
        Find("describe_launch_templates", "LaunchTemplateId", name=lambda lt: lt.get("LaunchTemplateName", "")),
        Delete("delete_launch_template", lambda it: {"LaunchTemplateId": it.id}),
    ),
    Kind(
        "vpc-endpoint",
        Find(
            "describe_vpc_endpoints",
            "VpcEndpointId",
            by_tag=False,
            in_vpc="vpc-id",
            keep=lambda ep, found: ep.get("State", "").lower() not in ("deleted", "deleting"),
            name=lambda ep: ep.get("ServiceName", ""),
        ),
        Delete("delete_vpc_endpoints", lambda it: {"VpcEndpointIds": [it.id]}),
    ),
    Kind(
        "route-table",
        Find(
            "describe_route_tables",
            "RouteTableId",
            by_tag=False,
            in_vpc="vpc-id",
            keep=lambda rt, found: not any(a.get("Main") for a in rt.get("Associations", [])),
            extra=lambda rt: {"associations": [a["RouteTableAssociationId"] for a in rt.get("Associations", [])]},
        ),
        Delete("delete_route_table", lambda it: {"RouteTableId": it.id}, first=_disassociate_route_table),
    ),
    Kind(
        "internet-gateway",
        Find(
            "describe_internet_gateways",
            "InternetGatewayId",
            in_vpc="attachment.vpc-id",
            extra=lambda g: {"vpcs": [a["VpcId"] for a in g.get("Attachments", [])]},
        ),
        Delete("delete_internet_gateway", lambda it: {"InternetGatewayId": it.id}, first=_detach_internet_gateway),
    ),
    Kind(
        "subnet",
        Find("describe_subnets", "SubnetId", in_vpc="vpc-id"),
        Delete("delete_subnet", lambda it: {"SubnetId": it.id}),
    ),
    Kind("vpc", VPCS, Delete("delete_vpc", lambda it: {"VpcId": it.id})),
    Kind(
        "instance-profile",
        special.find_instance_profiles,
        Delete(
            "delete_instance_profile",
            lambda it: {"InstanceProfileName": it.id},
            service="iam",
            first=special.remove_roles,
        ),
    ),
    Kind(
        "iam-role",
        special.find_roles,
        Delete("delete_role", lambda it: {"RoleName": it.id}, service="iam", first=special.empty_role),
    ),
    Kind(
        "ssm-parameter",
        Find(
            "get_parameters_by_path",
            "Name",
            service="ssm",
            by_tag=False,
            owner=_in_path,
            name=lambda p: "",
            args=lambda found: {"Path": Paths(found.cluster).prefix, "Recursive": True},
        ),
        Delete("delete_parameter", lambda it: {"Name": it.id}, service="ssm"),
    ),
    Kind(
        "secret",
        special.find_secret,
        Delete(
            "delete_secret",
            lambda it: {"SecretId": it.id, "ForceDeleteWithoutRecovery": True},
            service="secretsmanager",
        ),
    ),
    Kind("ledger-table", stores.find_tables, stores.delete_tables),
    Kind("bucket", stores.find_buckets, stores.delete_buckets),
)

# Deletion order: each kind only after everything before it is gone.
ORDER = tuple(kind.kind for kind in KINDS)


def _deleter(kind: Kind) -> Callable[[Aws, list[Item], Waits], None]:
    if isinstance(kind.delete, Delete):
        return lambda aws, items, waits: k.delete(aws, kind.delete, items, waits)
    return kind.delete


DELETERS = {kind.kind: _deleter(kind) for kind in KINDS}


def inventory(aws: Aws, cluster: str) -> Inventory:
    inv = Inventory(cluster, aws.region)
    found = Found(aws, inv)
    found.vpc_ids = [v["VpcId"] for v in k.records(found, "vpc", VPCS)]  # the rest is found in them too
    for kind in KINDS:
        inv.items += k.find(found, kind.kind, kind.find) if isinstance(kind.find, Find) else kind.find(found)
    return inv


def reap(
    aws: Aws,
    cluster: str,
    yes: bool = False,
    waits: Waits | None = None,
    on_step: Callable[[str, list[Item]], None] | None = None,
) -> Inventory:
    """Dry run unless `yes`. Returns the inventory with each item's result. An item that fails does not
    stop the rest (whatever depended on it then fails too, and says so)."""
    waits = waits or Waits()
    inv = inventory(aws, cluster)
    for kind in ORDER:
        items = inv.of(kind)
        if not items:
            continue
        if not yes:
            for it in items:
                it.result = "would delete"
            continue
        if kind == "instance":  # the head is gone now: what its controller launched meanwhile goes too
            later = stores.relist(aws, cluster, items)
            inv.items += later
            items += later
        if on_step:
            on_step(kind, items)
        DELETERS[kind](aws, items, waits)
    return inv
