"""reap's paging and waiting (infra/ops/aws.py): botocore's paginator tokens with each page
retried through Aws's backoff, and waiters decided by their acceptors on the injected clock. No AWS and no
moto: every answer is injected before the request leaves botocore."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from infra.ops.aws import Aws, Backoff, pages
from infra.ops.reap.run import DELETERS, Item, Waits

REGION = "us-east-1"


@pytest.fixture
def aws(monkeypatch) -> Aws:
    for var, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": REGION,
    }.items():
        monkeypatch.setenv(var, value)
    return Aws(REGION, backoff=Backoff(sleep=lambda _: None, rand=lambda: 0.5))


def answer_in_turn(client, operation: str, answers: list[dict]) -> list[dict]:
    """Each call of `operation` gets the next answer (an "Error" one is an AWS error); returns the requests."""
    requests: list[dict] = []
    event = f"before-call.{client.meta.service_model.service_id.hyphenize()}.{operation}"

    def handler(params, **_):
        requests.append(params["body"])
        parsed = answers.pop(0) if len(answers) > 1 else answers[0]
        status = 400 if "Error" in parsed else 200
        return (
            SimpleNamespace(status_code=status, headers={}, text="", content=b""),
            {**parsed, "ResponseMetadata": {"HTTPStatusCode": status}},
        )

    client.meta.events.register(event, handler)
    return requests


def clock(step: float = 1.0):
    now = [0.0]

    def tick() -> float:
        now[0] += step
        return now[0]

    return tick


def test_pages_follow_botocores_token_and_retry_a_throttled_page(aws):
    requests = answer_in_turn(
        aws.client("ec2"),
        "DescribeVpcs",
        [
            {"Vpcs": [{"VpcId": "vpc-a"}], "NextToken": "page-2"},
            {"Error": {"Code": "RequestLimitExceeded", "Message": "slow down"}},
            {"Vpcs": [{"VpcId": "vpc-b"}]},
        ],
    )
    assert [v["VpcId"] for v in pages(aws, "ec2", "describe_vpcs")] == ["vpc-a", "vpc-b"]
    assert aws.backoff.slept == [0.5 * 0.25]  # the throttled page was retried by Aws, once
    assert [r.get("NextToken") for r in requests] == [None, "page-2", "page-2"]


def test_aws_pages_is_botocores_paginator_with_its_result_key(aws):
    """status and preflight page through Aws.pages: the same paginator, records named by a key."""
    requests = answer_in_turn(
        aws.client("ssm"),
        "GetParametersByPath",
        [
            {"Parameters": [{"Name": "/a"}], "NextToken": "t2"},
            {"Parameters": [{"Name": "/b"}]},
        ],
    )
    assert [p["Name"] for p in aws.pages("ssm", "get_parameters_by_path", "Parameters", Path="/")] == ["/a", "/b"]
    assert [json.loads(r).get("NextToken") for r in requests] == [None, "t2"]  # JSON-protocol bodies


def test_an_operation_without_a_botocore_paginator_still_follows_next_token(aws):
    assert not aws.client("fsx").can_paginate("describe_data_repository_associations")
    requests = answer_in_turn(
        aws.client("fsx"),
        "DescribeDataRepositoryAssociations",
        [
            {"Associations": [{"AssociationId": "dra-1"}], "NextToken": "t2"},
            {"Associations": [{"AssociationId": "dra-2"}]},
        ],
    )
    assert [a["AssociationId"] for a in pages(aws, "fsx", "describe_data_repository_associations", "Associations")] == [
        "dra-1",
        "dra-2",
    ]
    assert [json.loads(r).get("NextToken") for r in requests] == [None, "t2"]  # JSON-protocol bodies


def test_a_waiters_failure_acceptor_fails_the_items_without_waiting_out_the_timeout(aws):
    answer_in_turn(aws.client("ec2"), "TerminateInstances", [{}])
    polls = answer_in_turn(
        aws.client("ec2"),
        "DescribeInstances",
        [{"Reservations": [{"Instances": [{"InstanceId": "i-1", "State": {"Name": "pending"}}]}]}],
    )
    item = Item("instance", "i-1")
    DELETERS["instance"](aws, [item], Waits(timeout=600, poll=5, sleep=lambda _: None, clock=clock()))
    assert item.failed and "pending" in item.result, item.result
    assert len(polls) == 1


def test_the_file_system_waiter_polls_until_fsx_says_not_found(aws):
    answer_in_turn(
        aws.client("fsx"), "DeleteFileSystem", [{"FileSystemId": "fs-0123456789abcdef0", "Lifecycle": "DELETING"}]
    )
    deleting = {"FileSystems": [{"FileSystemId": "fs-0123456789abcdef0", "Lifecycle": "DELETING"}]}
    answer_in_turn(
        aws.client("fsx"),
        "DescribeFileSystems",
        [deleting, deleting, {"Error": {"Code": "FileSystemNotFound", "Message": "gone"}}],
    )
    slept: list[float] = []
    item = Item("file-system", "fs-0123456789abcdef0", extra={"deployment": "SCRATCH_2"})
    DELETERS["file-system"](aws, [item], Waits(timeout=600, poll=7, sleep=slept.append, clock=clock()))
    assert item.result == "deleted"
    assert slept == [7, 7]


def test_a_nat_gateway_that_never_goes_fails_after_the_timeout(aws):
    answer_in_turn(aws.client("ec2"), "DeleteNatGateway", [{"NatGatewayId": "nat-1"}])
    answer_in_turn(
        aws.client("ec2"), "DescribeNatGateways", [{"NatGateways": [{"NatGatewayId": "nat-1", "State": "deleting"}]}]
    )
    item = Item("nat-gateway", "nat-1")
    DELETERS["nat-gateway"](aws, [item], Waits(timeout=30, poll=5, sleep=lambda _: None, clock=clock(10)))
    assert item.failed and "gave up after 30s waiting for NAT gateways" in item.result, item.result
