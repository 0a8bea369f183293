"""The private subnet is sized for the node count (infra/facts/subnets.py) and never moves under an existing cluster
whose count today's subnet holds."""

from __future__ import annotations

import ipaddress

import pytest

from infra.config.parse import ConfigError, parse
from infra.facts.subnets import (
    FSX_INTERFACE_ALLOWANCE,
    HEAD_ADDRESSES,
    PRIVATE_CIDRS,
    PUBLIC_CIDR,
    RESERVED_PER_SUBNET,
    VPC_CIDR,
    addresses_needed,
    largest_count,
    private_cidr,
)
from infra.plan.previous import PreviousPlan
from infra.plan.runner import PlanError, plan_config
from tests.facts.plan_scale import node_cap

SUBNET = "aws:ec2/subnet:Subnet"


def test_every_count_todays_subnet_holds_keeps_todays_cidr():
    today = PRIVATE_CIDRS[0]
    assert {private_cidr(n) for n in range(1, largest_count(today) + 1)} == {today}
    assert private_cidr(largest_count(today) + 1) != today


def test_4096_nodes_get_a_subnet_that_holds_them_with_the_head_fsx_and_awss_reserved_addresses():
    cidr = ipaddress.ip_network(private_cidr(4096))
    assert cidr.prefixlen == 19
    assert addresses_needed(4096) == 4096 + HEAD_ADDRESSES + FSX_INTERFACE_ALLOWANCE + RESERVED_PER_SUBNET
    assert cidr.num_addresses >= addresses_needed(4096)
    vpc, public = ipaddress.ip_network(VPC_CIDR), ipaddress.ip_network(PUBLIC_CIDR)
    for c in PRIVATE_CIDRS:  # inside the VPC, apart from the public subnet
        assert ipaddress.ip_network(c).subnet_of(vpc) and not ipaddress.ip_network(c).overlaps(public)


def test_a_count_no_subnet_holds_is_refused_naming_the_field(example_config):
    config = example_config("c6i-oneccl")
    most = largest_count(PRIVATE_CIDRS[-1])
    with node_cap(100_000):
        config["hpcc:cluster"]["compute"]["count"] = most
        parse(config["aws:region"], config["hpcc:cluster"])  # the largest subnet holds it
        config["hpcc:cluster"]["compute"]["count"] = most + 1
        with pytest.raises(ConfigError) as e:
            parse(config["aws:region"], config["hpcc:cluster"])
    [(field, message)] = e.value.problems
    assert field == "cluster.compute.count" and f"give at most {most}, or split the cluster" in message


def test_a_resize_within_todays_size_changes_no_subnet(example_config, tmp_path):
    """`hpcc plan NEW --previous OLD`: 2 nodes, then 48; the subnets stay as they are."""
    old = example_config("c6i-oneccl")
    old["hpcc:cluster"]["compute"]["count"] = 2
    first = plan_config(old)
    first.write(tmp_path)
    assert {r["inputs"]["cidrBlock"] for r in first.of_type(SUBNET)} >= {PRIVATE_CIDRS[0]}
    new = example_config("c6i-oneccl")
    new["hpcc:cluster"]["compute"]["count"] = 48
    result = plan_config(new, previous=PreviousPlan.load(tmp_path))
    assert [c for c in result.changes if c.type == SUBNET] == []
    assert ("cpu-oneccl-groups-param", "update") in [(c.name, c.action) for c in result.changes]  # saw the resize


def test_the_plans_aws_refuses_more_nodes_than_the_subnet_holds_whatever_the_program_chose(example_config, monkeypatch):
    """aws_rules plays EC2's part on its own: a program that sized the subnet too small for the groups the
    controller will launch into it still fails the plan."""
    import infra.facts.subnets

    monkeypatch.setattr(infra.facts.subnets, "private_cidr", lambda count: "10.0.16.0/28")  # 16 - 5 = 11 usable
    config = example_config("c6i-oneccl")  # its head is in the private subnet too (no SSH opened)
    config["hpcc:cluster"]["compute"]["count"] = 12
    with pytest.raises(
        PlanError,
        match=r"groups-param: InsufficientFreeAddressesInSubnet: the groups launch 12 nodes "
        r"into subnet 10.0.16.0/28, which has 11 usable addresses",
    ):
        plan_config(config)
    config["hpcc:cluster"]["compute"]["count"] = 10
    plan_config(config)  # the head and ten nodes fit
