"""Preflight on reserved capacity (infra/ops/preflight/capacity.py): a Capacity Block's type, AZ, free count, start and
end, the reclaim warning, and the placement-group rules for reservations, against the embedded AWS with the reservation
injected (moto does not model capacity reservations) and the clock injected."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from infra.config.stackfile import load
from infra.config.validators.findings import ERROR, INFO, WARNING
from infra.ops.aws import Aws, Backoff
from infra.ops.preflight.rules import preflight
from infra.plan.embedded_aws import embedded_aws
from tests.ops.support import EXAMPLES, inject_response, stack_file

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
BLOCK = "cr-0123456789abcdef0"
RESERVATION = "cluster.compute.capacityReservationId"


@pytest.fixture
def aws():
    with embedded_aws("us-east-1"):
        yield Aws("us-east-1", backoff=Backoff(sleep=lambda _: None))


def block(**changes) -> dict:
    """The example's block as DescribeCapacityReservations answers it: active, started an hour ago, 2 days left."""
    return {
        "CapacityReservationId": BLOCK,
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": "us-east-1a",
        "AvailableInstanceCount": 4,
        "TotalInstanceCount": 4,
        "State": "active",
        "ReservationType": "capacity-block",
        "StartDate": NOW - timedelta(hours=1),
        "EndDate": NOW + timedelta(days=2),
        **changes,
    }


def findings(aws, reservation: dict, path=EXAMPLES / "p5-capacity-block.yaml"):
    aws = Aws(aws.region, backoff=Backoff(sleep=lambda _: None))  # fresh clients: one injected answer each
    inject_response(aws.client("ec2"), "DescribeCapacityReservations", {"CapacityReservations": [reservation]})
    return [
        f
        for f in preflight(aws, load(path), now=lambda: NOW)
        if f.field in (RESERVATION, "cluster.compute.market", "cluster.compute.placementGroup")
    ]


def messages(found, severity):
    return [f"{f.field}: {f.message}" for f in found if f.severity == severity]


def test_a_usable_block_passes_and_warns_when_ec2_reclaims_the_instances(aws):
    found = findings(aws, block())
    assert messages(found, ERROR) == []
    [warn] = messages(found, WARNING)
    assert "ends 2026-11-25 12:00 UTC" in warn and "at 2026-11-25 11:30 UTC" in warn
    assert any("p5.48xlarge x 4 in us-east-1a, 4 free" in m for m in messages(found, INFO))


def test_a_block_not_started_says_when_it_becomes_usable(aws):
    found = findings(aws, block(State="scheduled", StartDate=NOW + timedelta(hours=5)))
    [err] = messages(found, ERROR)
    assert "is scheduled: usable from 2026-11-23 17:00 UTC" in err and "run `hpcc up` after it starts" in err


def test_an_ended_block_is_an_error(aws):
    [err] = messages(findings(aws, block(State="expired", EndDate=NOW - timedelta(minutes=1))), ERROR)
    assert "has ended (expired, 2026-11-23 11:59 UTC)" in err


@pytest.mark.parametrize(
    "changes,words",
    [
        ({"InstanceType": "p4d.24xlarge"}, "reserves p4d.24xlarge, but compute nodes are p5.48xlarge"),
        ({"AvailabilityZone": "us-east-1b"}, "set cluster.availabilityZone: us-east-1b"),
        ({"AvailableInstanceCount": 3}, "has 3 of 4 instances free, but the cluster needs 4"),
    ],
)
def test_a_block_that_does_not_fit_the_cluster_is_an_error(aws, changes, words):
    [err] = messages(findings(aws, block(**changes)), ERROR)
    assert err.startswith(RESERVATION) and words in err


def test_the_market_must_match_the_reservation_kind(aws, tmp_path):
    [err] = messages(findings(aws, block(ReservationType="default")), ERROR)
    assert err.startswith("cluster.compute.market:") and "not a Capacity Block; set market: on-demand" in err
    odcr = stack_file(
        tmp_path,
        "p5-capacity-block",
        compute={"instanceType": "p5.48xlarge", "count": 4, "capacityReservationId": BLOCK},
    )
    [err] = messages(findings(aws, block(), odcr), ERROR)
    assert "is a Capacity Block: launches into it need market: capacity-block" in err


def test_a_reservation_made_in_a_placement_group_must_be_launched_into_it(aws, tmp_path):
    arn = "arn:aws:ec2:us-east-1:123456789012:placement-group/reserved-pg"
    odcr = {"instanceType": "p5.48xlarge", "count": 4, "capacityReservationId": BLOCK}
    path = stack_file(tmp_path, "p5-capacity-block", compute=odcr)
    [err] = messages(findings(aws, block(ReservationType="default", PlacementGroupArn=arn), path), ERROR)
    assert err == (
        "cluster.compute.placementGroup: cr-0123456789abcdef0 was made in the cluster placement group "
        "reserved-pg, and only launches into that group use it; set cluster.compute.placementGroup: reserved-pg"
    )
    named = stack_file(tmp_path, "p5-capacity-block", compute={**odcr, "placementGroup": "reserved-pg"})
    assert (
        messages(findings(aws, block(ReservationType="default", PlacementGroupArn=arn, EndDate=None), named), ERROR)
        == []
    )


def test_a_group_for_a_reservation_without_one_is_a_warning(aws, tmp_path):
    path = stack_file(
        tmp_path,
        "p5-capacity-block",
        compute={"instanceType": "p5.48xlarge", "count": 4, "capacityReservationId": BLOCK, "placementGroup": "mine"},
    )
    found = findings(aws, block(ReservationType="default", EndDate=None), path)
    assert messages(found, ERROR) == []
    [warn] = messages(found, WARNING)
    assert (
        warn.startswith("cluster.compute.placementGroup:")
        and "can fail for capacity although the reservation has room" in warn
    )
