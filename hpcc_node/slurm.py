"""Slurm on the nodes, the one place for its text: the head's slurm.conf node and partition lines and gres.conf,
from the groups parameter (/hpcc/<cluster>/groups: each group's size limit and its Slurm node definition), and the
Slurm states the head's agent reports. Pure functions; the bootstrap calls `python3 -m hpcc_node.slurm conf|gres
GROUPS_FILE` (templates/steps/slurm.sh.j2) and the agent runs sinfo.

Each group is a fixed range of CLOUD nodes, `NodeName=<group>-[000-<limit-1>] State=CLOUD Feature=<group>`
(slurm.conf(5), "State": CLOUD nodes start powered down and are available once their slurmd starts), one partition
per group, named after it, and a partition `all` of every node. The default partition (a job without `-p`) is the
first group with NVIDIA GPUs, so a GPU job never lands on CPU nodes; a cluster without GPUs defaults to `all`
(default_partition). The lines depend on the groups' size limits and node
definitions alone, never on who holds a name or its address: slurm.conf changes only when a size limit does, and
a replacement is `scontrol update NodeName= NodeAddr= NodeHostname=` (the controller, hpcc_node/controller/act.py),
or the node's own registration (SlurmctldParameters=cloud_reg_addrs)."""

from __future__ import annotations

import re
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence

from hpcc_contract import groups as groups_format

SUMMARY = ["sinfo", "-h", "-o", "%T %N"]
ALL_PARTITION = groups_format.ALL_PARTITION  # every node of every group: a job that may run anywhere (`-p all`)
# Hostlist ranges: Slurm pads a range's numbers to the width of its first bound, so 000-999 and 1000-... are two
# ranges, the names hpcc_contract/names.py node_name gives (gpu-999, gpu-1000).
PAD_LIMIT = 1000


# Slurm 23.11 removed SlurmctldParameters=cloud_reg_addrs (its behaviour became the default) and
# CommunicationParameters=NoAddrCache (no address cache to turn off): SchedMD/slurm CHANGELOG/slurm-23.11.md,
# 23.11.0rc1, "Remove cloud_reg_addrs and make it default behavior", "Remove NoAddrCache CommunicationParameter".
# 21.08 and 22.05 have both (slurm.conf(5) of 22.05.8, Debian 12; tests run this machine's slurmctld on them).
BUILT_IN_FROM = (23, 11)


class GroupsError(ValueError):
    """The groups parameter is not what the program writes."""


def hostlist(group: str, size: int) -> str:
    """`gpu-[000-999],gpu-[1000-1199]`: every name of a group of `size` slots."""
    parts = []
    if size > 0:
        parts.append(f"{group}-[000-{min(size, PAD_LIMIT) - 1:03d}]")
    if size > PAD_LIMIT:
        parts.append(f"{group}-[{PAD_LIMIT}-{size - 1}]")
    return ",".join(parts)


def node_attributes(slurm: Mapping[str, Any], default: str = "") -> str:
    """A group's slurm.conf node attributes (infra/facts/slurm.py's SlurmNode.attributes words) from its "slurm" object;
    `default` (the settings' SLURM_NODE) for a group without one."""
    if not slurm:
        return default
    words = [f"CPUs={int(slurm['cpus'])}"]
    for key, word in (
        ("boards", "Boards"),
        ("sockets_per_board", "SocketsPerBoard"),
        ("cores_per_socket", "CoresPerSocket"),
        ("threads_per_core", "ThreadsPerCore"),
    ):
        if slurm.get(key):
            words.append(f"{word}={int(slurm[key])}")
    words.append(f"RealMemory={int(slurm['real_memory'])}")
    if slurm.get("gres"):
        words.append(f"Gres={slurm['gres']}")
    return " ".join(words)


def size_limit(group: Mapping[str, Any]) -> int:
    """hpcc_node.controller.model.Group.size_limit: the fixed range's size (max_count, else the count)."""
    return max(int(group.get("max_count") or 0), int(group.get("count") or 0))


def parse_groups(text: str) -> List[Dict[str, Any]]:
    try:
        groups = groups_format.loads(text)
        for g in groups:
            if not isinstance(g["name"], str) or size_limit(g) < 0:
                raise ValueError(g)
    except (ValueError, KeyError, TypeError) as e:  # GroupsFormatError is a ValueError
        raise GroupsError(f"not the program's groups JSON ({str(e)[:80]})") from None
    return groups


def version_tuple(version: str) -> tuple:
    """`slurm-wlm 22.05.8` / `slurm 23.11.4` -> (22, 5); () when it cannot be read."""
    found = re.search(r"(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else ()


def cloud_parameters(version: str) -> List[str]:
    """What the cloud ranges need of slurmctld: configless; a registering node's NodeAddr and NodeHostname taken from
    its registration (cloud_reg_addrs); a replacement's new address looked up, not cached (NoAddrCache). From 23.11
    the last two are Slurm's behaviour and no longer options; an unreadable version is taken for an older one."""
    v = version_tuple(version)
    if v and v >= BUILT_IN_FROM:
        return ["SlurmctldParameters=enable_configless"]
    return ["SlurmctldParameters=enable_configless,cloud_reg_addrs", "CommunicationParameters=NoAddrCache"]


def has_gpus(g: Mapping[str, Any], default_node: str = "") -> bool:
    """Do the group's nodes have NVIDIA GPUs (Gres=gpu:N in its node definition, else in the settings' one)?"""
    found = re.search(r"\bGres=gpu:(\d+)", node_attributes(g.get("slurm") or {}, default_node))
    return bool(found and int(found.group(1)) > 0)


def default_partition(groups: Sequence[Mapping[str, Any]], default_node: str = "") -> Optional[str]:
    """The partition a job without `-p` lands on (hpcc_contract/groups.py decides): the first group (in the config's
    order) whose nodes have GPUs, or `all` when every group's nodes are GPU nodes of one type or CPU nodes. None
    when no group has a node."""
    return groups_format.default_partition(
        [(str(g["name"]), size_limit(g), has_gpus(g, default_node), str(g.get("instance_type", ""))) for g in groups]
    )


def conf_lines(groups: Sequence[Mapping[str, Any]], default_node: str = "", version: str = "") -> List[str]:
    """slurm.conf's lines for the node groups (https://slurm.schedmd.com/slurm.conf.html): the cloud parameters of
    this Slurm `version`, then the node and partition lines: one partition per group, `all` of every node (unless a
    group took that name), the default one marked (default_partition)."""
    nodes, parts = [], []
    default = default_partition(groups, default_node)
    for g in groups:
        size = size_limit(g)
        if size <= 0:
            continue
        names = hostlist(g["name"], size)
        attributes = node_attributes(g.get("slurm") or {}, default_node)
        nodes.append(f"NodeName={names} State=CLOUD Feature={g['name']} {attributes}".rstrip())
        flag = " Default=YES" if g["name"] == default else ""
        parts.append(f"PartitionName={g['name']} Nodes={names}{flag} MaxTime=INFINITE State=UP")
    if not nodes:
        return cloud_parameters(version)
    if not any(g["name"] == ALL_PARTITION for g in groups):
        flag = " Default=YES" if default == ALL_PARTITION else ""
        parts.append(f"PartitionName={ALL_PARTITION} Nodes=ALL{flag} MaxTime=INFINITE State=UP")
    every = ",".join(hostlist(g["name"], size_limit(g)) for g in groups if size_limit(g) > 0)
    return cloud_parameters(version) + nodes + parts + [f"SuspendExcNodes={every}"]


def gres_gpus(g: Mapping[str, Any], default_gpus: int = 0) -> int:
    gres = str((g.get("slurm") or {}).get("gres", "")) if g.get("slurm") else f"gpu:{default_gpus}"
    kind, _, count = gres.partition(":")
    return int(count) if kind == "gpu" and count.isdigit() else 0


def gres_lines(groups: Sequence[Mapping[str, Any]], default_gpus: int = 0) -> List[str]:
    """gres.conf: each GPU group's nodes and their /dev/nvidia<i> (https://slurm.schedmd.com/gres.conf.html)."""
    out = []
    for g in groups:
        gpus, size = gres_gpus(g, default_gpus), size_limit(g)
        if gpus and size > 0:
            out.append(f"NodeName={hostlist(g['name'], size)} Name=gpu File=/dev/nvidia[0-{gpus - 1}]")
    return out or ["# no GPUs"]


def summary(sinfo_summary: str) -> Dict[str, str]:
    """Slurm's states: state -> node list, as the head's status shows them."""
    out = {}
    for line in sinfo_summary.splitlines():
        parts = line.split()
        if len(parts) == 2:
            out[parts[0]] = parts[1]
    return out


def states_file_text(states: Mapping[str, str]) -> str:
    """/run/hpcc-slurm.json: the inside of the status's "slurm" object, as status.sh.j2's slurm_field reads it."""
    return ", ".join(f'"{k}": "{v}"' for k, v in states.items()) + "\n"


def main(argv: List[str], out: Any = sys.stdout, err: Any = sys.stderr) -> int:
    """conf|gres GROUPS_FILE [DEFAULT_NODE_ATTRIBUTES DEFAULT_GPUS [SLURM_VERSION]]"""
    if len(argv) not in (2, 4, 5) or argv[0] not in ("conf", "gres"):
        err.write("usage: python3 -m hpcc_node.slurm conf|gres GROUPS_FILE [DEFAULT_NODE DEFAULT_GPUS [VERSION]]\n")
        return 2
    default_node, default_gpus = (argv[2], int(argv[3])) if len(argv) >= 4 else ("", 0)
    version = argv[4] if len(argv) == 5 else ""
    try:
        with open(argv[1]) as f:
            groups = parse_groups(f.read())
    except (OSError, GroupsError) as e:
        err.write(f"{argv[1]}: {e}\n")
        return 2
    lines: Optional[List[str]] = (
        conf_lines(groups, default_node, version) if argv[0] == "conf" else gres_lines(groups, default_gpus)
    )
    out.write("".join(line + "\n" for line in lines or []))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
