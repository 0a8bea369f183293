"""reap deletes in dependency order. moto enforces few of AWS's dependencies (a subnet with interfaces, a
VPC with subnets, a group still referenced...), so the order is checked on the calls themselves. The
placement group and the data repository association, which moto does not model, are answered by
injected responses so their deletes are in the sequence too."""

from __future__ import annotations

from hpcc_contract.names import TAG_CLUSTER
from infra.ops.aws import Aws, Backoff
from infra.ops.reap.run import Waits, inventory, reap
from infra.plan.embedded_aws import embedded_aws
from infra.plan.runner import plan_stack_file
from tests.ops.support import EXAMPLES, inject_response

REGION = "us-east-1"

# (earlier, later): no call of the second before every call of the first is done. Per-kind order only,
# plus: every security group rule revoked before any group is deleted (groups reference each other).
MUST_PRECEDE = [
    ("TerminateInstances", "DeleteNetworkInterface"),
    ("TerminateInstances", "DeleteSecurityGroup"),
    ("TerminateInstances", "DeletePlacementGroup"),
    ("TerminateInstances", "DeleteSubnet"),
    ("DeleteDataRepositoryAssociation", "DeleteFileSystem"),
    ("DeleteFileSystem", "DeleteSecurityGroup"),
    ("DeleteFileSystem", "DeleteSubnet"),
    ("DeleteNatGateway", "ReleaseAddress"),
    ("DeleteNatGateway", "DeleteSubnet"),
    ("DeleteNetworkInterface", "DeleteSecurityGroup"),
    ("DeleteNetworkInterface", "DeleteSubnet"),
    ("RevokeSecurityGroupIngress", "DeleteSecurityGroup"),
    ("RevokeSecurityGroupEgress", "DeleteSecurityGroup"),
    ("DeleteVpcEndpoints", "DeleteRouteTable"),
    ("DeleteRouteTable", "DeleteSubnet"),
    ("DeleteInternetGateway", "DeleteVpc"),
    ("DeleteSecurityGroup", "DeleteVpc"),
    ("DeleteSubnet", "DeleteVpc"),
    ("RemoveRoleFromInstanceProfile", "DeleteRole"),
    ("DeleteInstanceProfile", "DeleteRole"),
]


def record_calls(aws: Aws, services: list[str]) -> list[str]:
    calls: list[str] = []
    for svc in services:
        aws.client(svc).meta.events.register("before-parameter-build", lambda model, **_: calls.append(model.name))
    return calls


def test_reap_deletes_in_dependency_order():
    with embedded_aws(REGION) as env:
        plan_stack_file(EXAMPLES / "c6i-oneccl.yaml", aws=env)
        aws = Aws(REGION, backoff=Backoff(sleep=lambda _: None))
        fs_id = env.client("fsx").describe_file_systems()["FileSystems"][0]["FileSystemId"]
        inject_response(
            aws.client("ec2"),
            "DescribePlacementGroups",
            {
                "PlacementGroups": [
                    {
                        "GroupName": "hpcc-cpu-oneccl",
                        "Strategy": "cluster",
                        "State": "available",
                        "Tags": [{"Key": TAG_CLUSTER, "Value": "cpu-oneccl"}],
                    }
                ]
            },
        )
        inject_response(aws.client("ec2"), "DeletePlacementGroup", {})
        inject_response(
            aws.client("fsx"),
            "DescribeDataRepositoryAssociations",
            {
                "Associations": [
                    {
                        "AssociationId": "dra-0123456789abcdef0",
                        "FileSystemId": fs_id,
                        "DataRepositoryPath": "s3://bucket/data",
                    }
                ]
            },
        )
        inject_response(
            aws.client("fsx"), "DeleteDataRepositoryAssociation", {"AssociationId": "dra-0123456789abcdef0"}
        )

        listed = {i.kind for i in inventory(aws, "cpu-oneccl").items}
        assert {"placement-group", "fsx-association"} <= listed

        calls = record_calls(aws, ["ec2", "fsx", "iam", "ssm", "secretsmanager"])
        inv = reap(aws, "cpu-oneccl", yes=True, waits=Waits(poll=0, timeout=5))
        assert not [i for i in inv.items if i.failed], [(i.kind, i.id, i.result) for i in inv.items if i.failed]
        for earlier, later in MUST_PRECEDE:
            assert earlier in calls and later in calls, (earlier, later)
            last_earlier = max(n for n, c in enumerate(calls) if c == earlier)
            first_later = min(n for n, c in enumerate(calls) if c == later)
            assert last_earlier < first_later, f"{later} before {earlier} was done"
        assert {i.result for i in inv.items} == {"deleted"}
