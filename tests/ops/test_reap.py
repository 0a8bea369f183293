"""reap against clusters planned into moto by the real program: a half-finished destroy that left an ENI
behind, groups that reference each other, and a second cluster that must be left alone."""

from __future__ import annotations

from typer.testing import CliRunner

from infra.ops.aws import Aws, Backoff
from infra.ops.cli import app
from infra.ops.reap.run import Waits, inventory, reap
from infra.plan.embedded_aws import embedded_aws
from infra.plan.runner import plan_stack_file
from tests.ops.support import EXAMPLES, stack_file

REGION = "us-east-1"


def quiet_aws() -> tuple[Aws, list[float]]:
    slept: list[float] = []
    return Aws(REGION, backoff=Backoff(sleep=slept.append)), slept


def ids(inv) -> set[tuple[str, str]]:
    return {(i.kind, i.id) for i in inv.items}


def test_reap_after_a_destroy_that_left_an_eni(tmp_path):
    """Two clusters; the first's destroy stopped half-way and left an EFA interface behind."""
    with embedded_aws(REGION) as env:
        plan_stack_file(EXAMPLES / "c6i-oneccl.yaml", aws=env)
        plan_stack_file(stack_file(tmp_path, "c6i-oneccl", name="other"), aws=env)
        aws, _ = quiet_aws()
        ec2 = env.client("ec2")
        other_before = ids(inventory(aws, "other"))

        # What a half-finished destroy leaves: instances gone, an ENI still in the subnet, the rest untouched.
        gone = [
            i["InstanceId"]
            for r in ec2.describe_instances(Filters=[{"Name": "tag:hpcc:cluster", "Values": ["cpu-oneccl"]}])[
                "Reservations"
            ]
            for i in r["Instances"]
        ]
        ec2.terminate_instances(InstanceIds=gone)
        subnet = ec2.describe_subnets(Filters=[{"Name": "tag:Name", "Values": ["cpu-oneccl-private"]}])["Subnets"][0][
            "SubnetId"
        ]
        eni = ec2.create_network_interface(
            SubnetId=subnet,
            Description="left behind",
            TagSpecifications=[
                {"ResourceType": "network-interface", "Tags": [{"Key": "hpcc:cluster", "Value": "cpu-oneccl"}]}
            ],
        )["NetworkInterface"]["NetworkInterfaceId"]

        found = inventory(aws, "cpu-oneccl")
        kinds = {i.kind for i in found.items}
        assert ("network-interface", eni) in ids(found)
        assert {"instance", "head-instance"} & kinds == set()
        assert {
            "file-system",
            "nat-gateway",
            "elastic-ip",
            "security-group",
            "subnet",
            "vpc",
            "iam-role",
            "instance-profile",
            "ssm-parameter",
            "secret",
            "internet-gateway",
            "route-table",
            "vpc-endpoint",
            "launch-template",
        } <= kinds
        assert any("placement groups" in n for n in found.notes)  # moto cannot list them: said, not skipped silently

        dry = reap(aws, "cpu-oneccl")
        assert {i.result for i in dry.items} == {"would delete"} and ids(inventory(aws, "cpu-oneccl")) == ids(found)

        out = CliRunner().invoke(app, ["reap", "--cluster", "cpu-oneccl", "--region", REGION, "--yes"])
        assert out.exit_code == 0, out.output
        assert eni in out.output and "deleted" in out.output
        assert inventory(aws, "cpu-oneccl").items == []
        assert not ec2.describe_network_interfaces(Filters=[{"Name": "network-interface-id", "Values": [eni]}])[
            "NetworkInterfaces"
        ]
        assert ids(inventory(aws, "other")) == other_before  # the other cluster is untouched
        others = [i for k, i in other_before if k in ("instance", "head-instance")]
        assert others and {
            x["State"]["Name"]
            for r in ec2.describe_instances(InstanceIds=others)["Reservations"]
            for x in r["Instances"]
        } == {"running"}


def test_reap_deletes_security_groups_that_reference_each_other():
    with embedded_aws(REGION) as env:
        plan_stack_file(EXAMPLES / "p5-llm.yaml", aws=env)
        aws, _ = quiet_aws()
        inv = reap(aws, "llm", yes=True, waits=Waits(poll=0, timeout=5))
        groups = inv.of("security-group")
        assert len(groups) == 3 and {g.result for g in groups} == {"deleted"}
        assert not [i for i in inv.items if i.failed]
        assert inventory(aws, "llm").items == []
