"""Launching a group's instances with EC2 Fleet `Type=instant` (CreateFleet), and what its answer means in the
failure taxonomy.

EC2 API reference, CreateFleet and OnDemandOptionsRequest/SpotOptionsRequest: with `SingleInstanceType` and
`SingleAvailabilityZone`, `MinTargetCapacity` is the least EC2 may launch (fewer than that, none at all): the count
for a group's new nodes (all-or-nothing), 1 for replacements (best-effort, as ParallelCluster launches); an
instant fleet answers synchronously with the instance ids and, per override, the errors. `ClientToken` makes a
retried request (a controller killed mid-call) return the first call's fleet; every instance also carries the
token as its hpcc:launch tag from its creation, so a retry is made only when none does (decide_fill.py).
Capacity Blocks launch with `DefaultTargetCapacityType = capacity-block` and the block in the launch template.
The same parameters as aws-parallelcluster-node's fleet_manager.py (`_evaluate_launch_params`), for one type in
one subnet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

from hpcc_contract.names import (
    TAG_CLUSTER,
    TAG_GROUP,
    TAG_LAUNCH,
    TAG_LAUNCH_SPEC,
    TAG_ROLE,
    TAG_TEMPLATE_VERSION,
)
from hpcc_contract.taxonomy import FailureClass

from .model import Group, LaunchRecord

# CreateFleet/RunInstances error codes for which EC2 had no capacity (or no room in a quota) for now: the launch
# class, back off and retry (EC2 API reference, "Error codes for the Amazon EC2 API").
CAPACITY_CODES = (
    "InsufficientInstanceCapacity",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientCapacityOnOutpost",
    "ReservationCapacityExceeded",
    "UnfulfillableCapacity",
    "SpotMaxPriceTooLow",
    "MaxSpotInstanceCountExceeded",
    "InsufficientFreeAddressesInSubnet",
)
QUOTA_CODES = ("InstanceLimitExceeded", "VcpuLimitExceeded", "MaxFleetCountExceeded", "TargetCapacityLimitExceeded")
THROTTLE_CODES = ("RequestLimitExceeded", "Throttling")
# CreateFleet reports an override left unfulfilled because another failed with this exact pair: not a cause.
UNFULFILLED = ("UnfulfillableCapacity", "Failed to fulfill capacity. Please review errors in the response.")


def launch_tokens(launches: Sequence[LaunchRecord], now: float, size: int, refill: float) -> int:
    """Instances EC2's RunInstances bucket holds at `now` (EC2 API reference, "Request throttling for the Amazon EC2
    API": resource rate limits), full before the first recorded launch, each launch taking what it launched (what it
    asked while its result is unknown), refilling `refill` a second up to `size`. Other tools' launches in the
    account draw on it too: EC2 then refuses with RequestLimitExceeded, a throttle the launch backs off from."""
    tokens, last = float(size), None
    for rec in sorted(launches, key=lambda r: r.at):
        if last is not None:
            tokens = min(float(size), tokens + refill * max(0.0, rec.at - last))
        tokens = max(0.0, tokens - (len(rec.instance_ids) if rec.instance_ids is not None else rec.count))
        last = rec.at
    if last is not None:
        tokens = min(float(size), tokens + refill * max(0.0, now - last))
    return int(tokens)


def target_capacity_type(group: Group) -> str:
    return {"spot": "spot", "capacity-block": "capacity-block"}.get(group.market, "on-demand")


def request(group: Group, count: int, token: str, cluster: str, minimum: int = 0) -> Dict[str, Any]:
    """The CreateFleet parameters for `count` instances of one group: all-or-nothing, or at least `minimum`."""
    # The version the program published, not `$Latest`: what the instance is tagged with is what it runs, even when
    # the template moves on between the groups value and this call; `$Latest` only for a program that said none.
    version = str(group.lt_version) if group.lt_version > 0 else "$Latest"
    template: Dict[str, Any] = {"Version": version}
    template["LaunchTemplateId" if group.launch_template.startswith("lt-") else "LaunchTemplateName"] = (
        group.launch_template
    )
    override: Dict[str, Any] = {"InstanceType": group.instance_type}
    if group.subnet_id:
        override["SubnetId"] = group.subnet_id  # the launch template's interfaces carry no subnet: the fleet's
    least = min(count, minimum) if minimum > 0 else count
    options: Dict[str, Any] = {"SingleInstanceType": True, "SingleAvailabilityZone": True, "MinTargetCapacity": least}
    kind = target_capacity_type(group)
    if kind == "spot":
        market = {"SpotOptions": options}
    else:  # on-demand and capacity-block both take OnDemandOptions
        if group.capacity_reservation_id or kind == "capacity-block":
            options["CapacityReservationOptions"] = {"UsageStrategy": "use-capacity-reservations-first"}
        market = {"OnDemandOptions": options}
    tags = [
        {"Key": TAG_CLUSTER, "Value": cluster},
        {"Key": TAG_ROLE, "Value": "compute"},
        {"Key": TAG_GROUP, "Value": group.name},
        # Tagged at creation (EC2 API Reference, CreateFleet, TagSpecifications: `instance` for an instant fleet;
        # Amazon EC2 User Guide, "Tag your resources at creation"), so no instance of the launch is ever without it
        {"Key": TAG_LAUNCH, "Value": token},
    ]
    if group.lt_version > 0:  # what a rolling replacement compares (decide_rolling.py)
        tags.append({"Key": TAG_TEMPLATE_VERSION, "Value": version})
    if group.spec:
        tags.append({"Key": TAG_LAUNCH_SPEC, "Value": group.spec})
    return {
        "Type": "instant",
        "ClientToken": token,
        "LaunchTemplateConfigs": [{"LaunchTemplateSpecification": template, "Overrides": [override]}],
        "TargetCapacitySpecification": {"TotalTargetCapacity": count, "DefaultTargetCapacityType": kind},
        "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}],
        **market,
    }


@dataclass(frozen=True)
class Outcome:
    instance_ids: Tuple[str, ...]
    failure: str = ""  # a FailureClass value when nothing was launched
    code: str = ""
    evidence: str = ""
    transient: bool = True  # False: a configuration error that no retry fixes (alert)


def classify(code: str, message: str) -> Outcome:
    """Every launch error is the launch class (EC2 gave no instance; no node to blame): capacity, quotas and
    throttling pass by themselves, anything else is the configuration's and is alerted."""
    transient = code.startswith(CAPACITY_CODES + QUOTA_CODES + THROTTLE_CODES)
    what = (
        "insufficient capacity"
        if code.startswith(CAPACITY_CODES)
        else "quota"
        if code.startswith(QUOTA_CODES)
        else "throttled"
        if code.startswith(THROTTLE_CODES)
        else "refused"
    )
    return Outcome((), FailureClass.LAUNCH.value, code, f"{what}: {code}: {message}"[:300], transient)


def parse(response: Dict[str, Any]) -> Outcome:
    """CreateFleet's answer: the ids launched, or the real cause when there are none (throttling first: the one
    cause that resolves itself)."""
    ids = tuple(i for entry in response.get("Instances", []) for i in entry.get("InstanceIds", []))
    if ids:
        return Outcome(ids)
    errors: List[Tuple[str, str]] = [
        (e.get("ErrorCode", ""), e.get("ErrorMessage", "")) for e in response.get("Errors", [])
    ]
    real = [e for e in errors if e != UNFULFILLED] or errors
    if not real:
        return classify("UnfulfillableCapacity", "no instance and no error in the response")
    throttled = [e for e in real if e[0].startswith(THROTTLE_CODES)]
    return classify(*(throttled or real)[0])


def launch(ec2: Any, params: Dict[str, Any]) -> Outcome:
    """One CreateFleet call; an API error (throttling, a bad parameter) is an Outcome too, never an exception."""
    try:
        return parse(ec2.create_fleet(**params))
    except Exception as e:  # botocore's ClientError, without importing botocore (the node side is stdlib only)
        err = getattr(e, "response", {}).get("Error", {})
        if not err:
            raise
        return classify(err.get("Code", ""), err.get("Message", ""))
