"""Every SSM value the program writes fits its tier (Parameter Store: Standard 4 KB, Advanced and
Intelligent-Tiering 8 KB): the plan refuses what a real PutParameter would, before any instance is launched."""

from __future__ import annotations

import copy
import ipaddress

import pytest

from infra.hostfile import hosts_parameter_value
from infra.plan.aws_rules import SSM_ADVANCED_LIMIT, AwsRejected, check_parameter
from infra.plan.runner import PlanError, plan_config
from infra.subnets import private_cidr
from tests.plan_scale import node_cap


def largest_hosts_value(count: int) -> str:
    """What the program writes for `count` compute nodes when EC2 hands every node the widest address of the
    subnet the program puts them in."""
    widest = str(ipaddress.ip_network(private_cidr(count))[-1])
    return hosts_parameter_value([widest] * (count + 1))


def first_count_over(limit: int) -> int:
    return next(n for n in range(1, 10_000) if len(largest_hosts_value(n).encode()) > limit)


def with_count(example_config, count: int) -> dict:
    config = example_config("c6i-oneccl")
    config["hpcc:cluster"]["compute"]["count"] = count
    return config


def test_a_count_whose_hosts_value_passes_8_kb_is_refused_by_the_plan_naming_the_field(example_config):
    over = first_count_over(SSM_ADVANCED_LIMIT)
    with node_cap(4096), pytest.raises(PlanError) as e:
        plan_config(with_count(example_config, over))
    assert "hosts-param: ValidationException" in str(e.value)
    assert "cluster.compute.count sets its size" in str(e.value)
    assert f"at most {over - 1} compute nodes fit" in str(e.value)


def test_one_node_fewer_passes_the_plan(example_config):
    under = first_count_over(SSM_ADVANCED_LIMIT) - 1
    with node_cap(4096):
        result = plan_config(with_count(example_config, under))
    hosts = next(r for r in result.resources if r["name"].endswith("-hosts-param"))
    assert hosts["inputs"]["value"].count("\n") == under  # the head and every node: planned, not refused


def test_a_value_is_sized_with_the_widest_addresses_ec2_may_assign_not_the_ones_moto_picked():
    short = hosts_parameter_value(["10.0.16.5"] * 400)  # 3,999 bytes as written
    check_parameter("p", {"value": short, "tier": "Standard"}, [])  # fits while nothing says it is an address
    with pytest.raises(AwsRejected, match="4799 bytes once EC2 assigns its 400 addresses; the Standard tier"):
        check_parameter("p", {"value": short, "tier": "Standard"}, ["10.0.16.0/20"])


def test_each_tier_takes_its_own_limit():
    check_parameter("p", {"value": "x" * 4096}, [])  # no tier: Standard
    with pytest.raises(AwsRejected, match="4097 bytes; the Standard tier holds at most 4096"):
        check_parameter("p", {"value": "x" * 4097}, [])
    check_parameter("p", {"value": "x" * 8192, "tier": "Intelligent-Tiering"}, [])
    with pytest.raises(AwsRejected, match="the Advanced tier holds at most 8192"):
        check_parameter("p", {"value": "é" * 4097, "tier": "Advanced"}, [])  # bytes, not characters
