"""One resource per node group whose deletion terminates the group's instances, so a plain `pulumi destroy`
removes what the controller launched (compute instances are not Pulumi resources one by one).

A Pulumi dynamic resource (`pulumi.dynamic.Resource`): create records the group and launches nothing (the
controller on the head launches); delete terminates every instance tagged with the cluster and the group and waits
until EC2 says they are terminated (botocore's `instance_terminated` waiter), so the security groups, subnet and
launch template deleted after it are free. The head instance depends on these resources: destroy removes the head
(the controller) first, then each group's instances, so no controller relaunches what is being removed.

`terminate_group` is a plain function over an injected boto3 EC2 client (tests/program/test_groups_resource.py runs it
against moto)."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi.dynamic as dynamic

from hpcc_contract.names import TAG_CLUSTER, TAG_GROUP

# Every state but terminated: a stopped or stopping instance still holds its volumes and interfaces.
NOT_TERMINATED = ["pending", "running", "shutting-down", "stopping", "stopped"]
PAGE = 1000  # DescribeInstances' MaxResults; TerminateInstances and the waiter take the same batches
# The waiter polls every 15 s (DescribeInstances); 80 polls are 20 minutes, beyond a p5's shutdown.
WAIT_DELAY_SECONDS, WAIT_ATTEMPTS = 15, 80
REPLACING = ("cluster", "group", "region", "subnet_id", "security_group_id")


def group_instances(ec2: Any, cluster: str, group: str) -> list[str]:
    """Ids of the group's instances not yet terminated, by tag filters in pages of PAGE (no per-instance call)."""
    filters = [
        {"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster]},
        {"Name": f"tag:{TAG_GROUP}", "Values": [group]},
        {"Name": "instance-state-name", "Values": NOT_TERMINATED},
    ]
    ids = []
    for page in ec2.get_paginator("describe_instances").paginate(Filters=filters, PaginationConfig={"PageSize": PAGE}):
        ids += [i["InstanceId"] for r in page["Reservations"] for i in r["Instances"]]
    return sorted(ids)


def terminate_group(
    ec2: Any, cluster: str, group: str, delay: float = WAIT_DELAY_SECONDS, attempts: int = WAIT_ATTEMPTS
) -> list[str]:
    """Terminate the group's instances and wait until they are terminated; returns their ids. Idempotent: a group
    with none (or only terminated ones) returns [] at once. Instances of other clusters or groups are untouched:
    the filters match both tags."""
    ids = group_instances(ec2, cluster, group)
    batches = [ids[i : i + PAGE] for i in range(0, len(ids), PAGE)]
    for batch in batches:
        ec2.terminate_instances(InstanceIds=batch)
    waiter = ec2.get_waiter("instance_terminated")
    for batch in batches:
        waiter.wait(InstanceIds=batch, WaiterConfig={"Delay": delay, "MaxAttempts": attempts})
    return ids


class GroupProvider(dynamic.ResourceProvider):
    """Create and update record the inputs; delete terminates (above). The provider runs where `pulumi up` runs,
    with the deployer's credentials (its policy: infra/ops/deployer_policy.py)."""

    def create(self, props):
        return dynamic.CreateResult(id_=f"{props['cluster']}/{props['group']}", outs=props)

    def diff(self, _id, old, new):
        # Another subnet or security group: the old one cannot go while the group's instances are in it, so the
        # group is replaced, its instances terminated first (the controller launches them into the new one).
        replaces = [k for k in REPLACING if old.get(k) != new.get(k)]
        changed = replaces or [k for k in new if old.get(k) != new.get(k)]
        return dynamic.DiffResult(changes=bool(changed), replaces=replaces, delete_before_replace=True)

    def update(self, _id, _old, new):
        return dynamic.UpdateResult(outs=new)

    def delete(self, _id, props):
        import boto3

        terminate_group(boto3.client("ec2", region_name=props["region"]), props["cluster"], props["group"])


class GroupInstances(dynamic.Resource):
    """`<c>-group-<group>`: its inputs reference the group's launch template and subnet, so Pulumi deletes it
    (terminating the instances) before them."""

    def __init__(
        self,
        name: str,
        cluster: str,
        group: str,
        region: str,
        launch_template_id: pulumi.Input[str],
        subnet_id: pulumi.Input[str],
        security_group_id: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__(
            GroupProvider(),
            name,
            {
                "cluster": cluster,
                "group": group,
                "region": region,
                "launch_template_id": launch_template_id,
                "subnet_id": subnet_id,
                "security_group_id": security_group_id,
            },
            opts,
        )
