"""EC2's launch-template rules (infra/plan/aws_rules.py) refuse the interface layouts EC2 refuses. The hand-typed
catalog this file once checked is gone: every type's facts come from DescribeInstanceTypes
(tests/facts/test_efa_layout.py checks every EFA type's layout)."""

import pytest

from infra.plan import aws_rules
from infra.plan.aws_rules import AwsRejected
from tests.facts.instance_data import all_descriptions


@pytest.fixture(scope="module")
def described():
    return all_descriptions()


def _nic(card, dev, kind, **extra):
    return {"networkCardIndex": card, "deviceIndex": dev, "interfaceType": kind, "subnetId": "subnet-1", **extra}


@pytest.mark.parametrize(
    "type_name,nics,code,text",
    [
        ("p5.48xlarge", [_nic(0, 0, "efa-only")], "InvalidParameterValue", "cannot be the primary"),
        ("c6i.16xlarge", [_nic(0, 0, "efa")], "InvalidParameterValue", "not supported on this card"),
        (
            "p4d.24xlarge",
            [_nic(0, 0, "interface")] + [_nic(c, 1, "efa") for c in range(1, 5)],
            "InvalidParameterValue",
            "network card",
        ),
        (
            "p4d.24xlarge",
            [_nic(0, 0, "efa"), _nic(0, 1, "efa"), _nic(1, 0, "efa"), _nic(2, 0, "efa"), _nic(3, 0, "efa")],
            "InvalidParameterValue",
            "EFA interfaces requested",
        ),
        (
            "p4d.24xlarge",
            [_nic(0, 0, "efa", associatePublicIpAddress="true"), _nic(1, 0, "efa")],
            "InvalidParameterCombination",
            "multiple network interfaces",
        ),
        (
            "p5.48xlarge",
            [_nic(0, 0, "interface"), _nic(0, 0, "efa-only")],
            "InvalidParameterValue",
            "same card and device",
        ),
        ("p5.48xlarge", [_nic(1, 0, "efa-only")], "InvalidParameterValue", "no primary interface"),
    ],
)
def test_layout_mistakes_are_rejected_as_ec2_would(type_name, nics, code, text, described):
    with pytest.raises(AwsRejected) as e:
        aws_rules.check_launch_template("lt", {"networkInterfaces": nics}, described[type_name])
    assert e.value.code == code and text in e.value.message


def test_interfaces_and_instance_level_security_groups_conflict(described):
    with pytest.raises(AwsRejected, match="InvalidParameterCombination"):
        aws_rules.check_launch_template(
            "lt", {"networkInterfaces": [_nic(0, 0, "efa")], "vpcSecurityGroupIds": ["sg-1"]}, described["c5n.18xlarge"]
        )
