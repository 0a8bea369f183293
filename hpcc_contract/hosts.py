"""What a node accepts as the cluster's membership and file system, from parameters whoever can write them controls:
the hosts text (one `<name> <ip>` pair a line, the head first, then the nodes in name order with holes allowed:
rendered from the controller's membership.json by hpcc_node/hosts.py), the node names, and the FSx endpoint
(`/hpcc/<cluster>/fsx`). Standard library only, Python >= 3.8, like
hpcc_contract/settings.py: the program, the bootstrap (templates/steps/identify.sh.j2 and mount.sh.j2 render the
same rules) and the node agent read these definitions; tests run both sides on the same cases."""

from __future__ import annotations

import ipaddress
import re
from typing import List, Optional, Tuple

HEAD = "head"
# A group's name (cluster.nodeGroups[].name; never `head`, which the config refuses) and a node's: `<group>-NNN`,
# three digits below 1000 and plain digits above (hpcc_node.controller.model.node_name), so every name has one
# spelling: gpu-0000 is not a second name for gpu-000, nor gpu-01000 for gpu-1000.
GROUP_NAME = r"[a-z][a-z0-9]{0,11}"
NODE_NAME = r"head|" + GROUP_NAME + r"-([0-9]{3}|[1-9][0-9]{3})"
OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"  # no leading zero: bash arithmetic reads 010 as octal
IPV4 = OCTET + r"(\." + OCTET + r"){3}"
# Never a node's address: "this network", loopback, link-local (the instance metadata service), multicast and the
# reserved block (RFC 6890). AWS creates no VPC in them (VPC User Guide, "VPC CIDR blocks":
# https://docs.aws.amazon.com/vpc/latest/userguide/vpc-cidr-blocks.html), so "inside the VPC" excludes them; a
# test holds the program's VPC (and the box's) to that.
RESERVED = ("0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4")
# The FSx for Lustre file system's DNS name, `fs-<id>.fsx.<region>.amazonaws.com` (FSx for Lustre User Guide,
# "Mounting from an Amazon EC2 instance": https://docs.aws.amazon.com/fsx/latest/LustreGuide/mount-fs-auto-mount-onreboot.html).
FSX_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
FSX_MOUNT_NAME = r"[A-Za-z0-9]{1,16}"  # `fsx` for SCRATCH_1, else 8 letters and digits


class HostsError(ValueError):
    """A hosts text or FSx endpoint the nodes refuse."""


def valid_name(name: str) -> bool:
    return re.fullmatch(NODE_NAME, name) is not None


def group_of(name: str) -> str:
    """The group of a node name (`gpu-007` -> `gpu`); "" for the head."""
    return "" if name == HEAD else name.rsplit("-", 1)[0]


def address_problem(ip: str, vpc_cidr: str) -> Optional[str]:
    """Why `ip` cannot be a node of a cluster in `vpc_cidr`, or None."""
    if not re.fullmatch(IPV4, ip):
        return f"{ip[:40]!r} is not an IPv4 address"
    if ipaddress.IPv4Address(ip) not in ipaddress.IPv4Network(vpc_cidr):
        return f"{ip} is outside the cluster's VPC {vpc_cidr}"
    return None


def vpc_problem(vpc_cidr: str) -> Optional[str]:
    """Why `vpc_cidr` cannot hold a cluster's nodes (it overlaps a reserved range), or None."""
    vpc = ipaddress.IPv4Network(vpc_cidr)
    overlap = next((r for r in RESERVED if vpc.overlaps(ipaddress.IPv4Network(r))), None)
    return f"{vpc_cidr} overlaps {overlap}, where no node has an address" if overlap else None


def parse_hosts(text: str, vpc_cidr: str) -> List[Tuple[str, str]]:
    """The (name, address) pairs of a hosts text (blank lines skipped): each line `<name> <ip>` with one space, the
    first the head's, every address one of the VPC, no name and no address twice."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise HostsError("the hosts text is empty")
    pairs: List[Tuple[str, str]] = []
    for i, line in enumerate(lines):
        name, sep, ip = line.partition(" ")
        if not sep or not valid_name(name):
            raise HostsError(f"line {i + 1}: {line[:60]!r} is not `<node name> <ip>`")
        if (i == 0) != (name == HEAD):
            raise HostsError(f"line {i + 1}: {name} " + ("is not the head" if i == 0 else "is a second head"))
        problem = address_problem(ip, vpc_cidr)
        if problem:
            raise HostsError(f"line {i + 1}: {problem}")
        for j, (n, a) in enumerate(pairs):
            if n == name or a == ip:
                raise HostsError(f"line {i + 1}: {name if n == name else ip} is listed twice (line {j + 1})")
        pairs.append((name, ip))
    return pairs


def hosts_problem(text: str, vpc_cidr: str) -> Optional[str]:
    try:
        parse_hosts(text, vpc_cidr)
    except HostsError as e:
        return str(e)
    return None


def fsx_domain(region: str) -> str:
    return f"fsx.{region}.amazonaws.com" + (".cn" if region.startswith("cn-") else "")


def fsx_endpoint_problem(dns_name: str, mount_name: str, region: str) -> Optional[str]:
    """Why a node refuses to mount `dns_name@tcp:/mount_name`, or None: the name must be a file system of FSx in
    the cluster's own region, not any Lustre server a writer of the parameter chooses."""
    domain = fsx_domain(region)
    if len(dns_name) > 253 or not re.fullmatch(FSX_LABEL + re.escape("." + domain), dns_name):
        return f"{dns_name[:80]!r} is not a file system name in {domain}"
    if not re.fullmatch(FSX_MOUNT_NAME, mount_name):
        return f"{mount_name[:40]!r} is not an FSx mount name"
    return None
