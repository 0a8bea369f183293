"""The group resource's delete (infra/program/components/groups.py): it terminates exactly the group's instances, waits
until they are terminated, and does nothing the second time. Against moto's EC2."""

import boto3
import pytest
from moto import mock_aws

from hpcc_contract.names import TAG_CLUSTER, TAG_GROUP
from infra.program.components.groups import GroupProvider, group_instances, terminate_group

REGION = "us-east-1"
IMAGE = "ami-12c6146b"  # one of moto's built-in images


@pytest.fixture
def ec2():
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION)


def launch(ec2, cluster, group, n):
    tags = [{"Key": TAG_CLUSTER, "Value": cluster}] + ([{"Key": TAG_GROUP, "Value": group}] if group else [])
    out = ec2.run_instances(
        ImageId=IMAGE,
        InstanceType="c5.large",
        MinCount=n,
        MaxCount=n,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    return sorted(i["InstanceId"] for i in out["Instances"])


def states(ec2, ids):
    found = ec2.describe_instances(InstanceIds=ids)["Reservations"]
    return {i["InstanceId"]: i["State"]["Name"] for r in found for i in r["Instances"]}


def test_delete_terminates_the_groups_instances_only_and_waits(ec2):
    gpu = launch(ec2, "demo", "gpu", 3)
    cpu = launch(ec2, "demo", "cpu", 2)
    other = launch(ec2, "other", "gpu", 2)
    head = launch(ec2, "demo", None, 1)  # the head has no group tag
    waited = []
    real = ec2.get_waiter

    def spying_waiter(name):
        waiter = real(name)
        waited.append(name)
        return waiter

    ec2.get_waiter = spying_waiter
    assert terminate_group(ec2, "demo", "gpu", delay=0, attempts=3) == gpu
    assert waited == ["instance_terminated"]
    assert set(states(ec2, gpu).values()) == {"terminated"}
    assert set(states(ec2, cpu + other + head).values()) == {"running"}


def test_delete_is_idempotent(ec2):
    gpu = launch(ec2, "demo", "gpu", 2)
    assert terminate_group(ec2, "demo", "gpu", delay=0, attempts=3) == gpu
    assert group_instances(ec2, "demo", "gpu") == []
    assert terminate_group(ec2, "demo", "gpu", delay=0, attempts=3) == []


def test_a_group_with_no_instances_deletes_at_once(ec2):
    launch(ec2, "demo", "cpu", 1)
    assert terminate_group(ec2, "demo", "gpu", delay=0, attempts=1) == []


def test_the_provider_deletes_through_the_same_function(ec2, monkeypatch):
    gpu = launch(ec2, "demo", "gpu", 2)
    GroupProvider().delete("demo/gpu", {"cluster": "demo", "group": "gpu", "region": REGION})
    assert set(states(ec2, gpu).values()) == {"terminated"}


def test_the_provider_replaces_only_for_another_cluster_group_region_subnet_or_security_group():
    p = GroupProvider()
    old = {"cluster": "demo", "group": "gpu", "region": REGION, "launch_template_id": "lt-1"}
    assert p.diff("x", old, {**old, "launch_template_id": "lt-2"}).replaces == []
    assert p.diff("x", old, {**old, "launch_template_id": "lt-2"}).changes
    assert p.diff("x", old, {**old, "region": "us-west-2"}).replaces == ["region"]
    assert p.diff("x", old, {**old, "subnet_id": "subnet-2"}).replaces == ["subnet_id"]
    assert not p.diff("x", old, dict(old)).changes
