"""Every SSM value the program writes fits its tier (Parameter Store: Standard 4 KB, Advanced and
Intelligent-Tiering 8 KB): the plan refuses what a real PutParameter would, before any instance is launched."""

from __future__ import annotations

import pytest

from hpcc_contract.hostfile import hosts_parameter_value
from infra.plan.aws_rules import AwsRejected, check_parameter

# The hosts parameter (one address a line, sized by the node count) is gone: membership is an S3 object
# (issue 19). The groups parameter's tier check is in tests/plan/test_groups.py.


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
