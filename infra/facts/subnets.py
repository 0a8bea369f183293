"""The private subnet's size for the node count: every compute node, the head and the file system's interfaces,
plus the addresses AWS keeps in every subnet, must fit (one address per node: its EFA devices are `efa-only`,
infra/facts/efa.py).

"The first four IP addresses and the last IP address in each subnet CIDR block are not available for your use"
(Amazon VPC User Guide, "Subnet CIDR blocks", https://docs.aws.amazon.com/vpc/latest/userguide/subnet-sizing.html).

Today's /20 comes first, so a cluster whose count it fits keeps it on every `up` (a new CIDR would replace the
subnet and everything in it); only a count it cannot hold gets the /19 (8,192 addresses, room for 4,096 nodes),
which for an existing cluster is a replacement that `hpcc up` stops without --allow-replace. Both sit in the
VPC's 10.0.0.0/16 beside the public 10.0.0.0/24 and never overlap.
"""

from __future__ import annotations

import ipaddress

VPC_CIDR = "10.0.0.0/16"  # the cluster's VPC (infra/program/components/network.py); its nodes' addresses lie in it
PUBLIC_CIDR = "10.0.0.0/24"  # the public subnet: NAT, and the head when SSH is opened
RESERVED_PER_SUBNET = 5
# FSx for Lustre puts "one or more" interfaces in the subnet (FileSystem.NetworkInterfaceIds, FSx API reference),
# more as storage grows, with no published formula: an allowance, generous for the capacities hpcc configures.
FSX_INTERFACE_ALLOWANCE = 64
HEAD_ADDRESSES = 1  # the head is in the private subnet unless SSH is opened; counted either way
PRIVATE_CIDRS = ("10.0.16.0/20", "10.0.32.0/19")


def addresses_needed(compute_count: int) -> int:
    return compute_count + HEAD_ADDRESSES + FSX_INTERFACE_ALLOWANCE + RESERVED_PER_SUBNET


def private_cidr(compute_count: int) -> str | None:
    """The first of PRIVATE_CIDRS that holds the cluster, None when none does."""
    need = addresses_needed(compute_count)
    return next((c for c in PRIVATE_CIDRS if ipaddress.ip_network(c).num_addresses >= need), None)


def largest_count(cidr: str) -> int:
    """The most compute nodes the subnet holds."""
    return ipaddress.ip_network(cidr).num_addresses - addresses_needed(0)
