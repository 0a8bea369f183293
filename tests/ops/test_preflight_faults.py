"""Preflight under throttling and without a default VPC: throttled calls are retried with backoff, and a
dry run that could not be done is a warning, never a silent pass."""

from __future__ import annotations

import pytest

from infra.config.stackfile import load
from infra.config.validators.findings import INFO, WARNING
from infra.ops.aws import Aws, Backoff
from infra.ops.preflight.rules import has_errors, preflight
from infra.plan.embedded_aws import embedded_aws
from tests.ops.support import EXAMPLES, inject_errors

CPU = EXAMPLES / "c6i-oneccl.yaml"


@pytest.fixture
def aws_slept():
    slept: list[float] = []
    with embedded_aws("us-east-1"):
        yield Aws("us-east-1", backoff=Backoff(sleep=slept.append)), slept


def test_throttled_describes_and_dry_run_are_retried(aws_slept):
    aws, slept = aws_slept
    ec2 = aws.client("ec2")
    offerings = inject_errors(ec2, "DescribeInstanceTypeOfferings", ["RequestLimitExceeded", "Throttling"])
    dry = inject_errors(ec2, "RunInstances", ["RequestLimitExceeded"])
    findings = preflight(aws, load(CPU))
    assert not offerings and not dry  # every injected fault was met, and absorbed
    assert len(slept) == 3
    assert not has_errors(findings), findings
    [az] = [f for f in findings if f.field == "cluster.availabilityZone"]
    assert "goes to us-east-1a" in az.message
    launches = [f.message for f in findings if f.severity == INFO and f.message.startswith("dry run: AWS would launch")]
    assert len(launches) == 2


def test_dry_run_without_default_vpc_is_a_warning(aws_slept):
    aws, _ = aws_slept
    inject_errors(aws.client("ec2"), "RunInstances", ["VPCIdNotSpecified", "VPCIdNotSpecified"])
    findings = preflight(aws, load(CPU))
    warns = [f for f in findings if f.severity == WARNING and "dry run not done" in f.message]
    assert {f.field for f in warns} == {"cluster.headNode.instanceType", "cluster.compute.instanceType"}
    assert all("not checked" in f.message for f in warns)
