"""Day 2 in the box: a group's count raised (`pulumi up` changes the groups parameter's value; the controller
launches), its image changed (a new launch template version: the controller rolls the group), or a node's instance
terminated (the controller replaces it) - and the checks every membership change
must pass. Nothing here names or addresses a node: the controller does, the box only boots what it launched."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path

from hpcc_contract.names import TAG_LAUNCH_SPEC, node_name
from infra.ops.aws import tag_dict
from tests.box.cloud import FleetBox
from tests.box.machine import sh
from tests.box.node import Node

AGENT = "hpcc_node.agent"  # python3 -m hpcc_node.agent


def add_node(box: FleetBox, group: str) -> tuple[Node, float]:
    """One more node in `group`: the groups parameter at the new count, as `pulumi up` writes it; returns the node
    the controller launched and named (its bootstrap started, not waited for) and when the count changed."""
    count = next(g["count"] for g in box.groups if g["name"] == group)
    name = node_name(group, count)
    box.resize(group, count + 1)
    changed = time.time()
    return named(box, name, lambda n: True), changed


def replace_node(box: FleetBox, name: str) -> tuple[Node, Node, float]:
    """The instance of the node named `name` is terminated (as EC2 reclaims one); the controller replaces it under
    the same name. Returns the old node, the new one (booting) and when the instance was terminated."""
    old = box.node(name)
    box.client("ec2").terminate_instances(InstanceIds=[old.instance_id])
    changed = time.time()
    return old, named(box, name, lambda n: n.instance_id != old.instance_id), changed


def named(box: FleetBox, name: str, which, timeout: float = 300) -> Node:
    """The live node the controller named `name` (its hpcc:node tag), once the box booted it."""
    deadline = time.time() + timeout
    while True:
        found = [n for n in box.nodes if n.name == name and which(n) and n.bootstrap is not None]
        if found:
            return found[0]
        if time.time() > deadline:
            raise AssertionError(f"no node named {name} after {timeout} s\n{box.diagnose()}")
        time.sleep(0.5)


def boot_code(box: FleetBox, node: Node, timeout: float = 240) -> int:
    """The exit code of the node's bootstrap, once it ends; one still running after `timeout` fails with every
    node's log tail."""
    try:
        return node.bootstrap.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{node.name}'s bootstrap still running after {timeout} s\n{box.diagnose()}") from None


def hosts_version(box: FleetBox) -> int:
    """The membership generation nodes report as `hostsVersion`."""
    return box.membership_generation()


def seconds_until_listed(
    box: FleetBox, ip: str, since: float, nodes: list[Node] | None = None, timeout: float = 300
) -> float:
    """Seconds from `since` (the hosts change) until the hostfile of every node (or of `nodes`) lists `ip`."""
    deadline = time.time() + timeout
    while True:
        missing = [n.name for n in (nodes or box.nodes) if ip not in _lines(n, "/etc/hpcc/hostfile")]
        if not missing:
            return time.time() - since
        if time.time() > deadline:
            raise AssertionError(
                f"after {timeout} s, {ip} is still missing from the hostfile of {missing}\n{box.diagnose()}"
            )
        time.sleep(0.5)


def _lines(node: Node, path: str) -> list[str]:
    f = node.file(path)
    try:
        return [line.split()[0] for line in f.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


def agent_pids(node: Node) -> list[int]:
    """The membership agents running on a node: processes in its namespace running `python3 -m hpcc_node.agent` whose
    parent does not (the agent's own subshells and labellers share its command line)."""

    def cmdline(pid: int) -> list[bytes]:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return []

    def parent(pid: int) -> int:
        try:
            return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return 0

    pids = [int(p) for p in sh("ip", "netns", "pids", node.netns, check=False).stdout.split()]
    agents = {p for p in pids if AGENT.encode() in cmdline(p)}
    return sorted(p for p in agents if parent(p) not in agents)


def launch_specs(box: FleetBox, group: str) -> dict[str, str]:
    """Each live slot of `group` -> the launch spec its instance was launched with (its hpcc:launch-spec tag)."""
    instances = box.instances()
    return {
        name: tag_dict(instances.get(s.instance_id, {}).get("Tags")).get(TAG_LAUNCH_SPEC, "")
        for name, s in box.ledger().slots.items()
        if name.startswith(f"{group}-")
    }


def change_image(box: FleetBox, group: str, image: str, strategy: str = "rolling", bound: int = 1) -> str:
    """`pulumi up` after the group's image changed: a new version of its launch template with that image, and the
    groups parameter naming the version and a new launch spec (the program's digest: infra/render/groups_param.py
    launch_spec, tested in tests/render), with the group's update strategy and maxUnavailable. Returns the new spec.
    Undone in its settings only: the group stays on the new version and spec, its strategy and bound the plan's
    again (the baseline names no launch version, and rolling back would cost another roll)."""
    ec2, template = box.client("ec2"), box.lt_of_group[group]
    planned = next(g for g in json.loads(box.plan()["groups"])["groups"] if g["name"] == group)
    assert planned.get("spec") and planned.get("lt_version"), f"the plan gives group {group} no launch spec: {planned}"
    first = ec2.describe_launch_template_versions(LaunchTemplateName=template, Versions=["1"])
    data = dict(first["LaunchTemplateVersions"][0]["LaunchTemplateData"], ImageId=image)
    made = ec2.create_launch_template_version(LaunchTemplateName=template, LaunchTemplateData=data)
    version = int(made["LaunchTemplateVersion"]["VersionNumber"])
    spec = hashlib.sha256(f"{planned['spec']} {image}".encode()).hexdigest()[:16]
    box._set(group, lt_version=version, spec=spec, update_strategy=strategy, max_unavailable=bound)

    def settings_back() -> None:
        for field in ("update_strategy", "max_unavailable"):
            box._group(group).pop(field, None)
        box.publish_groups()

    box.undo(
        f"group {group}'s update strategy and bound back to the plan's (it stays on version {version})", settings_back
    )
    return spec
