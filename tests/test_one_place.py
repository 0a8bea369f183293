"""Facts held twice on purpose, run on both sides: the plan's AWS (infra/plan/aws_rules.py) checks the program
independently, and the policy pack (policy/) may not import infra. Each test feeds both copies the same cases,
so a change to one side that the other does not follow fails here."""

from __future__ import annotations

import base64
import ipaddress

import pytest

from hpcc_contract.settings import SETTINGS_LIMIT
from infra.facts.subnets import PRIVATE_CIDRS, RESERVED_PER_SUBNET
from infra.plan import aws_rules
from infra.plan.aws_rules import AwsRejected
from infra.program.components.security import LUSTRE_PORTS
from infra.render.userdata import USER_DATA_LIMIT, render_loader, user_data, within_limit
from policy import node_rules
from policy.records import LT
from tests.render.bootstrap_cases import contexts

CONTEXTS = dict(contexts())
SOME = sorted(CONTEXTS)[:2]  # a head and a compute script of one example


def _program_ingress(group: str) -> list[dict]:
    """The Lustre rules security.py opens on the file system's group, as DescribeSecurityGroups lists them."""
    return [
        {"IpProtocol": "tcp", "FromPort": low, "ToPort": high, "UserIdGroupPairs": [{"GroupId": group}]}
        for low, high in LUSTRE_PORTS
    ]


def test_the_lustre_ports_the_program_opens_are_the_ones_fsx_requires():
    assert aws_rules.lustre_ports_missing(_program_ingress("sg-l"), {"sg-l"}) == []
    opened = {port for low, high in LUSTRE_PORTS for port in range(low, high + 1)}
    assert opened == set(aws_rules.LUSTRE_REQUIRED_PORTS)


@pytest.mark.parametrize("size", [USER_DATA_LIMIT - 1, USER_DATA_LIMIT, USER_DATA_LIMIT + 1])
def test_the_program_and_the_plans_aws_agree_on_the_user_data_limit(size):
    raw = b"#" * size
    try:
        aws_rules.decode_user_data(base64.b64encode(raw).decode())
        aws_takes = True
    except AwsRejected as e:
        assert "the limit is" in e.message
        aws_takes = False
    assert within_limit(raw) == aws_takes == (size <= USER_DATA_LIMIT)


@pytest.mark.parametrize("name", SOME)
def test_both_decoders_read_the_programs_user_data_as_the_loader(name):
    b64 = base64.b64encode(user_data(CONTEXTS[name])).decode()
    script = render_loader(CONTEXTS[name])
    assert aws_rules.decode_user_data(b64) == script
    assert node_rules._decoded_texts(b64)[-1] == script


def test_user_data_that_cloud_init_could_not_unpack_is_refused_by_both():
    packed = user_data(CONTEXTS[SOME[0]])
    b64 = base64.b64encode(packed[: len(packed) // 2]).decode()  # a gzip stream cut short
    with pytest.raises(AwsRejected, match="does not decompress"):
        aws_rules.decode_user_data(b64, "lt")
    assert any("does not decompress" in m for m in node_rules.secrets_resource(LT, {"userData": b64}))


def test_user_data_that_is_not_base64_is_refused_by_the_plans_aws():
    with pytest.raises(AwsRejected, match="Invalid BASE64"):
        aws_rules.decode_user_data("#!/bin/bash\necho not encoded\n", "lt")


@pytest.mark.parametrize("cidr", PRIVATE_CIDRS)
def test_the_program_and_the_plans_aws_agree_on_a_subnets_usable_addresses(cidr):
    usable = ipaddress.ip_network(cidr).num_addresses - RESERVED_PER_SUBNET  # infra/facts/subnets.py's reading
    aws_rules.check_free_address("n", cidr, usable - 1)
    with pytest.raises(AwsRejected, match="InsufficientFreeAddressesInSubnet"):
        aws_rules.check_free_address("n", cidr, usable)


def test_the_settings_limit_is_what_the_settings_parameters_tier_holds():
    """hpcc_contract/settings.py bounds the settings text for its Intelligent-Tiering parameter (compute.py)."""
    aws_rules.check_parameter("settings", {"value": "x" * SETTINGS_LIMIT, "tier": "Intelligent-Tiering"}, [])
    with pytest.raises(AwsRejected, match="ValidationException"):
        aws_rules.check_parameter("settings", {"value": "x" * (SETTINGS_LIMIT + 1), "tier": "Intelligent-Tiering"}, [])


def test_the_controller_bounds_a_slurm_hostlist_by_the_configs_largest_cluster():
    from hpcc_node.controller.slurm_records import MAX_NODES as NODE_SIDE
    from infra.config.nodes import MAX_NODES

    assert NODE_SIDE == MAX_NODES


def test_the_login_hpcc_up_prints_is_the_one_hpcc_ssh_runs():
    """infra/program/outputs.py writes the sshCommand output; infra/ops/ssh.py builds `hpcc ssh`'s argv (the program
    may not import the operator commands, and `hpcc ssh` should not import pulumi to log in)."""
    import shlex

    from infra.ops.ssh import ssm_login as ssh_argv
    from infra.program.outputs import ssm_login

    for user in ("ubuntu", "ec2-user"):
        assert shlex.join(ssh_argv("us-east-1", "i-0123456789abcdef0", user)) == ssm_login(
            "us-east-1", "i-0123456789abcdef0", user
        )
