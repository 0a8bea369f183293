"""The kinds reap cannot describe in a table row: FSx data repository associations (listed by their file
systems), interfaces (some go with their instance, some outlive it, some belong to a service), security
group rules (revoked before any group goes), IAM (found by name, owned by tag) and the secret."""

from __future__ import annotations

from botocore.exceptions import ClientError

from hpcc_contract.names import TAG_CLUSTER, Paths, role_name
from infra.ops.aws import Aws, pages, waiter_done
from infra.ops.reap.kinds import Find, Found, Item, Waits, each, missing, owned, records, unless_missing, why

FILE_SYSTEMS = Find(
    "describe_file_systems",
    "FileSystemId",
    service="fsx",
    by_tag=False,
    owner=lambda fs, found: owned(fs.get("Tags"), found.cluster),  # FSx has no tag filter
    keep=lambda fs, found: fs.get("Lifecycle") != "DELETING",
    extra=lambda fs: {"deployment": fs.get("LustreConfiguration", {}).get("DeploymentType", "")},
)


# -- FSx data repository associations ------------------------------------------------------------------


def find_associations(found: Found) -> list[Item]:
    fs_ids = [fs["FileSystemId"] for fs in records(found, "file-system", FILE_SYSTEMS) if FILE_SYSTEMS.keep(fs, found)]
    if not fs_ids:
        return []
    try:
        return [
            Item("fsx-association", dra["AssociationId"], dra.get("DataRepositoryPath", ""))
            for dra in pages(
                found.aws,
                "fsx",
                "describe_data_repository_associations",
                "Associations",
                Filters=[{"Name": "file-system-id", "Values": fs_ids}],
            )
            if dra.get("FileSystemId") in fs_ids
        ]
    except (ClientError, NotImplementedError) as e:
        found.inv.notes.append(
            f"could not list the file systems' data repository associations ({why(e)}); "
            "deleting a file system removes them anyway"
        )
        return []


# -- network interfaces --------------------------------------------------------------------------------


def outlives_its_instance(eni: dict, found: Found) -> bool:
    """Goes with its instance: delete-on-termination, or the primary interface made at launch (AWS's
    default is delete-on-termination; moto reports false for it, and it cannot be detached by hand).
    A secondary one attached with DeleteOnTermination=false (e.g. attached after launch) outlives its
    instance and would keep the subnet and VPC from going: it is listed, and deleted after the instances
    (detached first if still attached). Terminated instances count: their interfaces went with them."""
    attachment = eni.get("Attachment") or {}
    instance_ids = {i["InstanceId"] for i in found.records.get("instance", [])}
    return not (
        attachment.get("InstanceId") in instance_ids
        and (attachment.get("DeleteOnTermination", True) or attachment.get("DeviceIndex") == 0)
    )


def delete_interfaces(aws: Aws, items: list[Item], waits: Waits) -> None:
    def delete(it: Item) -> None:
        if it.extra.get("requester_managed"):
            # Made by a service (NAT, FSx, endpoint): AWS removes it with its owner, deleted in an earlier step.
            waits.until(
                waiter_done(
                    aws, "ec2", "NetworkInterfaceDeleted", Filters=[{"Name": "network-interface-id", "Values": [it.id]}]
                ),
                f"{it.id} to go with the service that made it",
            )
            return
        if it.extra.get("attachment"):
            unless_missing(
                lambda: aws.call("ec2", "detach_network_interface", AttachmentId=it.extra["attachment"], Force=True)
            )
        aws.call("ec2", "delete_network_interface", NetworkInterfaceId=it.id)

    each(items, delete)


# -- security groups -----------------------------------------------------------------------------------


def delete_security_groups(aws: Aws, items: list[Item], waits: Waits) -> None:
    """Every rule first (by rule id), so no group is still referenced by another when it is deleted."""
    rules = list(
        pages(
            aws, "ec2", "describe_security_group_rules", Filters=[{"Name": "group-id", "Values": [i.id for i in items]}]
        )
    )

    def revoke(it: Item) -> None:
        for egress, op in ((False, "revoke_security_group_ingress"), (True, "revoke_security_group_egress")):
            ids = [r["SecurityGroupRuleId"] for r in rules if r["GroupId"] == it.id and r["IsEgress"] is egress]
            if ids:
                aws.call("ec2", op, GroupId=it.id, SecurityGroupRuleIds=ids)

    revoked = each(items, revoke)
    each(revoked, lambda it: aws.call("ec2", "delete_security_group", GroupId=it.id))


# -- IAM: one role per node role, and its instance profile of the same name (infra/program/components/identity.py)


def _get(aws: Aws, op: str, key: str, **kw) -> dict | None:
    try:
        return aws.call("iam", op, **kw)[key]
    except ClientError as e:
        if missing(e):
            return None
        raise


def _role_names(cluster: str) -> list[str]:
    return list(dict.fromkeys(role_name(cluster, role) for role in ("head", "compute")))


def _owned_roles(found: Found) -> dict[str, bool]:
    """Each role name -> whether it exists tagged as this cluster's (asked once per inventory)."""
    if "iam-role" not in found.records:
        found.records["iam-role"] = []
        for name in _role_names(found.cluster):
            role = _get(found.aws, "get_role", "Role", RoleName=name)
            if role is None:
                continue
            if owned(role.get("Tags"), found.cluster):
                found.records["iam-role"].append(role)
            else:
                found.inv.notes.append(f"IAM role {name} is not tagged {TAG_CLUSTER}={found.cluster}; left alone")
    owned_names = {r["RoleName"] for r in found.records["iam-role"]}
    return {name: name in owned_names for name in _role_names(found.cluster)}


def find_instance_profiles(found: Found) -> list[Item]:
    items = []
    for name, role_owned in _owned_roles(found).items():
        prof = _get(found.aws, "get_instance_profile", "InstanceProfile", InstanceProfileName=name)
        if prof is None:
            continue
        roles = [r["RoleName"] for r in prof.get("Roles", [])]
        # GetInstanceProfile carries the tags; an untagged profile counts as the cluster's when it holds only its role.
        if owned(prof.get("Tags"), found.cluster) if prof.get("Tags") else (role_owned and roles in ([], [name])):
            items.append(Item("instance-profile", name, extra={"roles": roles}))
        else:
            found.inv.notes.append(f"instance profile {name} is not tagged {TAG_CLUSTER}={found.cluster}; left alone")
    return items


def find_roles(found: Found) -> list[Item]:
    return [Item("iam-role", name) for name, role_owned in _owned_roles(found).items() if role_owned]


def remove_roles(aws: Aws, it: Item) -> None:
    for role in it.extra.get("roles", []):
        aws.call("iam", "remove_role_from_instance_profile", InstanceProfileName=it.id, RoleName=role)


def empty_role(aws: Aws, it: Item) -> None:
    """What DeleteRole refuses to delete through: attached and inline policies, instance profiles."""
    for p in list(pages(aws, "iam", "list_attached_role_policies", RoleName=it.id)):
        aws.call("iam", "detach_role_policy", RoleName=it.id, PolicyArn=p["PolicyArn"])
    for name in list(pages(aws, "iam", "list_role_policies", RoleName=it.id)):
        aws.call("iam", "delete_role_policy", RoleName=it.id, PolicyName=name)
    for prof in list(pages(aws, "iam", "list_instance_profiles_for_role", RoleName=it.id)):
        aws.call(
            "iam", "remove_role_from_instance_profile", InstanceProfileName=prof["InstanceProfileName"], RoleName=it.id
        )


# -- the SSH key secret --------------------------------------------------------------------------------


def find_secret(found: Found) -> list[Item]:
    sid = Paths(found.cluster).ssh_secret
    try:
        s = found.aws.call("secretsmanager", "describe_secret", SecretId=sid)
    except ClientError as e:
        if missing(e):
            return []
        raise
    if s.get("DeletedDate"):
        return []
    if not owned(s.get("Tags"), found.cluster):
        found.inv.notes.append(f"secret {sid} is not tagged {TAG_CLUSTER}={found.cluster}; left alone")
        return []
    return [Item("secret", sid, extra={"arn": s.get("ARN")})]
