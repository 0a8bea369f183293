"""The small cloud itself (tests/box/cloud.py), with no program and no controller: the box's EC2 below the API.
Instances launched by CreateFleet (the controller's own request, hpcc_node/controller/fleet.py) from a launch
template become namespace nodes at the address moto gave them, running that instance's user data; a terminated
instance's node goes and the next launch gets a new address; a node whose namespace died stays dead while its
instance runs on. Runs in order (a..c) on one bare box."""

import base64
import time

import pytest

from hpcc_node.controller import fleet
from hpcc_node.controller.model import Group
from tests.box.cloud import FLEET_CIDR, FleetBox, TAG_GROUP
from tests.box.harness import BOX_AMI
from tests.box.machine import box_namespaces, leftovers
from tests.box.test_box_fleet import wait_for as fleet_wait_for

pytestmark = [pytest.mark.box, pytest.mark.long]
# What the instances run: proof of who they are and where, read by the test from the node's own /etc/hpcc.
USER_DATA = """#!/bin/bash
set -eu
printf '%s %s %s\\n' "$HPCC_INSTANCE_ID" "$HPCC_NODE_IP" "$(ip -4 -o addr show dev eth0 | awk '{print $4}')" >/etc/hpcc/booted
"""


@pytest.fixture(scope="module")
def cloud(box_machine):
    box = FleetBox(bare=True, name="cloudbox")
    box.start()
    box.client("ec2").create_launch_template(
        LaunchTemplateName="cloudbox-t-lt",
        LaunchTemplateData={
            "ImageId": BOX_AMI,
            "UserData": base64.b64encode(USER_DATA.encode()).decode(),
            "TagSpecifications": [{"ResourceType": "instance", "Tags": [{"Key": TAG_GROUP, "Value": "t"}]}],
        },
    )
    yield box
    box.stop()
    assert leftovers() == [], "the box left these behind"


def launch(box: FleetBox, count: int, token: str) -> list[str]:
    group = Group("t", "c6i.16xlarge", count, launch_template="cloudbox-t-lt", subnet_id=box.subnet_id)
    out = fleet.launch(box.client("ec2"), fleet.request(group, count, token, box.name))
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
    moto = cloud.instances()
    for iid in ids:
        line = wait_for(lambda: booted(cloud, iid), 90, cloud)
        ip = moto[iid]["PrivateIpAddress"]
        assert line == f"{iid} {ip} {ip}/24", line  # its id, the address moto gave it, on its own interface
        assert ip.startswith(FLEET_CIDR.rsplit(".", 1)[0]) and cloud.launched[iid].group == "t"
    a, b = (cloud.launched[i].node for i in ids)
    reach = a.run("bash", "-c", f"exec 3<>/dev/tcp/{b.ip}/22 && head -c 4 <&3", timeout=20)
    assert reach.stdout == "SSH-", f"{a.name} cannot reach {b.name}'s sshd at {b.ip}: {reach.stderr}"


def test_b_a_terminated_instance_loses_its_node_and_the_next_launch_gets_a_new_address(cloud):
    first = next(iter(cloud.launched.values()))
    ec2 = cloud.client("ec2")
    ec2.terminate_instances(InstanceIds=[first.instance_id])
    wait_for(lambda: first.node.netns not in box_namespaces(), 30, cloud)
    assert not first.node.alive and first.stopped
    others = [s for s in cloud.launched.values() if s is not first]
    assert all(s.node.netns in box_namespaces() for s in others), "a termination stopped another node"
    (new,) = launch(cloud, 1, "box-cloud-b")
    line = wait_for(lambda: booted(cloud, new), 90, cloud)
    ip = cloud.instances()[new]["PrivateIpAddress"]
    assert ip != first.ip and ip not in {s.ip for s in others}, (ip, first.ip)
    assert line == f"{new} {ip} {ip}/24"


def test_c_a_node_whose_namespace_died_stays_dead_and_its_instance_runs_on(cloud):
    seen = next(s for s in cloud.launched.values() if not s.stopped)
    count = len(cloud.launched)
    cloud.kill(seen.node)
    time.sleep(5)  # five watcher ticks
    assert seen.node.netns not in box_namespaces()
    assert cloud.instances()[seen.instance_id]["State"]["Name"] == "running"
    assert len(cloud.launched) == count and not seen.stopped, "the box replaced or stopped a hung instance itself"
    assert cloud.watcher.errors == []
