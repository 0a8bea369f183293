"""Throttling against a controller-run cluster in moto: EC2, SSM, DynamoDB and S3 answers that throttle are absorbed
by jittered backoff, other errors are not retried."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from infra.ops.aws import Aws, Backoff
from infra.ops.status.cluster import cluster_status
from tests.ops.fleet import REGION, C, fleet
from tests.ops.support import inject_errors


def quiet_aws(**backoff) -> tuple[Aws, list[float]]:
    slept: list[float] = []
    return Aws(REGION, backoff=Backoff(sleep=slept.append, **backoff)), slept


@pytest.fixture(scope="module")
def cluster():
    with mock_aws():
        yield fleet({"gpu": 3, "cpu": 1})


def test_throttled_reads_are_absorbed_by_jittered_backoff(cluster):
    aws, slept = quiet_aws(base=0.5, cap=4.0)
    left = [
        inject_errors(
            aws.client("ec2"), "DescribeInstances", ["RequestLimitExceeded", "Throttling", "RequestLimitExceeded"]
        ),
        inject_errors(aws.client("ssm"), "GetParameter", ["ThrottlingException"]),
        inject_errors(aws.client("dynamodb"), "Scan", ["ProvisionedThroughputExceededException"]),
        inject_errors(aws.client("s3"), "GetObject", ["SlowDown"]),
    ]
    found = cluster_status(aws, C)
    assert len(found.nodes) == 5 and all(r.ready for r in found.nodes) and not any(left)
    assert len(slept) == 6
    # full jitter: attempt n waits a random time in [0, min(cap, base * 2**n)]
    assert all(0 <= s <= 4.0 for s in slept) and slept[1] <= 1.0 and slept[0] <= 0.5


def test_backoff_gives_up_and_does_not_retry_other_errors(cluster):
    aws, slept = quiet_aws(attempts=3)
    inject_errors(aws.client("ec2"), "DescribeInstances", ["Throttling"] * 3)
    with pytest.raises(ClientError, match="Throttling"):
        cluster_status(aws, C)
    assert len(slept) == 2
    aws, slept = quiet_aws()
    inject_errors(aws.client("dynamodb"), "Scan", ["AccessDeniedException"])
    with pytest.raises(ClientError, match="AccessDeniedException"):
        cluster_status(aws, C)
    assert slept == []


def test_backoff_delays_grow_and_are_jittered():
    b = Backoff(base=1.0, cap=10.0, rand=lambda: 1.0)
    assert [b.delay(i) for i in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert Backoff(base=1.0, cap=10.0, rand=lambda: 0.25).delay(3) == 2.0
