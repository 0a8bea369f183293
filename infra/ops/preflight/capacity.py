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
`ctx` is preflight's Context (aws, cfg, az, now); `g` one node group's Role (its count, type, market, fields).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from botocore.exceptions import ClientError

from infra.config.validators.findings import ERROR, INFO, WARNING, Finding
from infra.ops.aws import error_code, error_message

AZ_FIELD = "cluster.availabilityZone"
RECLAIM_BEFORE_END = timedelta(minutes=30)
NOT_STARTED = ("scheduled", "payment-pending", "pending", "assessing", "delayed")
ENDED = ("expired", "cancelled", "failed", "payment-failed", "unsupported")


def group_name(arn: str | None) -> str | None:
    """arn:aws:ec2:<region>:<account>:placement-group/<name> -> <name>."""
    return arn.rsplit("/", 1)[-1] if arn else None


def _when(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M UTC")


def read_reservation(ctx, g) -> tuple[dict | None, list[Finding]]:
    rid, field = g.reservation, g.at("capacityReservationId")
    try:
        found = ctx.aws.call("ec2", "describe_capacity_reservations", CapacityReservationIds=[rid])[
            "CapacityReservations"
        ]
    except ClientError as e:
        if error_code(e).startswith("InvalidCapacityReservationId"):
            found = []
        else:
            return None, [Finding(WARNING, field, f"could not read {rid}: {error_message(e)}; not checked")]
    except NotImplementedError:
        return None, [
            Finding(
                WARNING, field, f"could not read {rid}: this endpoint does not model capacity reservations; not checked"
            )
        ]
    if not found:
        return None, [Finding(ERROR, field, f"{rid} does not exist in {ctx.aws.region}")]
    return found[0], []


def reservation_matches(ctx, g, cr: dict) -> Iterable[Finding]:
    rid, field = cr["CapacityReservationId"], g.at("capacityReservationId")
    if cr.get("InstanceType") != g.instance_type:
        yield Finding(
            ERROR,
            field,
            f"{rid} reserves {cr.get('InstanceType')}, but {g.name} nodes are {g.instance_type}; match {g.field} to it",
        )
    cr_az = cr.get("AvailabilityZone")
    if cr_az != ctx.az:
        yield Finding(ERROR, field, f"{rid} is in {cr_az}, but the cluster goes to {ctx.az}; set {AZ_FIELD}: {cr_az}")
    sharing = [o for o in ctx.groups if o.reservation == g.reservation]
    need = sum(o.count for o in sharing)
    free, total = cr.get("AvailableInstanceCount", 0), cr.get("TotalInstanceCount", "?")
    if free < need and g is sharing[-1]:  # said once, at the last group drawing on it
        who = "the cluster needs" if len(sharing) == 1 else f"groups {', '.join(o.name for o in sharing)} need"
        yield Finding(
            ERROR,
            field,
            f"{rid} has {free} of {total} instances free, but {who} {need}; lower "
            f"{g.at('count')} or extend the reservation",
        )


def reservation_kind(ctx, g, cr: dict) -> Iterable[Finding]:
    rid, market = cr["CapacityReservationId"], g.market
    block = cr.get("ReservationType") == "capacity-block"
    if block and market != "capacity-block":
        yield Finding(ERROR, g.at("market"), f"{rid} is a Capacity Block: launches into it need market: capacity-block")
    elif not block and market == "capacity-block":
        yield Finding(
            ERROR,
            g.at("market"),
            f"{rid} is an On-Demand Capacity Reservation, not a Capacity Block; set market: on-demand",
        )


def reservation_timing(ctx, g, cr: dict) -> Iterable[Finding]:
    """State, start and end: when the reservation is usable, and when a Capacity Block takes its instances back."""
    rid, state, now, field = cr["CapacityReservationId"], cr.get("State"), ctx.now(), g.at("capacityReservationId")
    start, end = cr.get("StartDate"), cr.get("EndDate")
    if state in ENDED or (end is not None and end <= now):
        yield Finding(
            ERROR,
            field,
            f"{rid} has ended ({state}{', ' + _when(end) if end else ''}); buy or name another reservation",
        )
        return
    if state in NOT_STARTED or (start is not None and start > now):
        when = f"from {_when(start)}" if start else "once it becomes active"
        yield Finding(
            ERROR,
            field,
            f"{rid} is {state}: usable {when}; launches before that fail with "
            "insufficient capacity, so run `hpcc up` after it starts",
        )
    elif state != "active":
        yield Finding(ERROR, field, f"{rid} is {state}, not active")
    if cr.get("ReservationType") == "capacity-block" and end is not None:
        reclaim = end - RECLAIM_BEFORE_END
        yield Finding(
            WARNING,
            field,
            f"{rid} ends {_when(end)}: EC2 starts terminating its instances "
            f"30 minutes before, at {_when(reclaim)}. Save checkpoints to FSx "
            "(or S3) before then; the cluster's nodes will be gone",
        )


def reservation_placement(ctx, g, cr: dict) -> Iterable[Finding]:
    rid, wanted, field = cr["CapacityReservationId"], g.group.placement_group, g.at("placementGroup")
    reserved_in = group_name(cr.get("PlacementGroupArn"))
    if reserved_in and wanted != reserved_in:
        yield Finding(
            ERROR,
            field,
            f"{rid} was made in the cluster placement group {reserved_in}, and only "
            f"launches into that group use it; set {field}: {reserved_in}",
        )
    elif wanted and not reserved_in:
        yield Finding(
            WARNING,
            field,
            f"{rid} is not tied to a placement group, so launching into {wanted} can "
            "fail for capacity although the reservation has room; remove "
            f"{field} (the group's nodes then launch outside any group)",
        )


def capacity_reservation(ctx) -> Iterable[Finding]:
    """Each node group that names a reservation or Capacity Block, checked against it."""
    for g in ctx.groups:
        if g.reservation:
            yield from _one_reservation(ctx, g)


def _one_reservation(ctx, g) -> Iterable[Finding]:
    cr, problems = read_reservation(ctx, g)
    yield from problems
    if cr is None:
        return
    for rule in (reservation_kind, reservation_matches, reservation_timing, reservation_placement):
        yield from rule(ctx, g, cr)
    if not problems:
        yield Finding(
            INFO,
            g.at("capacityReservationId"),
            f"{cr['CapacityReservationId']}: {cr.get('InstanceType')} x {cr.get('TotalInstanceCount', '?')} "
            f"in {cr.get('AvailabilityZone')}, {cr.get('AvailableInstanceCount', '?')} free",
        )
