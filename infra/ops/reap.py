"""`hpcc reap`: find everything tagged `hpcc:cluster=<name>` and delete it in dependency order.

For when `pulumi destroy` failed half-way or the stack's state is gone. Tags are the source of truth;
resources inside the cluster's own VPC (found by its tag) belong to the cluster too, since the VPC cannot
go while they exist. IAM, the parameters and the secret are found by their names (infra/naming.py) and
deleted only when their `hpcc:cluster` tag (where they carry one) names this cluster.

`inventory()` only reads; `reap(..., yes=False)` is the dry run; with `yes=True` each step deletes and
waits for what the next step depends on (instances gone before their ENIs and groups, NAT gateway gone
before its address and subnet, ...).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from botocore.exceptions import ClientError

from infra.naming import TAG_CLUSTER, Paths, role_name
from infra.ops.aws import Aws, error_code, error_message, tag_dict, tag_filter

# Deletion order: each kind only after everything before it is gone.
ORDER = ("instance", "fsx-association", "file-system", "nat-gateway", "elastic-ip", "network-interface",
         "security-group", "placement-group", "launch-template", "vpc-endpoint", "route-table", "internet-gateway",
         "subnet", "vpc", "instance-profile", "iam-role", "ssm-parameter", "secret")


@dataclass
class Item:
    kind: str
    id: str
    name: str = ""
    result: str = ""  # "would delete" | "deleted" | "failed: ..." | "gone"
    extra: dict = field(default_factory=dict, repr=False)

    @property
    def failed(self) -> bool:
        return self.result.startswith("failed")


@dataclass
class Inventory:
    cluster: str
    region: str
    items: list[Item] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be listed, and why

    def of(self, kind: str) -> list[Item]:
        return [i for i in self.items if i.kind == kind]

    @property
    def empty(self) -> bool:
        return not self.items


def _missing(e: ClientError) -> bool:
    code = error_code(e)
    return code.endswith((".NotFound", "NotFound", "NoSuchEntity", "ResourceNotFoundException")) or code in (
        "NoSuchEntity", "ParameterNotFound", "FileSystemNotFound", "InvalidAllocationID.NotFound",
        "DataRepositoryAssociationNotFound", "NatGatewayNotFound")


def _name(tags: list[dict] | None) -> str:
    return tag_dict(tags).get("Name", "")


# -- finding -------------------------------------------------------------------------------------------

def _ec2(aws: Aws, op: str, key: str, **kw) -> list[dict]:
    return list(aws.pages("ec2", op, key, **kw))


def _mine(items: list[dict], cluster: str, vpc_ids: list[str], tag_key: str = "Tags") -> list[dict]:
    """Re-check on our side what a filter asked for (tag or VPC), so an endpoint that ignores a filter
    can never make reap touch another cluster's resources."""
    return [i for i in items if tag_dict(i.get(tag_key)).get(TAG_CLUSTER) == cluster
            or (i.get("VpcId") and i.get("VpcId") in vpc_ids)
            or any(a.get("VpcId") in vpc_ids for a in i.get("Attachments", []))]


def inventory(aws: Aws, cluster: str) -> Inventory:
    inv = Inventory(cluster, aws.region)
    add = inv.items.append
    tf = tag_filter(cluster)

    vpcs = _mine(_ec2(aws, "describe_vpcs", "Vpcs", Filters=tf), cluster, [])
    vpc_ids = [v["VpcId"] for v in vpcs]
    in_vpc = [{"Name": "vpc-id", "Values": vpc_ids}]

    instance_ids = set()  # every instance of the cluster, terminated ones too: their interfaces go with them
    for res in _ec2(aws, "describe_instances", "Reservations", Filters=tf):
        for i in _mine(res["Instances"], cluster, []):
            instance_ids.add(i["InstanceId"])
            if i["State"]["Name"] != "terminated":
                add(Item("instance", i["InstanceId"], _name(i.get("Tags")), extra={"state": i["State"]["Name"]}))

    file_systems = [fs for fs in aws.pages("fsx", "describe_file_systems", "FileSystems")
                    if tag_dict(fs.get("Tags")).get(TAG_CLUSTER) == cluster and fs.get("Lifecycle") != "DELETING"]
    if file_systems:
        try:
            for dra in aws.pages("fsx", "describe_data_repository_associations", "Associations",
                                 Filters=[{"Name": "file-system-id", "Values": [f["FileSystemId"] for f in file_systems]}]):
                add(Item("fsx-association", dra["AssociationId"], dra.get("DataRepositoryPath", "")))
        except (ClientError, NotImplementedError) as e:
            inv.notes.append(f"could not list the file systems' data repository associations ({_why(e)}); "
                             "deleting a file system removes them anyway")
    for fs in file_systems:
        add(Item("file-system", fs["FileSystemId"], _name(fs.get("Tags")),
                 extra={"deployment": fs.get("LustreConfiguration", {}).get("DeploymentType", "")}))

    nats = {n["NatGatewayId"]: n for n in _ec2(aws, "describe_nat_gateways", "NatGateways", Filter=tf)}
    if vpc_ids:
        nats.update({n["NatGatewayId"]: n for n in _ec2(aws, "describe_nat_gateways", "NatGateways", Filter=in_vpc)})
    nats = {k: n for k, n in nats.items() if _mine([n], cluster, vpc_ids)}
    nat_allocations = set()
    for n in nats.values():
        if n["State"] in ("deleted", "deleting", "failed"):
            continue
        add(Item("nat-gateway", n["NatGatewayId"], _name(n.get("Tags"))))
        nat_allocations |= {a["AllocationId"] for a in n.get("NatGatewayAddresses", []) if a.get("AllocationId")}
    addresses = {a["AllocationId"]: a for a in _mine(_ec2(aws, "describe_addresses", "Addresses", Filters=tf), cluster, [])}
    if nat_allocations:
        addresses.update({a["AllocationId"]: a for a in _ec2(aws, "describe_addresses", "Addresses",
                                                              AllocationIds=sorted(nat_allocations))})
    for alloc, a in sorted(addresses.items()):
        add(Item("elastic-ip", alloc, a.get("PublicIp", ""), extra={"association": a.get("AssociationId")}))

    enis = {e["NetworkInterfaceId"]: e for e in _ec2(aws, "describe_network_interfaces", "NetworkInterfaces", Filters=tf)}
    if vpc_ids:
        enis.update({e["NetworkInterfaceId"]: e for e in _ec2(aws, "describe_network_interfaces", "NetworkInterfaces", Filters=in_vpc)})
    enis = {k: e for k, e in enis.items() if _mine([e], cluster, vpc_ids, "TagSet")}
    for eni_id, e in sorted(enis.items()):
        attachment = e.get("Attachment") or {}
        if attachment.get("InstanceId") in instance_ids and (
                attachment.get("DeleteOnTermination", True) or attachment.get("DeviceIndex") == 0):
            # Goes with its instance: delete-on-termination, or the primary interface made at launch (AWS's
            # default is delete-on-termination; moto reports false for it, and it cannot be detached by hand).
            # A secondary one attached with DeleteOnTermination=false (e.g. attached after launch) outlives
            # its instance and would keep the subnet and VPC from going: it is listed, and deleted after the
            # instances (detached first if still attached).
            continue
        add(Item("network-interface", eni_id, e.get("Description") or _name(e.get("TagSet")),
                 extra={"attachment": (e.get("Attachment") or {}).get("AttachmentId"),
                        "requester_managed": bool(e.get("RequesterManaged"))}))

    groups = {g["GroupId"]: g for g in _ec2(aws, "describe_security_groups", "SecurityGroups", Filters=tf)}
    if vpc_ids:
        groups.update({g["GroupId"]: g for g in _ec2(aws, "describe_security_groups", "SecurityGroups", Filters=in_vpc)})
    groups = {k: g for k, g in groups.items() if _mine([g], cluster, vpc_ids)}
    for gid, g in sorted(groups.items()):
        if g.get("GroupName") != "default":
            add(Item("security-group", gid, g.get("GroupName", ""), extra={"group": g}))

    _placement_groups(aws, inv)

    for lt in _mine(_ec2(aws, "describe_launch_templates", "LaunchTemplates", Filters=tf), cluster, []):
        add(Item("launch-template", lt["LaunchTemplateId"], lt.get("LaunchTemplateName", "")))

    if vpc_ids:
        for ep in _mine(_ec2(aws, "describe_vpc_endpoints", "VpcEndpoints", Filters=in_vpc), cluster, vpc_ids):
            if ep.get("State", "").lower() not in ("deleted", "deleting"):
                add(Item("vpc-endpoint", ep["VpcEndpointId"], ep.get("ServiceName", "")))
        for rt in _mine(_ec2(aws, "describe_route_tables", "RouteTables", Filters=in_vpc), cluster, vpc_ids):
            if not any(a.get("Main") for a in rt.get("Associations", [])):
                add(Item("route-table", rt["RouteTableId"], _name(rt.get("Tags")),
                         extra={"associations": [a["RouteTableAssociationId"] for a in rt.get("Associations", [])]}))
    igws = {g["InternetGatewayId"]: g for g in _ec2(aws, "describe_internet_gateways", "InternetGateways", Filters=tf)}
    if vpc_ids:
        igws.update({g["InternetGatewayId"]: g for g in _ec2(aws, "describe_internet_gateways", "InternetGateways",
                                                             Filters=[{"Name": "attachment.vpc-id", "Values": vpc_ids}])})
    igws = {k: g for k, g in igws.items() if _mine([g], cluster, vpc_ids)}
    for gid, g in sorted(igws.items()):
        add(Item("internet-gateway", gid, _name(g.get("Tags")),
                 extra={"vpcs": [a["VpcId"] for a in g.get("Attachments", [])]}))
    subnets = {s["SubnetId"]: s for s in _ec2(aws, "describe_subnets", "Subnets", Filters=tf)}
    if vpc_ids:
        subnets.update({s["SubnetId"]: s for s in _ec2(aws, "describe_subnets", "Subnets", Filters=in_vpc)})
    subnets = {k: sn for k, sn in subnets.items() if _mine([sn], cluster, vpc_ids)}
    for sid, s in sorted(subnets.items()):
        add(Item("subnet", sid, _name(s.get("Tags"))))
    for v in vpcs:
        add(Item("vpc", v["VpcId"], _name(v.get("Tags"))))

    _iam(aws, cluster, inv)
    paths = Paths(cluster)
    for p in aws.pages("ssm", "get_parameters_by_path", "Parameters", Path=paths.prefix, Recursive=True):
        add(Item("ssm-parameter", p["Name"]))
    _secret(aws, cluster, inv)
    return inv


def _why(e: BaseException) -> str:
    if isinstance(e, NotImplementedError):
        return f"this endpoint does not implement it: {e}"
    return error_message(e)


def _placement_groups(aws: Aws, inv: Inventory) -> None:
    name = f"hpcc-{inv.cluster}"  # infra/components/compute.py
    try:
        found = aws.call("ec2", "describe_placement_groups", Filters=tag_filter(inv.cluster))["PlacementGroups"]
    except (ClientError, NotImplementedError) as e:
        inv.notes.append(f"could not list placement groups ({_why(e)}); if {name} exists, delete it with "
                         f"`aws ec2 delete-placement-group --group-name {name}`")
        return
    for pg in found:
        inv.items.append(Item("placement-group", pg["GroupName"], pg.get("Strategy", "")))


def _owned(tags: list[dict] | None, cluster: str) -> bool:
    return tag_dict(tags).get(TAG_CLUSTER) == cluster


def _iam(aws: Aws, cluster: str, inv: Inventory) -> None:
    for name in dict.fromkeys(role_name(cluster, role) for role in ("head", "compute")):
        _iam_role(aws, cluster, inv, name)


def _iam_role(aws: Aws, cluster: str, inv: Inventory, name: str) -> None:
    """One node role and its instance profile (same name: infra/components/identity.py)."""
    role_owned = False
    try:
        role = aws.call("iam", "get_role", RoleName=name)["Role"]
        role_owned = _owned(role.get("Tags"), cluster)
        if not role_owned:
            inv.notes.append(f"IAM role {name} is not tagged {TAG_CLUSTER}={cluster}; left alone")
    except ClientError as e:
        if not _missing(e):
            raise
    try:
        prof = aws.call("iam", "get_instance_profile", InstanceProfileName=name)["InstanceProfile"]
    except ClientError as e:
        if not _missing(e):
            raise
    else:
        roles = [r["RoleName"] for r in prof.get("Roles", [])]
        # GetInstanceProfile carries the tags; an untagged profile counts as the cluster's when it holds only its role.
        owned = _owned(prof.get("Tags"), cluster) if prof.get("Tags") else (role_owned and roles in ([], [name]))
        if owned:
            inv.items.append(Item("instance-profile", name, extra={"roles": roles}))
        else:
            inv.notes.append(f"instance profile {name} is not tagged {TAG_CLUSTER}={cluster}; left alone")
    if role_owned:
        inv.items.append(Item("iam-role", name))


def _secret(aws: Aws, cluster: str, inv: Inventory) -> None:
    sid = Paths(cluster).ssh_secret
    try:
        s = aws.call("secretsmanager", "describe_secret", SecretId=sid)
    except ClientError as e:
        if _missing(e):
            return
        raise
    if s.get("DeletedDate"):
        return
    if _owned(s.get("Tags"), cluster):
        inv.items.append(Item("secret", sid, extra={"arn": s.get("ARN")}))
    else:
        inv.notes.append(f"secret {sid} is not tagged {TAG_CLUSTER}={cluster}; left alone")


# -- deleting ------------------------------------------------------------------------------------------

@dataclass
class Waits:
    timeout: float = 900.0
    poll: float = 5.0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def until(self, done: Callable[[], bool], what: str) -> None:
        """Poll `done` until true; TimeoutError after `timeout` seconds."""
        deadline = self.clock() + self.timeout
        while not done():
            if self.clock() > deadline:
                raise TimeoutError(f"gave up after {self.timeout:.0f}s waiting for {what}")
            self.sleep(self.poll)


def _ec2_call(aws: Aws, op: str, **kw):
    return aws.call("ec2", op, **kw)


def _fail(it: Item, e: BaseException) -> None:
    it.result = f"failed: {e if isinstance(e, TimeoutError) else _why(e)}"


def _each(items: list[Item], delete: Callable[[Item], None]) -> list[Item]:
    """Delete one by one; each item gets its own result. Returns the ones whose delete call succeeded."""
    ok = []
    for it in items:
        try:
            delete(it)
        except ClientError as e:
            if _missing(e):
                it.result = "gone"
                continue
            _fail(it, e)
        except NotImplementedError as e:
            _fail(it, e)
        else:
            it.result = "deleted"
            ok.append(it)
    return ok


def _wait(items: list[Item], waits: Waits, done: Callable[[list[Item]], bool], what: str) -> None:
    if not items:
        return
    try:
        waits.until(lambda: done(items), what)
    except TimeoutError as e:
        for it in items:
            _fail(it, e)


def _delete_instances(aws: Aws, items: list[Item], waits: Waits) -> None:
    started = _each(items, lambda it: _ec2_call(aws, "terminate_instances", InstanceIds=[it.id]))

    def gone(left: list[Item]) -> bool:
        ids = [i.id for i in left]
        return all(i["State"]["Name"] == "terminated"
                   for r in aws.pages("ec2", "describe_instances", "Reservations", InstanceIds=ids) for i in r["Instances"])

    _wait(started, waits, gone, "instances to terminate")


def _delete_associations(aws: Aws, items: list[Item], waits: Waits) -> None:
    _each(items, lambda it: aws.call("fsx", "delete_data_repository_association", AssociationId=it.id,
                                     DeleteDataInFileSystem=False))


def _delete_file_systems(aws: Aws, items: list[Item], waits: Waits) -> None:
    def delete(it: Item) -> None:
        kw = {"LustreConfiguration": {"SkipFinalBackup": True}} if it.extra.get("deployment", "").startswith("PERSISTENT") else {}
        aws.call("fsx", "delete_file_system", FileSystemId=it.id, **kw)

    def gone(left: list[Item]) -> bool:
        ids = {i.id for i in left}
        return not [fs for fs in aws.pages("fsx", "describe_file_systems", "FileSystems") if fs["FileSystemId"] in ids]

    _wait(_each(items, delete), waits, gone, "file systems to be deleted (FSx takes minutes)")


def _delete_nat_gateways(aws: Aws, items: list[Item], waits: Waits) -> None:
    def gone(left: list[Item]) -> bool:
        return all(n["State"] == "deleted" for n in aws.pages("ec2", "describe_nat_gateways", "NatGateways",
                                                              NatGatewayIds=[i.id for i in left]))

    _wait(_each(items, lambda it: _ec2_call(aws, "delete_nat_gateway", NatGatewayId=it.id)), waits, gone,
          "NAT gateways to be deleted")


def _release_addresses(aws: Aws, items: list[Item], waits: Waits) -> None:
    def release(it: Item) -> None:
        if it.extra.get("association"):
            try:
                _ec2_call(aws, "disassociate_address", AssociationId=it.extra["association"])
            except ClientError as e:
                if not _missing(e):
                    raise
        _ec2_call(aws, "release_address", AllocationId=it.id)

    _each(items, release)


def _delete_enis(aws: Aws, items: list[Item], waits: Waits) -> None:
    def delete(it: Item) -> None:
        if it.extra.get("requester_managed"):
            # Made by a service (NAT, FSx, endpoint): AWS removes it with its owner, deleted in an earlier step.
            waits.until(lambda: not _ec2(aws, "describe_network_interfaces", "NetworkInterfaces",
                                         Filters=[{"Name": "network-interface-id", "Values": [it.id]}]),
                        f"{it.id} to go with the service that made it")
            return
        if it.extra.get("attachment"):
            try:
                _ec2_call(aws, "detach_network_interface", AttachmentId=it.extra["attachment"], Force=True)
            except ClientError as e:
                if not _missing(e):
                    raise
        _ec2_call(aws, "delete_network_interface", NetworkInterfaceId=it.id)

    for it in items:
        try:
            _each([it], delete)
        except TimeoutError as e:
            _fail(it, e)


def _delete_security_groups(aws: Aws, items: list[Item], waits: Waits) -> None:
    # Every rule first (by rule id), so no group is still referenced by another when it is deleted.
    ids = [i.id for i in items]
    rules = list(aws.pages("ec2", "describe_security_group_rules", "SecurityGroupRules",
                           Filters=[{"Name": "group-id", "Values": ids}]))

    def revoke(it: Item) -> None:
        for egress, op in ((False, "revoke_security_group_ingress"), (True, "revoke_security_group_egress")):
            mine = [r["SecurityGroupRuleId"] for r in rules if r["GroupId"] == it.id and r["IsEgress"] is egress]
            if mine:
                _ec2_call(aws, op, GroupId=it.id, SecurityGroupRuleIds=mine)

    revoked = _each(items, revoke)
    _each(revoked, lambda it: _ec2_call(aws, "delete_security_group", GroupId=it.id))


def _delete_placement_groups(aws: Aws, items: list[Item], waits: Waits) -> None:
    _each(items, lambda it: _ec2_call(aws, "delete_placement_group", GroupName=it.id))


def _delete_launch_templates(aws: Aws, items: list[Item], waits: Waits) -> None:
    _each(items, lambda it: _ec2_call(aws, "delete_launch_template", LaunchTemplateId=it.id))


def _delete_endpoints(aws: Aws, items: list[Item], waits: Waits) -> None:
    _each(items, lambda it: _ec2_call(aws, "delete_vpc_endpoints", VpcEndpointIds=[it.id]))


def _delete_route_tables(aws: Aws, items: list[Item], waits: Waits) -> None:
    def delete(it: Item) -> None:
        for assoc in it.extra.get("associations", []):
            _ec2_call(aws, "disassociate_route_table", AssociationId=assoc)
        _ec2_call(aws, "delete_route_table", RouteTableId=it.id)

    _each(items, delete)


def _delete_igws(aws: Aws, items: list[Item], waits: Waits) -> None:
    def delete(it: Item) -> None:
        for vpc in it.extra.get("vpcs", []):
            _ec2_call(aws, "detach_internet_gateway", InternetGatewayId=it.id, VpcId=vpc)
        _ec2_call(aws, "delete_internet_gateway", InternetGatewayId=it.id)

    _each(items, delete)


def _delete_subnets(aws: Aws, items: list[Item], waits: Waits) -> None:
    _each(items, lambda it: _ec2_call(aws, "delete_subnet", SubnetId=it.id))


def _delete_vpcs(aws: Aws, items: list[Item], waits: Waits) -> None:
    _each(items, lambda it: _ec2_call(aws, "delete_vpc", VpcId=it.id))


def _delete_profiles(aws: Aws, items: list[Item], waits: Waits) -> None:
    def delete(it: Item) -> None:
        for role in it.extra.get("roles", []):
            aws.call("iam", "remove_role_from_instance_profile", InstanceProfileName=it.id, RoleName=role)
        aws.call("iam", "delete_instance_profile", InstanceProfileName=it.id)

    _each(items, delete)


def _delete_roles(aws: Aws, items: list[Item], waits: Waits) -> None:
    def delete(it: Item) -> None:
        for p in list(aws.pages("iam", "list_attached_role_policies", "AttachedPolicies", token="Marker", RoleName=it.id)):
            aws.call("iam", "detach_role_policy", RoleName=it.id, PolicyArn=p["PolicyArn"])
        for name in list(aws.pages("iam", "list_role_policies", "PolicyNames", token="Marker", RoleName=it.id)):
            aws.call("iam", "delete_role_policy", RoleName=it.id, PolicyName=name)
        for prof in list(aws.pages("iam", "list_instance_profiles_for_role", "InstanceProfiles", token="Marker", RoleName=it.id)):
            aws.call("iam", "remove_role_from_instance_profile", InstanceProfileName=prof["InstanceProfileName"], RoleName=it.id)
        aws.call("iam", "delete_role", RoleName=it.id)

    _each(items, delete)


def _delete_parameters(aws: Aws, items: list[Item], waits: Waits) -> None:
    _each(items, lambda it: aws.call("ssm", "delete_parameter", Name=it.id))


def _delete_secrets(aws: Aws, items: list[Item], waits: Waits) -> None:
    _each(items, lambda it: aws.call("secretsmanager", "delete_secret", SecretId=it.id, ForceDeleteWithoutRecovery=True))


DELETERS = {
    "instance": _delete_instances, "fsx-association": _delete_associations, "file-system": _delete_file_systems,
    "nat-gateway": _delete_nat_gateways, "elastic-ip": _release_addresses, "network-interface": _delete_enis,
    "security-group": _delete_security_groups, "placement-group": _delete_placement_groups,
    "launch-template": _delete_launch_templates, "vpc-endpoint": _delete_endpoints, "route-table": _delete_route_tables,
    "internet-gateway": _delete_igws, "subnet": _delete_subnets, "vpc": _delete_vpcs,
    "instance-profile": _delete_profiles, "iam-role": _delete_roles, "ssm-parameter": _delete_parameters,
    "secret": _delete_secrets,
}
assert set(DELETERS) == set(ORDER)


def reap(aws: Aws, cluster: str, yes: bool = False, waits: Waits | None = None,
         on_step: Callable[[str, list[Item]], None] | None = None) -> Inventory:
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
        if on_step:
            on_step(kind, items)
        DELETERS[kind](aws, items, waits)
    return inv


def table(inv: Inventory, title: str):
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col in ("kind", "id", "name", "result"):
        t.add_column(col, overflow="fold")
    for it in inv.items:
        style = "red" if it.failed else ("green" if it.result == "deleted" else "")
        t.add_row(it.kind, it.id, it.name, f"[{style}]{it.result}[/]" if style else it.result)
    return t
