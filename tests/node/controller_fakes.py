"""A fake EC2 for the controller (what moto lacks: status-check failures, scheduled events, CreateFleet's
ClientToken idempotency, a slow shutting-down) and a wrapper that kills the controller at its n-th side effect."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from hpcc_contract.names import TAG_CLUSTER, TAG_GROUP


class Killed(BaseException):
    """The controller's process dies here (BaseException: no `except Exception` in act() may swallow it)."""


class ClientError(Exception):
    def __init__(self, code: str, message: str = ""):
        super().__init__(f"{code}: {message}")
        self.response = {"Error": {"Code": code, "Message": message}}


class _Pages:
    def __init__(self, pages: list[dict[str, Any]]):
        self.pages = pages

    def paginate(self, **_: Any):
        return iter(self.pages)


class FakeEC2:
    def __init__(self, clock: Callable[[], float], seed: int = 0):
        self.clock = clock
        self.instances: dict[str, dict[str, Any]] = {}
        self.tokens: dict[str, list[str]] = {}
        self.launched: list[str] = []
        self.capacity: int | None = None  # instances EC2 can still give; None: unlimited
        self.calls: dict[str, int] = {}
        self.rng = random.Random(seed)
        self.honours_tokens = True  # False: a repeated ClientToken launches again, as the box's moto does

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def create_fleet(self, **req: Any) -> dict[str, Any]:
        self._count("create_fleet")
        token = req["ClientToken"]
        if token in self.tokens and self.honours_tokens:  # idempotent, as EC2 answers a repeated ClientToken
            return {"Instances": [{"InstanceIds": list(self.tokens[token])}], "Errors": []}
        count = req["TargetCapacitySpecification"]["TotalTargetCapacity"]
        minimum = req.get("OnDemandOptions", req.get("SpotOptions", {})).get("MinTargetCapacity", 1)
        if self.capacity is not None and self.capacity < minimum:
            return {
                "Instances": [],
                "Errors": [
                    {
                        "ErrorCode": "InsufficientInstanceCapacity",
                        "ErrorMessage": "We currently do not have sufficient capacity",
                    }
                ],
            }
        count = min(count, self.capacity) if self.capacity is not None else count
        if self.capacity is not None:
            self.capacity -= count
        tags = {t["Key"]: t["Value"] for t in req["TagSpecifications"][0]["Tags"]}
        ids = []
        for _ in range(count):
            n = len(self.launched)
            iid = f"i-{n:017x}"
            self.instances[iid] = {
                "state": "pending",
                "launch": self.clock(),
                "tags": dict(tags),
                "ip": f"10.1.{n // 250}.{n % 250 + 4}",
                "status_ok": True,
                "events": [],
            }
            self.launched.append(iid)
            ids.append(iid)
        self.rng.shuffle(ids)  # EC2 gives no order
        self.tokens[token] = ids
        return {"Instances": [{"InstanceIds": ids}], "Errors": []}

    def terminate_instances(self, InstanceIds: list[str]) -> dict[str, Any]:
        self._count("terminate_instances")
        # one unknown id fails the whole request, none terminated (EC2 API Reference, TerminateInstances)
        if any(iid not in self.instances for iid in InstanceIds):
            raise ClientError("InvalidInstanceID.NotFound")
        for iid in InstanceIds:
            if self.instances[iid]["state"] not in ("shutting-down", "terminated"):
                self.instances[iid]["state"] = "shutting-down"
        return {}

    def create_tags(self, Resources: list[str], Tags: list[dict[str, str]]) -> dict[str, Any]:
        self._count("create_tags")
        for iid in Resources:
            self.instances[iid]["tags"].update({t["Key"]: t["Value"] for t in Tags})
        return {}

    def tick(self) -> None:
        """A loop's time passes: pending instances run, shutting-down ones are terminated."""
        for inst in self.instances.values():
            inst["state"] = {"pending": "running", "shutting-down": "terminated"}.get(inst["state"], inst["state"])

    def get_paginator(self, name: str) -> _Pages:
        self._count(name)
        if name == "describe_instances":
            found = [
                {
                    "InstanceId": iid,
                    "State": {"Name": i["state"]},
                    "LaunchTime": i["launch"],
                    "PrivateIpAddress": i["ip"],
                    "Tags": [{"Key": k, "Value": v} for k, v in i["tags"].items()],
                }
                for iid, i in sorted(self.instances.items())
                if TAG_CLUSTER in i["tags"]
            ]
            return _Pages(
                [{"Reservations": [{"Instances": found[k : k + 1000]}]} for k in range(0, len(found), 1000)]
                or [{"Reservations": []}]
            )
        assert name == "describe_instance_status"
        statuses = [
            {
                "InstanceId": iid,
                "InstanceStatus": {"Status": "ok" if i["status_ok"] else "impaired"},
                "SystemStatus": {"Status": "ok"},
                "Events": [{"Code": c} for c in i["events"]],
            }
            for iid, i in sorted(self.instances.items())
            if i["state"] == "running" and (not i["status_ok"] or i["events"])
        ]
        return _Pages([{"InstanceStatuses": statuses}])

    def live(self, group: str = "") -> list[str]:
        return [
            iid
            for iid, i in self.instances.items()
            if i["state"] in ("pending", "running") and (not group or i["tags"].get(TAG_GROUP) == group)
        ]


MUTATIONS = {"create_fleet", "terminate_instances", "create_tags", "transact_write_items", "put_item", "put_object"}


class Killer:
    """Counts the side effects of every client it wraps and dies at the n-th (before or after it happens)."""

    def __init__(self, at: int | None = None, after: bool = False):
        self.at, self.after, self.count, self.fired = at, after, 0, False

    def wrap(self, client: Any) -> Any:
        killer = self

        class Proxy:
            def __getattr__(self, name: str) -> Any:
                attr = getattr(client, name)
                if name not in MUTATIONS:
                    return attr

                def call(*args: Any, **kwargs: Any) -> Any:
                    killer.count += 1
                    due = not killer.fired and killer.at is not None and killer.count == killer.at
                    if due and not killer.after:
                        killer.fired = True
                        raise Killed(f"before {name} #{killer.count}")
                    out = attr(*args, **kwargs)
                    if due:
                        killer.fired = True
                        raise Killed(f"after {name} #{killer.count}")
                    return out

                return call

        return Proxy()


def moto_launch_template(ec2, name: str, data: dict[str, Any]) -> dict[str, str]:
    """In moto: a VPC, a subnet, an image (moto may load no AMIs) and a launch template `name` running it with
    `data`; the subnet and image ids."""
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24")["Subnet"]["SubnetId"]
    image = ec2.register_image(Name="hpcc-test", RootDeviceName="/dev/sda1")["ImageId"]
    ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData={"ImageId": image, **data})
    return {"subnet": subnet, "image": image}
