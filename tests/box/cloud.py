"""The box as a small cloud (issue 19): the box's moto server holds what the program plans - a launch template per
node group, the groups parameter, the settings, the bundle, the ledger table, the state bucket and the head
instance - in a subnet on the bridge's network, so the address moto gives an instance at launch is the address of
the namespace node that plays it.

The real controller (`python3 -m hpcc_node.controller` on the head) launches the groups with CreateFleet against
moto. A watcher (tests/box/watcher.py) plays EC2's part below the API: for every instance launched with a watched
cluster's tag it boots a namespace node running that instance's user data (its launch template's loader), and it
stops the node whose instance is terminated. A node whose namespace dies stays dead while its instance keeps
"running", as a hung instance does. The box plays no part in membership: names, the hosts nodes follow and
Slurm's addresses are the controller's and the agents' work alone.

Day-2 changes a test makes through the box (resize, spares, faults) are recorded with what undoes them
(`undo`): the shared box (tests/box/shared.py) restores them after each test.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hpcc_contract.names import HEAD, NO_ROTATION, TAG_CLUSTER, TAG_NODE, TAG_ROLE, Paths
from hpcc_node import status
from infra.plan.aws_rules import decode_user_data
from tests.box.harness import BOX_AMI, PROFILES, Box
from tests.box.machine import NETWORK, make_gpu_devices, sh
from tests.box.node import REGION, Node, node_env, provide_controller_env
from tests.box.timing import Phases
from tests.box.watcher import Watcher

TAG_GROUP = "hpcc:group"  # contract19: set at launch by the group's launch template
FLEET_CIDR = "10.200.16.0/20"  # the box's subnet in moto (moto gives .4 on); the bridge's host address is outside
ACCOUNT = "123456789012"  # moto's account

# The controller's timers for the box only (hpcc_node/controller/timers.py fields, HPCC_CONTROLLER_<FIELD>):
# a loop every 5 s instead of 60, a boot grace of 4 minutes instead of 30 (a box node boots in under two), two
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


# What `pulumi up` writes in the groups parameter after a group's launch changed (tests/box/day2.py change_image).
ROLL_FIELDS = ("lt_version", "spec", "update_strategy", "max_unavailable")


def controller_env(timers: dict) -> dict[str, str]:
    return {f"HPCC_CONTROLLER_{k.upper()}": str(v) for k, v in timers.items()}


def instance_arn(instance_id: str) -> str:
    """contract19: arn:<partition>:ec2:<region>:<account>:instance/<id>, the key of a node's status object."""
    return f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{instance_id}"


@dataclass
class Fault:
    """A bootstrap fault the box puts on instances of `group` as they boot: the first `times` of them (0: every
    one) boot with `env`. The default fails the `ssh` step (an unusable VPC CIDR override)."""

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
    """A head instance and node groups the controller launches. `groups`: [{"name", "count"[, "spares"]}] (the
    profile's compute type); `faults`: bootstrap faults by group, added any time."""

    groups: list = field(default_factory=lambda: [{"name": "a", "count": 2}, {"name": "b", "count": 1}])
    scheduler: str = "none"  # the config's `scheduler`
    # the config's `containers.enabled` (issue 35): off until a box scenario gives the containers step its stand-ins
    # (HPCC_ENROOT, HPCC_PYXIS_SO: templates/steps/containers.sh.j2); on, with Slurm, a node without them fails it
    containers: bool = False
    hooks: dict = field(default_factory=dict)  # the config's `hooks` (absolute paths: the plan runs elsewhere)
    faults: list = field(default_factory=list)
    timers: dict = field(default_factory=lambda: dict(CONTROLLER_TIMERS))
    compute_env: dict = field(default_factory=dict)  # given to every compute node's bootstrap (faults add theirs)
    # Slurm's GPUs a compute node has (Gres=gpu:N in each group's definition, as a GPU type's plan has it, and
    # /dev/nvidia<i> device nodes for gres.conf's File=): 0 keeps the profile's type's
    slurm_gpus: int = 0
    prepare: Callable | None = None  # called with each compute node before its bootstrap (stand-ins, mounts)
    bare: bool = False  # only the network and the watcher: no plan, no program's resources, no head node
    launched: dict = field(default_factory=dict)  # instance id -> Launched
    clusters: set = field(default_factory=set)  # the cluster tags the watcher boots instances of (the box's too)
    watcher: Watcher | None = None
    controller: subprocess.Popen | None = None
    subnet_id: str = ""
    next_index: int = 1
    lt_of_group: dict = field(default_factory=dict)
    gone: list = field(default_factory=list)  # nodes whose namespace died or whose instance was terminated
    plans: dict = field(default_factory=dict)
    phases: Phases = field(default_factory=Phases)
    undos: list = field(default_factory=list)  # (key, what, how): the day-2 changes made since the last restore
    _clients: dict = field(default_factory=dict)

    def config_map(self) -> dict:
        head_type, compute_type = PROFILES[self.profile]
        groups = [{"name": g["name"], "instanceType": compute_type, "count": g["count"]} for g in self.groups]
        return {
            "aws:region": REGION,
            "hpcc:cluster": {
                "name": self.name,
                "headNode": {"instanceType": head_type},
                "nodeGroups": groups,
                "scheduler": self.scheduler,
                **({"containers": {"enabled": False}} if self.scheduler == "slurm" and not self.containers else {}),
                **({"hooks": self.hooks} if self.hooks else {}),
                "bootstrap": {"timeoutMinutes": 5},
            },
        }

    def config(self):
        """The config as a user's stack file gives it, parsed (infra.config.parse)."""
        from infra.config.parse import parse

        m = self.config_map()
        return parse(m["aws:region"], m["hpcc:cluster"]).cluster

    def plan(self) -> dict:
        """The program's plan of the config as first given (counts and spares then change as day-2 values)."""
        if "first" not in self.plans:
            from tests.box.planned import plan

            self.plans["first"] = plan(self.config_map())
        return self.plans["first"]

    def client(self, service: str):
        if service not in self._clients:  # one per service: creating a client loads its model (slow)
            self._clients[service] = super().client(service)
        return self._clients[service]

    @property
    def compute(self) -> list[Node]:
        """The live compute nodes, by name (`nodes`: the head, then the live compute nodes as they came)."""
        return sorted(self.nodes[1:], key=lambda n: n.name)

    def kill(self, node: Node) -> None:
        super().kill(node)
        if node in self.nodes:
            self.nodes.remove(node)
            self.gone.append(node)

    def membership_generation(self) -> int:
        """The generation of the membership the controller published (nodes report the one they applied as
        `hostsVersion`)."""
        return int(self.membership()["generation"])

    # -- day-2 changes, each with what undoes it ------------------------------------------------------------
    def undo(self, what: str, how: Callable[[], None], key: str = "") -> None:
        """Record a change a test made and what undoes it (restore() runs them, the last first). Changes of one
        `key` (a group's count) are undone once, by the first one's undo: back to where it was before them all."""
        if key and any(k == key for k, _, _ in self.undos):
            return
        self.undos.append((key, what, how))

    def restore(self) -> list[str]:
        """Undo every recorded change, the last first; returns what was undone (a failing undo is raised after the
        others ran, naming it)."""
        done, failed = [], []
        while self.undos:
            _, what, how = self.undos.pop()
            try:
                how()
                done.append(what)
            except Exception as e:  # the others still run: the baseline check says what is left
                failed.append(f"{what}: {e}")
        if failed:
            raise AssertionError(f"could not undo: {failed}")
        return done

    def resize(self, group: str, count: int) -> None:
        """`pulumi up` at a new count: the groups parameter's value changes in place (contract19), nothing else."""
        before = self._group(group).get("count")
        self._set(group, count=count)
        self.undo(f"group {group} back to {before} nodes", lambda: self._set(group, count=before), key=f"count:{group}")

    def set_spares(self, group: str, spares: int) -> None:
        """`spares:` changed in the stack file: the groups parameter's value, in place."""
        before = self._group(group).get("spares", 0)
        self._set(group, spares=spares)
        self.undo(
            f"group {group} back to {before} spares", lambda: self._set(group, spares=before), key=f"spares:{group}"
        )

    def _group(self, name: str) -> dict:
        return next(g for g in self.groups if g["name"] == name)

    def _set(self, group: str, **fields) -> None:
        self.groups = [dict(g, **fields) if g["name"] == group else g for g in self.groups]
        self.publish_groups()

    def add_fault(self, fault: Fault) -> Fault:
        """A fault on the group's next boots, until restored."""
        self.faults.append(fault)
        self.undo(f"fault on {fault.group} removed", lambda: self.faults.remove(fault))
        return fault

    # -- start: the cloud as `pulumi up` leaves it, then the head ------------------------------------------
    def start(self) -> FleetBox:
        try:
            with self.phases.timed("plan (a child process)"):
                if not self.bare:
                    self.plan()
            with self.phases.timed("bridge, moto, the program's resources"):
                self._bridge_up()
                if self.slurm_gpus:
                    make_gpu_devices(self.slurm_gpus)
                self._start_moto()
                self._seed_network()
                if not self.bare:
                    self._seed_fleet_cloud()
            self.clusters.add(self.name)
            if not self.bare:
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
        vpc = ec2.create_vpc(CidrBlock=NETWORK)["Vpc"]["VpcId"]
        self.subnet_id = ec2.create_subnet(VpcId=vpc, CidrBlock=FLEET_CIDR)["Subnet"]["SubnetId"]

    def _seed_fleet_cloud(self) -> None:
        """What `pulumi up` creates (contract19, "What Pulumi creates"), in a subnet on the bridge's network."""
        planned, ec2, paths = self.plan(), self.client("ec2"), Paths(self.name)
        missing = [k for k in ("groups", "ledgerTable", "stateBucket") if not planned.get(k)]
        if missing:
            raise RuntimeError(f"the program's plan has no {', '.join(missing)}: the fleet box needs node groups")
        group_names = {g["name"] for g in self.groups}
        for t in planned["launchTemplates"].values():
            tags = {TAG_CLUSTER: self.name, **t["tags"]}
            specs = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
            data = {"ImageId": BOX_AMI, "UserData": t["userData"], "TagSpecifications": specs}
            ec2.create_launch_template(LaunchTemplateName=t["name"], LaunchTemplateData=data)
            if tags.get(TAG_GROUP) in group_names:
                self.lt_of_group[tags[TAG_GROUP]] = t["name"]
        self.publish_groups()
        self.publish_bundle()
        ssm = self.client("ssm")
        ssm.put_parameter(Name=paths.settings, Type="String", Value=planned["settings"], Overwrite=True)
        fsx = {"dnsName": "fs-0box.fsx.us-east-1.amazonaws.com", "mountName": "boxfs"}
        ssm.put_parameter(Name=paths.fsx, Type="String", Value=json.dumps(fsx))
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

    def publish_groups(self) -> None:
        """The planned `/hpcc/<c>/groups` value with each group's count and spares as the box has them now (what
        `pulumi up` changes in place), and its launch version and spec where a test changed them (ROLL_FIELDS), its
        launch template and subnet the box's moto ones (the plan's are its embedded AWS's)."""
        doc = json.loads(self.plan()["groups"])
        now = {g["name"]: g for g in self.groups}
        for g in doc["groups"]:
            g["count"], g["spares"] = now[g["name"]]["count"], now[g["name"]].get("spares", 0)
            g.update({k: now[g["name"]][k] for k in ROLL_FIELDS if k in now[g["name"]]})  # a launch change's
            g["launch_template"] = self.lt_of_group.get(g["name"], g.get("launch_template", ""))
            g["subnet_id"] = self.subnet_id
            if self.slurm_gpus and g.get("slurm"):
                g["slurm"]["gres"] = f"gpu:{self.slurm_gpus}"
        self.client("ssm").put_parameter(
            Name=Paths(self.name).groups, Type="String", Value=json.dumps(doc), Overwrite=True
        )

    def publish_bundle(self, archive: bytes | None = None, pointer: str | None = None) -> None:
        """What `pulumi up` writes for the bundle (infra/components/bundle.py): the private, versioned bucket with
        its policy, the archive at its content-addressed key (create-once), the pointer. Default: the plan's;
        `archive` and `pointer` put other bytes or another pointer in their place (the refusal tests)."""
        planned, s3 = self.plan(), self.client("s3")
        bucket = planned["bundleBucket"]
        if bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
            s3.create_bucket(Bucket=bucket)
            block = dict.fromkeys(("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets"))
            s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration={k: True for k in block})
            s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
            s3.put_bucket_policy(Bucket=bucket, Policy=planned["bucketPolicy"])
        pointer = pointer or planned["bundlePointer"]
        key = json.loads(pointer)["key"]
        body = archive if archive is not None else base64.b64decode(planned["bundle"])
        try:
            s3.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")
        except s3.exceptions.ClientError as e:
            if e.response["Error"]["Code"] != "PreconditionFailed":  # already there: a key holds one bundle
                raise
        self.client("ssm").put_parameter(Name=Paths(self.name).bundle, Type="String", Value=pointer, Overwrite=True)

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
        with self.phases.timed("the head's bootstrap"):
            provide_controller_env(head.root)  # its boto3, which the box cannot pip install (no PyPI)
            script = decode_user_data(self._user_data(head.instance_id))
            self.start_bootstrap(head, script, env=controller_env(self.timers))
            try:
                return head.bootstrap.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                head.bootstrap.kill()
                return -9

    def boot(self, timeout: float = 300) -> dict[str, int]:
        """The head's bootstrap, then its controller, which launches the groups; returns the exit code of the head
        and of the node each planned name holds once every one has finished its bootstrap (-9: not by then)."""
        deadline = time.time() + timeout
        codes = {HEAD: self.boot_head(timeout)}
        if codes[HEAD] != 0:
            return codes
        self.start_controller()
        from hpcc_contract.names import node_name

        names = [node_name(g["name"], i) for g in self.groups for i in range(g["count"])]
        with self.phases.timed("the controller's launches and the nodes' bootstraps"):
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
        self.controller = subprocess.Popen(
            head.enter("python3", "-m", "hpcc_node.controller"),
            env=env,
            cwd="/",
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def wait_loops(self, loops: int, timeout: float = 300) -> None:
        """Until the controller has run `loops` more loops (each takes or renews its lease in the ledger first):
        "four loops later", counted rather than slept, so a loaded machine's slow loops still make four."""
        from hpcc_node.controller.ledger import Ledger

        ledger = Ledger(self.client("dynamodb"), self.plan()["ledgerTable"], "box-reader", time.time)
        seen, last, deadline = 0, ledger.holder()[1], time.time() + timeout
        while seen < loops:
            if time.time() > deadline:
                raise AssertionError(f"the controller ran {seen} of {loops} loops in {timeout} s\n{self.diagnose()}")
            time.sleep(0.5)
            expires = ledger.holder()[1]
            seen, last = seen + (expires != last), expires

    def controller_pids(self) -> list[int]:
        """The controller processes in the head's namespace (the box's or the role script's)."""
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
        lines = f.read_text().splitlines()
        return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))

    def controller_log(self) -> str:
        paths = (self.head.file("/var/log/hpcc/controller.log"), self.workdir / "controller.out")
        return "\n".join(p.read_text(errors="replace") for p in paths if p.exists())

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
        name = tags.get(TAG_NODE) or iid
        node = self._start_node(
            index, name, ip=seen.ip, instance_id=iid, vpc_cidr=FLEET_CIDR, named_by_tag=True, group=group
        )
        self.nodes.append(node)
        seen.node = node
        for fault in self.faults:
            if fault.group == group and not seen.fault:
                seen.fault = fault.take(iid)
        if self.prepare is not None:
            self.prepare(node)
        script = decode_user_data(self._user_data(iid))
        self.start_bootstrap(node, script, env={**self.compute_env, **seen.fault})
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
    def instances(self, cluster: str = "") -> dict[str, dict]:
        """A watched cluster's compute instances in moto (the box's by default), by id."""
        out = {}
        filters = [
            {"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster or self.name]},
            {"Name": f"tag:{TAG_ROLE}", "Values": ["compute"]},
        ]
        for page in self.client("ec2").get_paginator("describe_instances").paginate(Filters=filters):
            for res in page["Reservations"]:
                for inst in res["Instances"]:
                    out[inst["InstanceId"]] = inst
        return out

    def status(self, node: str) -> dict:
        """A node's status as it wrote it: s3://<state bucket>/status/<instance arn>.json (contract19); `node` is
        an instance id or the name of a live node."""
        instance_id = node if node.startswith("i-") else self.node(node).instance_id
        key = f"status/{instance_arn(instance_id)}.json"
        got = self.client("s3").get_object(Bucket=self.plan()["stateBucket"], Key=key)
        return status.with_applied(json.loads(got["Body"].read()), got.get("Metadata"))

    def membership(self) -> dict:
        body = self.client("s3").get_object(Bucket=self.plan()["stateBucket"], Key="membership.json")["Body"].read()
        return json.loads(body)

    def ledger(self):
        """The ledger's slots, groups and events as the controller wrote them (hpcc_node/controller/ledger.py)."""
        from hpcc_node.controller.ledger import Ledger

        return Ledger(self.client("dynamodb"), self.plan()["ledgerTable"], "box-reader", time.time).load()

    def scripts(self) -> dict[str, str]:
        """The user data (the loaders) the program plans, by role."""
        return self.plan()["userData"]

    def diagnose(self) -> str:
        watcher = "\n".join(self.watcher.errors[-5:]) if self.watcher else ""
        return (
            super().diagnose()
            + f"\n--- controller\n{self.controller_log()[-4000:]}"
            + (f"\n--- watcher errors\n{watcher}" if watcher else "")
        )
