"""EC2 and Slurm as the simulated head sees them: instances with a lifecycle on the virtual clock, CreateFleet
against EC2's launch bucket and a capacity, status checks, and Slurm's nodes read and updated through the same
commands the controller runs (hpcc_node/controller/slurm_records.py's forms). Adapted from
tests/node/controller_fakes.py (scripts do not import tests): the same answers, plus time and a launch bucket."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hpcc_contract.names import TAG_CLUSTER, TAG_GROUP, TAG_NODE
from hpcc_node.controller import slurm_records

from .kernel import Bucket, Sim


class ClientError(Exception):
    def __init__(self, code: str, message: str = "", reasons: list[str] | None = None):
        super().__init__(f"{code}: {message}")
        self.response: dict[str, Any] = {"Error": {"Code": code, "Message": message}}
        if reasons is not None:
            self.response["CancellationReasons"] = [{"Code": r} for r in reasons]


class Pages:
    def __init__(self, pages: list[dict[str, Any]]):
        self.pages = pages

    def paginate(self, **_: Any):
        return iter(self.pages)


@dataclass
class Instance:
    iid: str
    ip: str
    tags: dict[str, str]
    launched: float
    state: str = "pending"
    status_ok: bool = True


@dataclass
class EC2Params:
    pending_seconds: float  # CreateFleet to running
    shutdown_seconds: float  # shutting-down to terminated
    bucket_size: int  # EC2's RunInstances resource bucket (instances)
    bucket_refill: float  # instances a second
    capacity: int | None = None  # instances EC2 can still give (a terminated one's is not given back); None: unlimited


class EC2:
    def __init__(self, sim: Sim, p: EC2Params, on_running: Callable[[Instance], None]):
        self.sim, self.p, self.on_running = sim, p, on_running
        self.instances: dict[str, Instance] = {}
        self.tokens: dict[str, list[str]] = {}
        self.bucket = Bucket(p.bucket_size, p.bucket_refill, sim.now)
        self.launch_errors: dict[str, int] = {}

    def _refuse(self, code: str) -> dict[str, Any]:
        self.launch_errors[code] = self.launch_errors.get(code, 0) + 1
        return {"Instances": [], "Errors": [{"ErrorCode": code, "ErrorMessage": "simulated"}]}

    def create_fleet(self, **req: Any) -> dict[str, Any]:
        token = req["ClientToken"]
        if token in self.tokens:  # idempotent, as EC2 answers a repeated ClientToken
            return {"Instances": [{"InstanceIds": list(self.tokens[token])}], "Errors": []}
        count = req["TargetCapacitySpecification"]["TotalTargetCapacity"]
        minimum = req.get("OnDemandOptions", req.get("SpotOptions", {})).get("MinTargetCapacity", 1)
        if self.p.capacity is not None and self.p.capacity < minimum:
            return self._refuse("InsufficientInstanceCapacity")
        count = min(count, self.p.capacity) if self.p.capacity is not None else count
        # The launch bucket is charged per instance; an all-or-nothing request larger than what is left is refused
        # whole (EC2 API reference, "Request throttling": RequestLimitExceeded).
        if not self.bucket.take(count):
            return self._refuse("RequestLimitExceeded")
        if self.p.capacity is not None:
            self.p.capacity -= count
        tags = {t["Key"]: t["Value"] for t in req["TagSpecifications"][0]["Tags"]}
        ids = [self._launch(tags) for _ in range(count)]
        self.tokens[token] = ids
        return {"Instances": [{"InstanceIds": ids}], "Errors": []}

    def _launch(self, tags: dict[str, str]) -> str:
        n = len(self.instances)
        inst = Instance(f"i-{n:017x}", f"10.1.{n // 250}.{n % 250 + 4}", dict(tags), self.sim.now())
        self.instances[inst.iid] = inst
        self.sim.at(self.sim.now() + self.p.pending_seconds, lambda: self._run(inst))
        return inst.iid

    def _run(self, inst: Instance) -> None:
        if inst.state == "pending":
            inst.state = "running"
            self.on_running(inst)

    def seed(self, tags: dict[str, str]) -> Instance:
        """A running instance, for a cluster that starts settled."""
        inst = self.instances[self._launch(tags)]
        inst.state = "running"
        return inst

    def terminate_instances(self, InstanceIds: list[str]) -> dict[str, Any]:
        # up to 1,000 ids; one unknown id fails the request and none is terminated (API Reference, TerminateInstances)
        assert len(InstanceIds) <= 1000, len(InstanceIds)
        if any(iid not in self.instances for iid in InstanceIds):
            raise ClientError("InvalidInstanceID.NotFound")
        for iid in InstanceIds:
            inst = self.instances[iid]
            if inst.state not in ("shutting-down", "terminated"):
                inst.state = "shutting-down"
                self.sim.at(self.sim.now() + self.p.shutdown_seconds, lambda i=inst: setattr(i, "state", "terminated"))
        return {}

    def create_tags(self, Resources: list[str], Tags: list[dict[str, str]]) -> dict[str, Any]:
        for iid in Resources:
            self.instances[iid].tags.update({t["Key"]: t["Value"] for t in Tags})
        return {}

    def get_paginator(self, name: str) -> Pages:
        if name == "describe_instances":
            found = [
                {
                    "InstanceId": i.iid,
                    "State": {"Name": i.state},
                    "LaunchTime": i.launched,
                    "PrivateIpAddress": i.ip,
                    "Tags": [{"Key": k, "Value": v} for k, v in i.tags.items()],
                }
                for i in self.instances.values()
                if TAG_CLUSTER in i.tags
            ]
            return Pages(
                [{"Reservations": [{"Instances": found[k : k + 1000]}]} for k in range(0, len(found), 1000)]
                or [{"Reservations": []}]
            )
        assert name == "describe_instance_status", name
        bad = [
            {"InstanceId": i.iid, "InstanceStatus": {"Status": "impaired"}, "SystemStatus": {"Status": "ok"}}
            for i in self.instances.values()
            if i.state == "running" and not i.status_ok
        ]
        return Pages([{"InstanceStatuses": bad}])

    def name_of(self, iid: str) -> str:
        return self.instances[iid].tags.get(TAG_NODE, "")

    def group_of(self, iid: str) -> str:
        return self.instances[iid].tags.get(TAG_GROUP, "")


@dataclass
class SlurmNode:
    addr: str = ""
    registered_ip: str = ""  # the address slurmd registered from ("" while it has not)
    dead_since: float | None = None
    states: set[str] = field(default_factory=lambda: {"IDLE"})
    reason: str = ""


class Slurm:
    """slurmctld's view: a node is registered once the controller set its address and its slurmd started there;
    a dead node's slurmd stops answering and is NOT_RESPONDING after `timeout` (SlurmdTimeout)."""

    def __init__(self, sim: Sim, timeout: float):
        self.sim, self.timeout = sim, timeout
        self.nodes: dict[str, SlurmNode] = {}
        self.updates = 0

    def _states(self, n: SlurmNode) -> str:
        states = set(n.states)
        if not n.registered_ip or n.registered_ip != n.addr:
            states.add("NOT_RESPONDING")
        elif n.dead_since is not None and self.sim.now() - n.dead_since > self.timeout:
            states |= {"NOT_RESPONDING", "DOWN"}
        return "+".join(sorted(s.lower() for s in states))

    def run(self, argv: list[str]) -> str:
        """The reads of slurm_records.Reader: the JSON forms fail (as on a Slurm without data_parser), the fixed
        fields answer."""
        if argv in (list(a) for a in slurm_records.NODES_JSON) or argv == slurm_records.JOBS_JSON:
            raise subprocess.CalledProcessError(1, argv, "", "no data_parser plugin")
        if argv == slurm_records.NODES_FIXED:
            return "\n".join(
                f"{name}|{n.addr or name}|{self._states(n)}|{n.reason or 'none'}" for name, n in self.nodes.items()
            )
        return ""  # jobs, deep checks, reservations: none

    def command(self, argv: list[str]) -> str:
        """`scontrol update NodeName=... KEY=VALUE...` (act.py's): a list of names takes its NodeAddr list in order
        (scontrol(1), NodeAddr), as the batched set-address sends them, or one State and Reason for them all."""
        self.updates += 1
        fields = dict(a.split("=", 1) for a in argv[2:] if "=" in a)
        names = fields["NodeName"].split(",")
        if "NodeAddr" in fields:
            for name, addr in zip(names, fields["NodeAddr"].split(","), strict=True):
                self.nodes.setdefault(name, SlurmNode()).addr = addr
            return ""
        state = fields.get("State", "")
        for name in names:  # every node of the list gets the state and the reason (act_batch.py's batches)
            n = self.nodes.setdefault(name, SlurmNode())
            if state in ("DOWN", "DRAIN"):
                n.states.add(state)
                n.reason = fields.get("Reason", "")
            elif state == "RESUME":
                n.states -= {"DOWN", "DRAIN"}
                n.reason = ""
        return ""

    def register(self, name: str, ip: str) -> None:
        """slurmd started on a node (its bootstrap's slurm step)."""
        n = self.nodes.setdefault(name, SlurmNode())
        n.registered_ip, n.dead_since, n.states, n.reason = ip, None, {"IDLE"}, ""

    def die(self, name: str) -> None:
        if name in self.nodes:
            self.nodes[name].dead_since = self.sim.now()
