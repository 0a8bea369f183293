"""Day 2 in the box: what a `pulumi up` at a new count, or after a node died, does to the cluster - new
instances, then the planned settings and hosts at the new count (Box.publish) - and the checks every
membership change must pass."""

from __future__ import annotations

import time
from pathlib import Path

from infra.naming import Paths, compute_node_name
from tests.box.harness import Box, Node, sh

AGENT = "hpcc_node.agent"  # python3 -m hpcc_node.agent


def add_node(box: Box) -> tuple[Node, float]:
    """One more compute node: its namespace and instance, then the planned settings and hosts at the new
    count, then its bootstrap (started, not waited for). Returns it and when the hosts changed."""
    name = compute_node_name(box.compute_count)
    node = box._start_node(max(n.index for n in box.nodes) + 1, name)
    box.nodes.append(node)
    box.compute_count += 1
    box.client("ssm").put_parameter(Name=Paths(box.name).node(name), Type="String", Value='{"phase": "pending"}')
    box.publish()
    changed = time.time()
    box.start_bootstrap(node)
    return node, changed


def replace_node(box: Box, name: str) -> tuple[Node, Node, float]:
    """The node named `name` dies (its namespace and instance go) and a new instance of the same name takes
    its place at a new IP. Returns the old node, the new one and when the hosts changed."""
    old = box.node(name)
    for pid in sh("ip", "netns", "pids", old.netns, check=False).stdout.split():
        sh("kill", "-9", pid, check=False)
    sh("ip", "netns", "del", old.netns, check=False)
    old.holder.wait(timeout=10)
    box.client("ec2").terminate_instances(InstanceIds=[old.instance_id])
    new = box._start_node(max(n.index for n in box.nodes) + 1, name)
    box.nodes[box.nodes.index(old)] = new
    box.publish()
    changed = time.time()
    box.start_bootstrap(new)
    return old, new, changed


def hosts_version(box: Box) -> int:
    return box.client("ssm").get_parameter(Name=Paths(box.name).hosts)["Parameter"]["Version"]


def seconds_until_listed(box: Box, ip: str, since: float, nodes: list[Node] | None = None,
                         timeout: float = 300) -> float:
    """Seconds from `since` (the hosts change) until the hostfile of every node (or of `nodes`) lists `ip`."""
    deadline = time.time() + timeout
    while True:
        missing = [n.name for n in (nodes or box.nodes) if ip not in _lines(n, "/etc/hpcc/hostfile")]
        if not missing:
            return time.time() - since
        if time.time() > deadline:
            raise AssertionError(f"after {timeout} s, {ip} is still missing from the hostfile of {missing}\n"
                                 f"{box.diagnose()}")
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
