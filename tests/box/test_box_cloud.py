"""The small cloud itself (tests/box/cloud.py), below the program and the controller: the box's EC2 below the API, on
the shared box (tests/box/shared.py) under another cluster's tag (`cloudbox`, which its controller does not see).
Instances launched by CreateFleet (the controller's own request, hpcc_node/controller/fleet.py) from a launch
template become namespace nodes at the address moto gave them, running that instance's user data; a terminated
instance's node goes and the next launch gets a new address; a node whose namespace died stays dead while its
instance runs on. Each test terminates what it launched."""

import base64
import ipaddress
import time

import pytest

from hpcc_node.controller import fleet as ec2_fleet
from hpcc_node.controller.model import Group
from tests.box.cloud import FLEET_CIDR, TAG_GROUP, FleetBox
from tests.box.harness import BOX_AMI
from tests.box.machine import box_namespaces
from tests.box.test_box_fleet import wait_for as fleet_wait_for

pytestmark = [pytest.mark.box, pytest.mark.long]
CLUSTER = "cloudbox"
TEMPLATE = f"{CLUSTER}-t-lt"
# What the instances run: proof of who they are and where, read by the test from the node's own /etc/hpcc.
USER_DATA = """#!/bin/bash
set -eu
address=$(ip -4 -o addr show dev eth0 | awk '{print $4}')
printf '%s %s %s\\n' "$HPCC_INSTANCE_ID" "$HPCC_NODE_IP" "$address" >/etc/hpcc/booted
"""


@pytest.fixture
def cloud(fleet):
    """The shared box, watching `cloudbox` instances too; each test's instances are terminated after it."""
    ec2 = fleet.client("ec2")
    if not ec2.describe_launch_templates(Filters=[{"Name": "launch-template-name", "Values": [TEMPLATE]}])[
        "LaunchTemplates"
    ]:
        ec2.create_launch_template(
            LaunchTemplateName=TEMPLATE,
            LaunchTemplateData={
                "ImageId": BOX_AMI,
                "UserData": base64.b64encode(USER_DATA.encode()).decode(),
                "TagSpecifications": [{"ResourceType": "instance", "Tags": [{"Key": TAG_GROUP, "Value": "t"}]}],
            },
        )
    fleet.clusters.add(CLUSTER)
    fleet.undo(f"the {CLUSTER} instances terminated", lambda: terminate_all(fleet))
    return fleet


def terminate_all(box: FleetBox) -> None:
    live = [i for i, inst in box.instances(CLUSTER).items() if inst["State"]["Name"] in ("pending", "running")]
    if live:
        box.client("ec2").terminate_instances(InstanceIds=live)
    deadline = time.time() + 60
    while any(s.node is not None and s.node.alive for s in box.launched.values() if s.instance_id in live):
        assert time.time() < deadline, f"the watcher did not stop the nodes of {live}"
        time.sleep(0.5)


def launch(box: FleetBox, count: int, token: str) -> list[str]:
    group = Group("t", "c6i.16xlarge", count, launch_template=TEMPLATE, subnet_id=box.subnet_id)
    out = ec2_fleet.launch(box.client("ec2"), ec2_fleet.request(group, count, f"{token}-{time.time()}", CLUSTER))
    assert len(out.instance_ids) == count, out
    return list(out.instance_ids)


def wait_for(what, timeout: float, box: FleetBox):
    return fleet_wait_for(what, timeout, box, every=0.5)


def booted(box: FleetBox, iid: str) -> str:
    seen = box.launched.get(iid)
    if seen is None or seen.node is None or seen.node.bootstrap is None or seen.node.bootstrap.poll() is None:
        return ""
    path = seen.node.file("/etc/hpcc/booted")
    return path.read_text().strip() if path.exists() else ""


def test_a_every_instance_launched_boots_a_node_at_its_own_address_with_its_user_data(cloud):
    ids = launch(cloud, 2, "box-cloud-a")
    moto = cloud.instances(CLUSTER)
    for iid in ids:
        line = wait_for(lambda iid=iid: booted(cloud, iid), 90, cloud)
        ip = moto[iid]["PrivateIpAddress"]
        assert line == f"{iid} {ip} {ip}/16", line  # its id, the address moto gave it, on its own interface
        assert ipaddress.ip_address(ip) in ipaddress.ip_network(FLEET_CIDR) and cloud.launched[iid].group == "t"
    a, b = (cloud.launched[i].node for i in ids)
    reach = a.run("bash", "-c", f"exec 3<>/dev/tcp/{b.ip}/22 && head -c 4 <&3", timeout=20)
    assert reach.stdout == "SSH-", f"{a.name} cannot reach {b.name}'s sshd at {b.ip}: {reach.stderr}"


def test_b_a_terminated_instance_loses_its_node_and_the_next_launch_gets_a_new_address(cloud):
    ids = launch(cloud, 2, "box-cloud-b")
    for iid in ids:
        wait_for(lambda iid=iid: booted(cloud, iid), 90, cloud)
    first = cloud.launched[ids[0]]
    ec2 = cloud.client("ec2")
    ec2.terminate_instances(InstanceIds=[first.instance_id])
    # The whole stop, not only its first step: the namespace goes before the watcher marks the node and instance.
    wait_for(lambda: first.stopped and not first.node.alive and first.node.netns not in box_namespaces(), 30, cloud)
    others = [cloud.launched[i] for i in ids[1:]]
    assert all(s.node.netns in box_namespaces() for s in others), "a termination stopped another node"
    (new,) = launch(cloud, 1, "box-cloud-b2")
    line = wait_for(lambda: booted(cloud, new), 90, cloud)
    ip = cloud.instances(CLUSTER)[new]["PrivateIpAddress"]
    assert ip != first.ip and ip not in {s.ip for s in others}, (ip, first.ip)
    assert line == f"{new} {ip} {ip}/16"


def test_c_a_node_whose_namespace_died_stays_dead_and_its_instance_runs_on(cloud):
    (iid,) = launch(cloud, 1, "box-cloud-c")
    wait_for(lambda: booted(cloud, iid), 90, cloud)
    seen = cloud.launched[iid]
    count = len(cloud.launched)
    cloud.kill(seen.node)
    ticks = cloud.watcher.ticks
    wait_for(lambda: cloud.watcher.ticks >= ticks + 5, 60, cloud)  # five looks at EC2 since
    assert seen.node.netns not in box_namespaces()
    assert cloud.instances(CLUSTER)[seen.instance_id]["State"]["Name"] == "running"
    assert len(cloud.launched) == count and not seen.stopped, "the box replaced or stopped a hung instance itself"
    assert cloud.watcher.errors == []
