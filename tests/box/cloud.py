"""The box as a small cloud (issue 19, item 12; docs: /work/briefs/contract19.md): the box's moto server holds
what the program plans - a launch template per node group, the groups parameter, the settings, the bundle, the
ledger table, the state bucket and the head instance - in a subnet that IS the bridge's network, so the address
moto gives an instance at launch is the address of the namespace node that plays it.

The real controller (`python3 -m hpcc_node.controller` on the head) launches the groups with CreateFleet against
moto. A watcher here plays EC2's part below the API: for every instance launched with the cluster's tag it boots
a namespace node running that instance's user data (its launch template's loader), and it stops the node whose
instance is terminated. A node whose namespace dies stays dead while its instance keeps "running", as a hung
instance does. The box plays no part in membership: names, the hosts nodes follow and Slurm's addresses are the
controller's and the agents' work alone.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from hpcc_contract.names import HEAD, NO_ROTATION, TAG_CLUSTER, TAG_NODE, TAG_ROLE, Paths
from infra.plan.aws_rules import decode_user_data
from tests.box.harness import BOX_AMI, PROFILES, Box
from tests.box.node import REGION, Node, node_env
from tests.box.machine import SUBNET
from tests.box.watcher import Watcher

TAG_GROUP = "hpcc:group"  # contract19: set at launch by the group's launch template
VPC_BLOCK = f"{SUBNET}.0/24"  # the bridge's network
FLEET_CIDR = f"{SUBNET}.32/27"  # the box's subnet in moto: moto gives .36-.62 (4 reserved); never the host's .1
ACCOUNT = "123456789012"  # moto's account

# The controller's timers for the box only (hpcc_node/controller/timers.py fields, HPCC_CONTROLLER_<FIELD>):
# a loop every 5 s instead of 60, a boot grace of 4 minutes instead of 30 (a box node boots in under one), two
# bootstrap failures in a row protect a group, and the systemic window is short so one test's failures do not
# count in the next test's window; a node whose status is unwritten for 90 s (its agent beats every 10 s here,
# node.node_env) lost its agent.
CONTROLLER_TIMERS = {
    "loop_seconds": 5,
    "boot_grace_seconds": 240,
    "orphan_timeout_seconds": 120,
    "protected_failure_count": 2,
    "slot_attempt_cap": 3,
    "describe_lag_seconds": 30,
    "launch_backoff_first_seconds": 5,
    "launch_backoff_max_seconds": 20,
    "lease_seconds": 30,
    "systemic_window_seconds": 30,
    "heartbeat_timeout_seconds": 90,
}


def controller_env(timers: dict) -> dict[str, str]:
    return {f"HPCC_CONTROLLER_{k.upper()}": str(v) for k, v in timers.items()}


def instance_arn(instance_id: str) -> str:
    """contract19: arn:<partition>:ec2:<region>:<account>:instance/<id>, the key of a node's status object."""
    return f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{instance_id}"


@dataclass
class Fault:
    """A bootstrap fault the box puts on instances of `group` as they boot: the first `times` of them (0: every
    one) boot with `env`. The default fails the `ssh` step (an unusable VPC CIDR override), as
    tests/box/test_box_slurm.py's failing node does."""

    group: str
    times: int = 1
    env: dict = field(default_factory=lambda: {"HPCC_VPC_CIDR": "not-a-cidr"})
    hit: list = field(default_factory=list)  # instance ids it was put on

    def take(self, instance_id: str) -> dict:
        if self.times and len(self.hit) >= self.times:
            return {}
        self.hit.append(instance_id)
        return self.env


@dataclass
class Launched:
    """What the watcher saw of one instance: when it appeared, booted, and stopped."""

    instance_id: str
    group: str
    ip: str
    seen: float
    node: Node | None = None
    stopped: float = 0.0
    fault: dict = field(default_factory=dict)


@dataclass
class FleetBox(Box):
    """A head instance and node groups the controller launches. `groups`: [{"name", "count"}] (the cpu profile's
    compute type); `faults`: bootstrap faults by group, added any time."""

    groups: list = field(default_factory=lambda: [{"name": "a", "count": 2}, {"name": "b", "count": 1}])
    faults: list = field(default_factory=list)
    timers: dict = field(default_factory=lambda: dict(CONTROLLER_TIMERS))
    launched: dict = field(default_factory=dict)  # instance id -> Launched
    watcher: Watcher | None = None
    controller: object = None
    subnet_id: str = ""
    next_index: int = 1
    bare: bool = False  # only the network and the watcher: no plan, no program's resources, no head node
    lt_of_group: dict = field(default_factory=dict)
    gone: list = field(default_factory=list)  # nodes whose namespace died or whose instance was terminated
    compute_env: dict = field(default_factory=dict)  # given to every compute node's bootstrap (faults add theirs)
    prepare: object = None  # called with each compute node before its bootstrap (stand-ins, mounts)

    def config_map(self) -> dict:
        head_type, compute_type = PROFILES[self.profile]
        return {
            "aws:region": REGION,
            "hpcc:cluster": {
                "name": self.name,
                "headNode": {"instanceType": head_type},
                "nodeGroups": [
                    {
                        "name": g["name"],
                        "instanceType": compute_type,
                        "count": g["count"],
                        **({"spares": g["spares"]} if g.get("spares") else {}),
                    }
                    for g in self.groups
                ],
                "scheduler": self.scheduler,
                **({"hooks": self.hooks} if self.hooks else {}),
                "bootstrap": {"timeoutMinutes": 5},
            },
        }

    def plan(self) -> dict:
        key = tuple((g["name"], g["count"]) for g in self.groups)
        if key not in self.plans:
            from tests.box.planned import plan

            self.plans[key] = plan(self.config_map())
        return self.plans[key]

    @property
    def compute(self) -> list[Node]:
        """The live compute nodes, by name (`nodes`: the head, then the live compute nodes as they came)."""
        return sorted(self.nodes[1:], key=lambda n: n.name)

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def kill(self, node: Node) -> None:
        super().kill(node)
        if node in self.nodes:
            self.nodes.remove(node)
            self.gone.append(node)

    def membership_generation(self) -> int:
        """The generation of the membership the controller published (nodes report the one they applied as
        `hostsVersion`)."""
        return int(self.membership()["generation"])

    # -- start: the cloud as `pulumi up` leaves it, then the head ------------------------------------------
    def start(self) -> FleetBox:
        import atexit

        self.lock.acquire()
        atexit.register(self.stop)
        try:
            self._bridge_up()
            if not self.bare:
                self.plan()
            self._start_moto()
            self._seed_network()
            if not self.bare:
                self._seed_fleet_cloud()
                head = self._launch_head()
                self.nodes.append(
                    self._start_node(
                        0, HEAD, ip=head["PrivateIpAddress"], instance_id=head["InstanceId"], vpc_cidr=FLEET_CIDR
                    )
                )
            self.watcher = Watcher(self)
            self.watcher.start()
        except BaseException:
            self.stop()
            raise
        return self

    def _seed_network(self) -> None:
        """The VPC and the subnet every instance launches into: the bridge's network."""
        ec2 = self.client("ec2")
        vpc = ec2.create_vpc(CidrBlock=VPC_BLOCK)["Vpc"]["VpcId"]
        self.subnet_id = ec2.create_subnet(VpcId=vpc, CidrBlock=FLEET_CIDR)["Subnet"]["SubnetId"]

    def _seed_fleet_cloud(self) -> None:
        """What `pulumi up` creates (contract19, "What Pulumi creates"), in a subnet that is the bridge's network."""
        planned, ec2, paths = self.plan(), self.client("ec2"), Paths(self.name)
        missing = [k for k in ("groups", "ledgerTable", "stateBucket") if not planned.get(k)]
        if missing:
            raise RuntimeError(
                f"the program's plan has no {', '.join(missing)}: the fleet box needs a program that "
                "plans node groups (issue 19)"
            )
        group_names = {g["name"] for g in self.groups}
        lt_of_group = {}
        for t in planned["launchTemplates"].values():
            tags = {TAG_CLUSTER: self.name, **t["tags"]}
            data = {
                "ImageId": BOX_AMI,
                "UserData": t["userData"],
                "TagSpecifications": [
                    {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
                ],
            }
            ec2.create_launch_template(LaunchTemplateName=t["name"], LaunchTemplateData=data)
            if tags.get(TAG_GROUP) in group_names:
                lt_of_group[tags[TAG_GROUP]] = t["name"]
        self.publish_groups(lt_of_group)
        self.publish_bundle()
        ssm = self.client("ssm")
        ssm.put_parameter(Name=paths.settings, Type="String", Value=planned["settings"], Overwrite=True)
        ssm.put_parameter(
            Name=paths.fsx,
            Type="String",
            Value=json.dumps({"dnsName": "fs-0box.fsx.us-east-1.amazonaws.com", "mountName": "boxfs"}),
        )
        # Created empty, as identity.py does: the head writes each (the login user's key, the host CA) at its boot.
        for secret in (paths.ssh_secret, paths.user_secret, paths.host_ca_secret):
            self.client("secretsmanager").create_secret(Name=secret, Description="box")
        if self.scheduler == "slurm":
            self.client("secretsmanager").create_secret(Name=paths.munge_secret, Description="box")
        # The host-key rotation, as compute.py creates it ("none" until `hpcc rotate-keys`).
        ssm.put_parameter(Name=paths.rotation, Type="String", Value=NO_ROTATION)
        from hpcc_contract.ledger import table_definition

        self.client("dynamodb").create_table(**table_definition(planned["ledgerTable"]))
        self.client("s3").create_bucket(Bucket=planned["stateBucket"])
        self.lt_of_group = lt_of_group

    def publish_groups(self, lt_of_group: dict | None = None) -> None:
        """The planned `/hpcc/<c>/groups` value (as `pulumi up` writes it), each group's launch template and subnet
        the box's moto ones: the plan's ids are its embedded AWS's (as the old box put its IPs in the hosts)."""
        lt_of_group = lt_of_group or self.lt_of_group
        doc = json.loads(self.plan()["groups"])
        for g in doc["groups"]:
            g["launch_template"] = lt_of_group.get(g["name"], g.get("launch_template", ""))
            g["subnet_id"] = self.subnet_id
        self.client("ssm").put_parameter(
            Name=f"/hpcc/{self.name}/groups", Type="String", Value=json.dumps(doc), Overwrite=True
        )

    def resize(self, group: str, count: int) -> None:
        """`pulumi up` at a new count: the groups parameter's value changes in place (contract19), nothing else."""
        self.groups = [dict(g, count=count) if g["name"] == group else g for g in self.groups]
        self.publish_groups()

    def _launch_head(self) -> dict:
        """The head instance as Pulumi creates it: its launch template's user data (the head's loader), its tags."""
        head_type, _ = PROFILES[self.profile]
        tags = {TAG_CLUSTER: self.name, TAG_NODE: HEAD, TAG_ROLE: "head", "Name": f"{self.name}-{HEAD}"}
        template = self.plan()["launchTemplates"][f"{self.name}-head-lt"]
        return self.client("ec2").run_instances(
            ImageId=BOX_AMI,
            MinCount=1,
            MaxCount=1,
            InstanceType=head_type,
            SubnetId=self.subnet_id,
            UserData=base64.b64decode(template["userData"]),  # boto3 encodes it again
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
        )["Instances"][0]

    # -- the head and its controller ---------------------------------------------------------------------
    def boot_head(self, timeout: float = 300) -> int:
        head = self.head  # its role script starts the controller, passing on the box's HPCC_CONTROLLER_* timers
        self.start_bootstrap(
            head, env=controller_env(self.timers), script=decode_user_data(self._user_data(head.instance_id))
        )
        try:
            return head.bootstrap.wait(timeout=timeout)
        except Exception:
            head.bootstrap.kill()
            return -9

    def boot(self, timeout: float = 300, wait: list[str] | None = None) -> dict[str, int]:
        """The head's bootstrap, then its controller, which launches the groups; returns the exit code of the head
        and of the node each planned name holds once every one (or those in `wait`) has finished its bootstrap.
        A name whose node has not finished by then is -9."""
        deadline = time.time() + timeout
        codes = {HEAD: self.boot_head(timeout)}
        if codes[HEAD] != 0:
            return codes
        self.start_controller()
        from hpcc_contract.names import node_name

        names = [node_name(g["name"], i) for g in self.groups for i in range(g["count"])]
        names = [n for n in names if wait is None or n in wait]
        while True:
            slots = self.ledger().slots
            for name in names:
                seen = self.launched.get(slots[name].instance_id) if name in slots else None
                boot = seen.node.bootstrap if seen is not None and seen.node is not None else None
                codes[name] = boot.poll() if boot is not None and boot.poll() is not None else -9
            if all(codes[n] != -9 for n in names) or time.time() > deadline:
                return codes
            time.sleep(1)

    def start_controller(self) -> None:
        """`python3 -m hpcc_node.controller` on the head, from the head's bundle, with the box's short timers. The
        head's role script starts it (no systemd: a supervised daemon, templates/steps/controller.sh.j2), and its
        supervisor restarts it 10 s after it dies: then this only checks that one runs."""
        head = self.head
        if self.controller_pids():
            return
        env = {
            **node_env(head),
            "HPCC_CLUSTER": self.name,
            "HPCC_ACCOUNT": ACCOUNT,
            "HPCC_SCHEDULER": self.scheduler,
            "PYTHONPATH": "/opt/hpcc/current",
            **self._env_file(head, "/etc/hpcc/controller.env"),
            **controller_env(self.timers),
        }
        out = open(self.workdir / "controller.out", "a")
        import subprocess

        self.controller = subprocess.Popen(
            head.enter("python3", "-m", "hpcc_node.controller"),
            env=env,
            cwd="/",
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def controller_pids(self) -> list[int]:
        """The controller processes in the head's namespace (the box's or the role script's)."""
        from tests.box.machine import sh

        pids = []
        for pid in sh("ip", "netns", "pids", self.head.netns, check=False).stdout.split():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"hpcc_node.controller" in cmd and b"-m" in cmd:
                pids.append(int(pid))
        return pids

    def stop_controller(self) -> None:
        """SIGKILL: a controller dies at any point, in the middle of a replacement too."""
        import os
        import signal

        for pid in self.controller_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.controller is not None:
            self.controller.wait(timeout=10)
            self.controller = None

    @staticmethod
    def _env_file(node: Node, path: str) -> dict:
        f = node.file(path)
        if not f.exists():
            return {}
        return dict(
            line.split("=", 1) for line in f.read_text().splitlines() if "=" in line and not line.startswith("#")
        )

    def controller_log(self) -> str:
        parts = []
        for path in (self.head.file("/var/log/hpcc/controller.log"), self.workdir / "controller.out"):
            if path.exists():
                parts.append(path.read_text(errors="replace"))
        return "\n".join(parts)

    def stop(self) -> None:
        if self.watcher is not None:
            self.watcher.halt()
            self.watcher = None
        if self.controller is not None and self.controller.poll() is None:
            self.controller.kill()
        for node in self.gone:  # their namespaces are gone; reap what the box started for them
            for proc in (node.bootstrap, node.holder):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                if proc is not None:
                    proc.wait(timeout=10)
        super().stop()

    # -- what EC2 does below the API (the watcher's work) --------------------------------------------------
    def _user_data(self, instance_id: str) -> str:
        out = self.client("ec2").describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        return out.get("UserData", {}).get("Value", "")

    def boot_instance(self, inst: dict) -> Launched:
        """A namespace node for an instance just launched: its address, its user data, its group's fault if any."""
        iid, tags = inst["InstanceId"], {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
        group = tags.get(TAG_GROUP, "")
        seen = Launched(iid, group, inst["PrivateIpAddress"], time.time())
        self.launched[iid] = seen
        index, self.next_index = self.next_index, self.next_index + 1
        node = self._start_node(
            index,
            tags.get(TAG_NODE) or iid,
            ip=seen.ip,
            instance_id=iid,
            vpc_cidr=FLEET_CIDR,
            named_by_tag=True,
            group=group,
        )
        self.nodes.append(node)
        seen.node = node
        for fault in self.faults:
            if fault.group == group and not seen.fault:
                seen.fault = fault.take(iid)
        if self.prepare is not None:
            self.prepare(node)
        self.start_bootstrap(
            node, env={**self.compute_env, **seen.fault}, script=decode_user_data(self._user_data(iid))
        )
        return seen

    def stop_instance(self, seen: Launched) -> None:
        """Its instance is terminated: the node goes, and moto keeps its address a while (a network interface
        holds it), so the next launch gets a new one, as a replacement in a large subnet does."""
        if seen.node is not None and seen.node.alive:
            self.kill(seen.node)
        seen.stopped = time.time()
        self.client("ec2").create_network_interface(
            SubnetId=self.subnet_id, PrivateIpAddress=seen.ip, Description=f"box: {seen.instance_id}'s address, held"
        )

    # -- what the tests read -----------------------------------------------------------------------------
    def instances(self) -> dict[str, dict]:
        """The cluster's compute instances in moto, by id."""
        out = {}
        pages = (
            self.client("ec2")
            .get_paginator("describe_instances")
            .paginate(
                Filters=[
                    {"Name": f"tag:{TAG_CLUSTER}", "Values": [self.name]},
                    {"Name": f"tag:{TAG_ROLE}", "Values": ["compute"]},
                ]
            )
        )
        for page in pages:
            for res in page["Reservations"]:
                for inst in res["Instances"]:
                    out[inst["InstanceId"]] = inst
        return out

    def status(self, node: str) -> dict:
        """A node's status as it wrote it: s3://<state bucket>/status/<instance arn>.json (contract19); `node` is
        an instance id or the name of a live node."""
        instance_id = node if node.startswith("i-") else self.node(node).instance_id
        body = (
            self.client("s3")
            .get_object(Bucket=self.plan()["stateBucket"], Key=f"status/{instance_arn(instance_id)}.json")["Body"]
            .read()
        )
        return json.loads(body)

    def membership(self) -> dict:
        body = self.client("s3").get_object(Bucket=self.plan()["stateBucket"], Key="membership.json")["Body"].read()
        return json.loads(body)

    def ledger(self):
        """The ledger's slots, groups and events as the controller wrote them (hpcc_node/controller/ledger.py)."""
        from hpcc_node.controller.ledger import Ledger

        return Ledger(self.client("dynamodb"), self.plan()["ledgerTable"], "box-reader", time.time).load()

    def diagnose(self) -> str:
        watcher = "\n".join(self.watcher.errors[-5:]) if self.watcher else ""
        return (
            super().diagnose()
            + f"\n--- controller\n{self.controller_log()[-4000:]}"
            + (f"\n--- watcher errors\n{watcher}" if watcher else "")
        )
