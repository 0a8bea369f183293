"""Preflight rules for reserved capacity: On-Demand Capacity Reservations (ODCRs) and Capacity Blocks for ML.

What they check, and where AWS says so:
- a Capacity Block is usable from its StartDate; launches before it fail with insufficient capacity, and "thirty
  minutes before the reservation expires, we begin to terminate any instances that are still running in the
  Capacity Block" (EC2 User Guide, "Work with Capacity Blocks",
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html);
- instances must be in the reservation's AZ and of its type, and no more than it has free (same guide,
  "Launch instances using Capacity Blocks");
- a reservation made in a cluster placement group is used only by launches into that group; an unrelated group can
  cause insufficient capacity although the reservation has room (aws-parallelcluster
  cli/src/pcluster/validators/ec2_validators.py, PlacementGroupCapacityReservationValidator). Capacity Blocks need
  no placement group ("there is no need to use a cluster placement group with a Capacity Block", same guide).
`ctx` is preflight's Context (aws, cfg, az, now).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from botocore.exceptions import ClientError

from infra.config.validators.findings import ERROR, INFO, WARNING, Finding
from infra.ops.aws import error_code, error_message

RESERVATION_FIELD = "cluster.compute.capacityReservationId"
MARKET_FIELD = "cluster.compute.market"
GROUP_FIELD = "cluster.compute.placementGroup"
COMPUTE_FIELD = "cluster.compute.instanceType"
AZ_FIELD = "cluster.availabilityZone"
RECLAIM_BEFORE_END = timedelta(minutes=30)
NOT_STARTED = ("scheduled", "payment-pending", "pending", "assessing", "delayed")
ENDED = ("expired", "cancelled", "failed", "payment-failed", "unsupported")


def group_name(arn: str | None) -> str | None:
    """arn:aws:ec2:<region>:<account>:placement-group/<name> -> <name>."""
    return arn.rsplit("/", 1)[-1] if arn else None


def _when(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M UTC")


def read_reservation(ctx) -> tuple[dict | None, list[Finding]]:
    rid = ctx.cluster.compute.capacity_reservation_id
    try:
        found = ctx.aws.call("ec2", "describe_capacity_reservations", CapacityReservationIds=[rid])[
            "CapacityReservations"
        ]
    except ClientError as e:
        if error_code(e).startswith("InvalidCapacityReservationId"):
            found = []
        else:
            return None, [Finding(WARNING, RESERVATION_FIELD, f"could not read {rid}: {error_message(e)}; not checked")]
    except NotImplementedError:
        return None, [
            Finding(
                WARNING,
                RESERVATION_FIELD,
                f"could not read {rid}: this endpoint does not model capacity reservations; not checked",
            )
        ]
    if not found:
        return None, [Finding(ERROR, RESERVATION_FIELD, f"{rid} does not exist in {ctx.aws.region}")]
    return found[0], []


def reservation_matches(ctx, cr: dict) -> Iterable[Finding]:
    compute, rid = ctx.cluster.compute, cr["CapacityReservationId"]
    if cr.get("InstanceType") != compute.instance_type:
        yield Finding(
            ERROR,
            RESERVATION_FIELD,
            f"{rid} reserves {cr.get('InstanceType')}, but compute nodes are "
            f"{compute.instance_type}; match {COMPUTE_FIELD} to it",
        )
    cr_az = cr.get("AvailabilityZone")
    if cr_az != ctx.az:
        yield Finding(
            ERROR, RESERVATION_FIELD, f"{rid} is in {cr_az}, but the cluster goes to {ctx.az}; set {AZ_FIELD}: {cr_az}"
        )
    free, total = cr.get("AvailableInstanceCount", 0), cr.get("TotalInstanceCount", "?")
    if free < compute.count:
        yield Finding(
            ERROR,
            RESERVATION_FIELD,
            f"{rid} has {free} of {total} instances free, but the cluster needs "
            f"{compute.count}; lower cluster.compute.count or extend the reservation",
        )


def reservation_kind(ctx, cr: dict) -> Iterable[Finding]:
    rid, market = cr["CapacityReservationId"], ctx.cluster.compute.market
    block = cr.get("ReservationType") == "capacity-block"
    if block and market != "capacity-block":
        yield Finding(ERROR, MARKET_FIELD, f"{rid} is a Capacity Block: launches into it need market: capacity-block")
    elif not block and market == "capacity-block":
        yield Finding(
            ERROR,
            MARKET_FIELD,
            f"{rid} is an On-Demand Capacity Reservation, not a Capacity Block; set market: on-demand",
        )


def reservation_timing(ctx, cr: dict) -> Iterable[Finding]:
    """State, start and end: when the reservation is usable, and when a Capacity Block takes its instances back."""
    rid, state, now = cr["CapacityReservationId"], cr.get("State"), ctx.now()
    start, end = cr.get("StartDate"), cr.get("EndDate")
    if state in ENDED or (end is not None and end <= now):
        yield Finding(
            ERROR,
            RESERVATION_FIELD,
            f"{rid} has ended ({state}{', ' + _when(end) if end else ''}); buy or name another reservation",
        )
        return
    if state in NOT_STARTED or (start is not None and start > now):
        when = f"from {_when(start)}" if start else "once it becomes active"
        yield Finding(
            ERROR,
            RESERVATION_FIELD,
            f"{rid} is {state}: usable {when}; launches before that fail with "
            "insufficient capacity, so run `hpcc up` after it starts",
        )
    elif state != "active":
        yield Finding(ERROR, RESERVATION_FIELD, f"{rid} is {state}, not active")
    if cr.get("ReservationType") == "capacity-block" and end is not None:
        reclaim = end - RECLAIM_BEFORE_END
        yield Finding(
            WARNING,
            RESERVATION_FIELD,
            f"{rid} ends {_when(end)}: EC2 starts terminating its instances "
            f"30 minutes before, at {_when(reclaim)}. Save checkpoints to FSx "
            "(or S3) before then; the cluster's nodes will be gone",
        )


def reservation_placement(ctx, cr: dict) -> Iterable[Finding]:
    rid, wanted = cr["CapacityReservationId"], ctx.cluster.compute.placement_group
    reserved_in = group_name(cr.get("PlacementGroupArn"))
    if reserved_in and wanted != reserved_in:
        yield Finding(
            ERROR,
            GROUP_FIELD,
            f"{rid} was made in the cluster placement group {reserved_in}, and only "
            f"launches into that group use it; set {GROUP_FIELD}: {reserved_in}",
        )
    elif wanted and not reserved_in:
        yield Finding(
            WARNING,
            GROUP_FIELD,
            f"{rid} is not tied to a placement group, so launching into {wanted} can "
            "fail for capacity although the reservation has room; remove "
            f"{GROUP_FIELD} (compute nodes then launch outside any group)",
        )


def capacity_reservation(ctx) -> Iterable[Finding]:
    if not ctx.cluster.compute.capacity_reservation_id:
        return
    cr, problems = read_reservation(ctx)
    yield from problems
    if cr is None:
        return
    for rule in (reservation_kind, reservation_matches, reservation_timing, reservation_placement):
        yield from rule(ctx, cr)
    if not problems:
        yield Finding(
            INFO,
            RESERVATION_FIELD,
            f"{cr['CapacityReservationId']}: {cr.get('InstanceType')} x "
            f"{cr.get('TotalInstanceCount', '?')} in {cr.get('AvailabilityZone')}, "
            f"{cr.get('AvailableInstanceCount', '?')} free",
        )
