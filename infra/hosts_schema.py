"""What a node accepts as the cluster's membership and file system, from parameters whoever can write them controls:
the hosts text (`/hpcc/<cluster>/hosts`: line 1 the head's IPv4 address, then compute-000's, ... in name order),
the node names, and the FSx endpoint (`/hpcc/<cluster>/fsx`). Standard library only, Python >= 3.8, like
infra/settings_schema.py: the program, the bootstrap (templates/steps/identify.sh.j2 and mount.sh.j2 render the
same rules) and the node agent read these definitions; tests run both sides on the same cases."""

from __future__ import annotations

import ipaddress
import re
from typing import List, Optional

HEAD = "head"
# Every node name has one spelling: compute-000 .. compute-999 (cluster.compute.count is at most 512), so
# compute-0000 is not a second name for compute-000.
NODE_NAME = r"head|compute-[0-9]{3}"
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


def node_index(name: str) -> Optional[int]:
    """The line of `name` in the hosts text (head 0, compute-NNN NNN + 1), or None for any other spelling."""
    if not re.fullmatch(NODE_NAME, name):
        return None
    return 0 if name == HEAD else int(name[len("compute-"):], 10) + 1


def node_name(index: int) -> str:
    """The name at line `index` of the hosts text: node_index's inverse (head 0, compute-NNN NNN + 1)."""
    return HEAD if index == 0 else f"compute-{index - 1:03d}"


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


def parse_hosts(text: str, vpc_cidr: str) -> List[str]:
    """The addresses of a hosts text (blank lines skipped), each line one address of the VPC, none twice."""
    hosts = [line for line in text.splitlines() if line.strip()]
    if not hosts:
        raise HostsError("the hosts text is empty")
    for i, ip in enumerate(hosts):
        problem = address_problem(ip, vpc_cidr)
        if problem:
            raise HostsError(f"line {i + 1}: {problem}")
        if ip in hosts[:i]:
            raise HostsError(f"line {i + 1}: {ip} is listed twice (line {hosts.index(ip) + 1})")
    return hosts


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
