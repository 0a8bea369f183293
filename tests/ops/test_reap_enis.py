"""reap and interfaces that outlive their instance: one attached after launch (DeleteOnTermination=false)
stays behind when the instance terminates (AWS detaches it; moto leaves it attached to the terminated
instance). Either way reap must find it and delete it, or the subnet and VPC cannot go."""

from __future__ import annotations

from infra.ops.aws import Aws, Backoff
from infra.ops.reap.run import Waits, inventory, reap
from infra.plan.embedded_aws import embedded_aws
from infra.plan.runner import plan_stack_file
from tests.ops.support import EXAMPLES

REGION = "us-east-1"


def node_instance(ec2, node: str) -> dict:
    [inst] = [
        i
        for r in ec2.describe_instances(
            Filters=[
                {"Name": "tag:hpcc:cluster", "Values": ["cpu-oneccl"]},
                {"Name": "tag:hpcc:node", "Values": [node]},
            ]
        )["Reservations"]
        for i in r["Instances"]
    ]
    return inst


def eni_exists(ec2, eni: str) -> bool:
    return bool(
        ec2.describe_network_interfaces(Filters=[{"Name": "network-interface-id", "Values": [eni]}])[
            "NetworkInterfaces"
        ]
    )


def test_reap_deletes_an_interface_attached_without_delete_on_termination():
    with embedded_aws(REGION) as env:
        plan_stack_file(EXAMPLES / "c6i-oneccl.yaml", aws=env)
        ec2 = env.client("ec2")
        inst = node_instance(ec2, "head")  # the one instance Pulumi creates
        eni = ec2.create_network_interface(SubnetId=inst["SubnetId"], Description="attached by hand")[
            "NetworkInterface"
        ]["NetworkInterfaceId"]
        ec2.attach_network_interface(NetworkInterfaceId=eni, InstanceId=inst["InstanceId"], DeviceIndex=1)
        aws = Aws(REGION, backoff=Backoff(sleep=lambda _: None))

        listed = {i.id: i for i in inventory(aws, "cpu-oneccl").of("network-interface")}
        assert eni in listed and listed[eni].extra["attachment"]
        # Primary interfaces go with their instances: never listed on their own.
        primaries = {
            e["NetworkInterfaceId"]
            for e in ec2.describe_network_interfaces()["NetworkInterfaces"]
            if (e.get("Attachment") or {}).get("DeviceIndex") == 0
        }
        assert primaries
        assert not primaries & set(listed)

        inv = reap(aws, "cpu-oneccl", yes=True, waits=Waits(poll=0, timeout=5))
        [item] = [i for i in inv.items if i.id == eni]
        assert item.result == "deleted"
        assert not [i for i in inv.items if i.failed]
        assert not eni_exists(ec2, eni)
        assert inventory(aws, "cpu-oneccl").items == []
