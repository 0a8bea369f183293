"""Cluster in a box: nodes as network namespaces on a bridge, each with a private mount namespace and its
own hostname and sshd, and a moto server as their AWS. Runs the very user data the program plans, and
publishes the settings and hosts values the program plans (its IPs replaced by the box nodes', node by node).
Each node is also an EC2 instance in the moto server (tags hpcc:cluster, hpcc:node, hpcc:role), whose id the
node gets as HPCC_INSTANCE_ID; day 2 (add or replace a node) follows a plan at the new count.

What a node keeps to itself (bind mounts inside its mount namespace): /root, /etc/hpcc, /etc/ssh (a copy
of the host's with the node's own host keys), /etc/profile.d, /run, /var/log, /usr/local/bin and
/usr/local/sbin; everything else (/usr, /tmp, the venv) is the host's. See tests/box/README.md.

Only one box runs on a machine at a time (fixed bridge, addresses and port): `start()` takes a lock,
and under it removes whatever a crashed earlier box left behind.
"""

from __future__ import annotations

import atexit
import base64
import ipaddress
import json
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import boto3

from tests.facts.instance_data import facts_for as lookup
from infra.config.parse import parse
from hpcc_contract.names import HEAD, TAG_CLUSTER, TAG_NODE, TAG_ROLE, Paths, compute_node_name
from tests.box.machine import (
    BRIDGE,
    GATEWAY,
    MOTO_PORT,
    MOUNTPOINTS_MADE,
    PREFIX,
    SUBNET,
    TMP_PREFIX,
    VETH,
    Lock,
    cleanup_leftovers,
    sh,
)
from tests.box.node import ENDPOINT, PRIVATE, REGION, VPC_CIDR, Node, node_env, shared_under_root
from tests.box.planned import plan

COPIED = (
    "etc/ssh",
    "etc/profile.d",
    "usr/local/bin",
    "usr/local/sbin",
    "etc/slurm",
)  # start as the host's, then diverge
BOX_AMI = "ami-0b0c0b0c0b0c0b0c0"  # moto runs any image id; the box's "instances" only carry tags and ids


# Box profiles: (head type, compute type). cpu: no EFA, the EFA step passes through libfabric's TCP
# provider. efa: an EFA type on a machine with no EFA device, so every node must fail at step efa.
PROFILES = {"cpu": ("c6i.xlarge", "c6i.16xlarge"), "efa": ("c5n.18xlarge", "c5n.18xlarge")}

# A node must never load modules into the host's kernel: modprobe is a stand-in that records the call
# and succeeds, as modprobe does on an instance whose driver loads but whose device is missing.
MODPROBE_STANDIN = """#!/bin/sh
# hpcc box: stands in for modprobe (a node must not load modules into the host's kernel)
echo "modprobe $*" >>/var/log/hpcc-box-modprobe.log
exit 0
"""


@dataclass
class Box:
    """A head node and `compute_count` compute nodes, plus `ghosts`: compute nodes listed in the hosts
    parameter that never boot (no namespace answers at their address)."""

    profile: str = "cpu"
    compute_count: int = 2
    ghosts: int = 0
    join_timeout_minutes: int = 1
    name: str = "box"
    scheduler: str = "none"  # the config's `scheduler`
    hooks: dict = field(default_factory=dict)  # the config's `hooks` (absolute paths: the plan runs elsewhere)
    nodes: list[Node] = field(default_factory=list)
    workdir: Path | None = None
    moto: object = None
    lock: Lock = field(default_factory=Lock)
    plans: dict = field(default_factory=dict)  # compute count -> the program's plan of the box config

    # -- the cluster's config, as a user would write it, and the program's plan of it ------------------
    def config_map(self) -> dict:
        head_type, compute_type = PROFILES[self.profile]
        return {
            "aws:region": REGION,
            "hpcc:cluster": {
                "name": self.name,
                "headNode": {"instanceType": head_type},
                "compute": {"instanceType": compute_type, "count": self.compute_count + self.ghosts},
                "scheduler": self.scheduler,
                **({"hooks": self.hooks} if self.hooks else {}),
                "bootstrap": {"timeoutMinutes": 5, "joinTimeoutMinutes": self.join_timeout_minutes},
            },
        }

    def config(self):
        m = self.config_map()
        return parse(m["aws:region"], m["hpcc:cluster"]).cluster

    def plan(self) -> dict:
        """The program's plan at the current count: user data, settings, and the node each hosts line names."""
        count = self.compute_count + self.ghosts
        if count not in self.plans:
            self.plans[count] = plan(self.config_map())
        return self.plans[count]

    @property
    def slots(self) -> int:
        return lookup(PROFILES[self.profile][1]).slots

    def scripts(self) -> dict[str, str]:
        """The scripts the program puts in each role's user data (the loaders): the planned launch templates'."""
        return self.plan()["userData"]

    @property
    def head(self) -> Node:
        return self.nodes[0]

    @property
    def compute(self) -> list[Node]:
        return self.nodes[1:]

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    # -- start and stop ------------------------------------------------------------------------------
    def start(self) -> Box:
        """Bring the box up; on any failure, take down what was started and re-raise."""
        self.lock.acquire()
        atexit.register(self.stop)  # also when the test process is interrupted
        try:
            self._bridge_up()
            self.plan()
            self._start_moto()
            names = [HEAD] + [compute_node_name(i) for i in range(self.compute_count)]
            for index, name in enumerate(names):
                self.nodes.append(self._start_node(index, name))
            self._seed_cloud()
        except BaseException:
            self.stop()
            raise
        return self

    def _bridge_up(self) -> None:
        """A clean machine (a crashed box's leftovers gone), the box's work directory and its bridge."""
        cleanup_leftovers()
        self.workdir = Path(tempfile.mkdtemp(prefix=TMP_PREFIX))
        self.workdir.chmod(0o755)
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
        sh("ip", "link", "set", BRIDGE, "up")

    def _mountpoint(self, path: Path) -> None:
        """A host directory to bind a node's private one onto; stays empty on the host, removed at cleanup."""
        if not path.exists():
            path.mkdir(parents=True)
            with MOUNTPOINTS_MADE.open("a") as made:
                made.write(f"{path}\n")

    def _start_node(self, index: int, name: str, ip: str = "", instance_id: str = "", **fields) -> Node:
        """A namespace node at `ip` (default .<10 + index>), registered as an instance unless it is one already."""
        node = Node(
            name,
            index,
            ip or f"{SUBNET}.{10 + index}",
            self.workdir / f"{name}.{index}",
            instance_id=instance_id,
            **fields,
        )
        ns, veth = node.netns, f"{VETH}{index}"
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", veth, "master", BRIDGE, "up")
        sh("ip", "-n", ns, "addr", "add", f"{node.ip}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        for private in PRIVATE:
            target = node.root / private
            if private in COPIED:
                shutil.copytree(f"/{private}", target, symlinks=True)
            else:
                target.mkdir(parents=True)
        (node.root / "root").chmod(0o700)
        (node.root / "run/sshd").mkdir()
        ssh_dir = node.root / "etc/ssh"
        # The node's own host keys, and none of the host's (or an earlier bootstrap's) hpcc drop-ins.
        for stale in [
            *ssh_dir.glob("ssh_host_*"),
            *ssh_dir.glob("ssh_config.d/*hpcc*"),
            *ssh_dir.glob("sshd_config.d/*hpcc*"),
        ]:
            stale.unlink(missing_ok=True)
        for stale in ("hpcc-mpirun", "hpcc-torchrun"):
            (node.root / "usr/local/bin" / stale).unlink(missing_ok=True)
        (node.root / "etc/profile.d/hpcc.sh").unlink(missing_ok=True)
        standin = node.root / "usr/local/bin/modprobe"
        standin.write_text(MODPROBE_STANDIN)
        standin.chmod(0o755)
        # Its own hostname too (UTS namespace): Open MPI and PMIx tell nodes apart by hostname.
        node.holder = subprocess.Popen(
            ["ip", "netns", "exec", ns, "unshare", "--mount", "--uts", "--propagation", "private", "sleep", "infinity"]
        )
        deadline = time.time() + 10
        while Path(f"/proc/{node.holder.pid}/comm").read_text().strip() != "sleep":  # unshare has exec'd
            if time.time() > deadline or node.holder.poll() is not None:
                raise RuntimeError(f"{name}: its namespaces never came up")
            time.sleep(0.05)
        for shared in shared_under_root():  # bound inside the node's copy first, carried by --rbind below
            inner = node.root / shared.relative_to("/")
            inner.mkdir(parents=True, exist_ok=True)
            sh(*node.enter("mount", "--bind", str(shared), str(inner)))
            sh(*node.enter("mount", "-o", "remount,bind,ro", str(inner)))
        for private in PRIVATE:
            self._mountpoint(Path(f"/{private}"))
            sh(*node.enter("mount", "--rbind", str(node.root / private), f"/{private}"))
        sh(*node.enter("hostname", f"{PREFIX}-{name}"))
        # `ip netns exec` mounts a /sys without cgroups; slurmd 22.05 starts only with a cgroup fs there (its
        # cgroup/v1 plugin: a tmpfs holding the controller-less name=systemd hierarchy). No controller is used:
        # the box runs Slurm with proctrack/linuxproc (HPCC_SLURM_CGROUP=0).
        sh(*node.enter("mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", "/sys/fs/cgroup"))
        sh(*node.enter("mkdir", "/sys/fs/cgroup/systemd"))
        sh(*node.enter("mount", "-t", "cgroup", "-o", "none,name=systemd", "cgroup", "/sys/fs/cgroup/systemd"))
        sh(*node.enter("ssh-keygen", "-q", "-A"))
        sh(*node.enter("/usr/sbin/sshd", "-o", f"ListenAddress={node.ip}", "-o", "PidFile=/run/sshd.pid"))
        node.instance_id = node.instance_id or self._register_instance(node)
        return node

    def kill(self, node: Node) -> None:
        """The node's namespace dies with everything in it (a hung or dead machine); its instance is untouched."""
        for pid in sh("ip", "netns", "pids", node.netns, check=False).stdout.split():
            sh("kill", "-9", pid, check=False)
        sh("ip", "netns", "del", node.netns, check=False)
        if node.holder:
            node.holder.wait(timeout=10)
        sh("ip", "link", "del", f"{VETH}{node.index}", check=False)  # gone with the namespace, usually
        node.alive = False

    def _register_instance(self, node: Node) -> str:
        """The node as an EC2 instance of the cluster, tagged as the program tags it (for `hpcc status` logic)."""
        role = "head" if node.name == HEAD else "compute"
        head_type, compute_type = PROFILES[self.profile]
        tags = {TAG_CLUSTER: self.name, TAG_NODE: node.name, TAG_ROLE: role, "Name": f"{self.name}-{node.name}"}
        out = self.client("ec2").run_instances(
            ImageId=BOX_AMI,
            MinCount=1,
            MaxCount=1,
            InstanceType=head_type if role == "head" else compute_type,
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
        )
        return out["Instances"][0]["InstanceId"]

    def _start_moto(self) -> None:
        from moto.server import ThreadedMotoServer

        # moto keeps its state per process, and the embedded AWS that reads the instance data (once per session,
        # tests/instance_data.py) resets all of it when it ends: read it now, not while the server holds the box.
        lookup(PROFILES[self.profile][1])

        self.moto = ThreadedMotoServer(ip_address=GATEWAY, port=MOTO_PORT, verbose=False)
        self.moto.start()
        # moto keeps its state per process, not per server: every box starts from an empty AWS.
        import requests

        requests.post(f"{ENDPOINT}/moto-api/reset", timeout=10).raise_for_status()

    def client(self, service: str):
        return boto3.client(
            service,
            region_name=REGION,
            endpoint_url=ENDPOINT,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def ghost_ips(self) -> list[str]:
        """Addresses no node has, at the top of the box's "VPC" (the nodes accept only addresses inside it)."""
        top = ipaddress.ip_network(VPC_CIDR)[-1]
        return [str(top - i) for i in range(self.ghosts)]

    def ip_of(self, name: str) -> str:
        ghosts = {compute_node_name(self.compute_count + i): ip for i, ip in enumerate(self.ghost_ips())}
        return next((n.ip for n in self.nodes if n.name == name), None) or ghosts[name]

    def publish_bundle(self, archive: bytes | None = None, pointer: str | None = None) -> None:
        """What `pulumi up` writes for the bundle (infra/components/bundle.py): the private, versioned bucket with
        its policy, the archive at its content-addressed key (create-once), the pointer. Default: the plan's;
        `archive` and `pointer` put other bytes or another pointer in their place (the refusal tests)."""
        planned, s3 = self.plan(), self.client("s3")
        bucket = planned["bundleBucket"]
        if bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
            s3.create_bucket(Bucket=bucket)
            s3.put_public_access_block(
                Bucket=bucket,
                PublicAccessBlockConfiguration={
                    "BlockPublicAcls": True,
                    "IgnorePublicAcls": True,
                    "BlockPublicPolicy": True,
                    "RestrictPublicBuckets": True,
                },
            )
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

    def publish(self) -> int:
        """What `pulumi up` writes at the current count: the planned bundle and settings, and the planned hosts
        value with each line's IP replaced by the box IP of the node it names. Returns the hosts parameter's Version."""
        paths, planned = Paths(self.name), self.plan()
        self.publish_bundle()
        ssm = self.client("ssm")
        ssm.put_parameter(Name=paths.settings, Type="String", Value=planned["settings"], Overwrite=True)
        hosts = "\n".join(self.ip_of(name) for name in planned["hostsNodes"])
        return ssm.put_parameter(Name=paths.hosts, Type="String", Value=hosts, Overwrite=True)["Version"]

    def _seed_cloud(self) -> None:
        """What `pulumi up` creates before the nodes boot (docs/bootstrap-contract.md), nothing more."""
        paths = Paths(self.name)
        ssm = self.client("ssm")
        self.publish()
        ssm.put_parameter(
            Name=paths.fsx,
            Type="String",
            Value=json.dumps({"dnsName": "fs-0box.fsx.us-east-1.amazonaws.com", "mountName": "boxfs"}),
        )
        names = [HEAD] + [compute_node_name(i) for i in range(self.compute_count + self.ghosts)]
        for name in names:
            ssm.put_parameter(Name=paths.node(name), Type="String", Value='{"phase": "pending"}')
        for secret in (paths.ssh_secret, paths.user_secret, paths.host_ca_secret):  # created empty, as identity.py does
            self.client("secretsmanager").create_secret(Name=secret, Description="box")
        if self.scheduler == "slurm":  # the program creates it with Slurm only
            self.client("secretsmanager").create_secret(Name=paths.munge_secret, Description="box")

    def stop(self) -> None:
        """Take everything down; safe to call twice and after a failed start."""
        if self.lock.fd is None:
            return
        try:
            for node in self.nodes:
                if node.bootstrap and node.bootstrap.poll() is None:
                    node.bootstrap.kill()
            cleanup_leftovers()  # kills every process in the namespaces, the holders among them
            for node in self.nodes:
                for proc in (node.holder, node.bootstrap):
                    if proc and proc.poll() is None:
                        proc.kill()
                    if proc:
                        proc.wait(timeout=10)
            if self.moto:
                self.moto.stop()
                self.moto = None
            if self.workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)
        finally:
            self.lock.release()
            atexit.unregister(self.stop)

    # -- the bootstrap -------------------------------------------------------------------------------
    def boot(self, timeout: float = 300, wait: list[str] | None = None) -> dict[str, int]:
        """Run every node's bootstrap at once as root, as EC2 would; return the exit codes of the nodes
        named in `wait` (default: all). Whatever a script prints before its own log takes over goes
        to <workdir>/bootstrap-<node>.out."""
        for node in self.nodes:
            self.start_bootstrap(node)
        deadline = time.time() + timeout
        codes = {}
        for node in self.nodes:
            if wait is not None and node.name not in wait:
                continue
            try:
                codes[node.name] = node.bootstrap.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                node.bootstrap.kill()
                codes[node.name] = -9
        return codes

    def start_bootstrap(self, node: Node, env: dict | None = None, script: str | None = None) -> None:
        path = self.workdir / node.script
        path.write_text(script if script is not None else self.scripts()[node.role])
        node.boot_env = dict(env or {})
        with open(self.workdir / f"{node.script}.out", "w") as out:
            node.bootstrap = subprocess.Popen(
                node.enter("bash", str(path)),
                env={**node_env(node), **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def rerun(self, node: Node) -> int:
        path = self.workdir / node.script
        return subprocess.run(
            node.enter("bash", str(path)),
            env={**node_env(node), **node.boot_env},
            capture_output=True,
            check=False,
            stdin=subprocess.DEVNULL,
            timeout=300,
        ).returncode

    def on_head(self, *cmd: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """A command on the head; one that hangs fails with what it printed so far and every node's and the
        controller's log tail (a node the controller replaced or reconfigured meanwhile shows there)."""
        try:
            return self.head.run(*cmd, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            out = e.output.decode(errors="replace") if isinstance(e.output, bytes) else (e.output or "")
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            raise AssertionError(
                f"{' '.join(cmd)} still running after {timeout} s; printed {len(out.splitlines())} "
                f"line(s), stderr: {err[-2000:]}\n{self.diagnose()}"
            ) from None

    def status(self, node_name: str) -> dict:
        """A node's status as the operator's tools read it: the SSM parameter the node writes."""
        value = self.client("ssm").get_parameter(Name=Paths(self.name).node(node_name))["Parameter"]["Value"]
        return json.loads(value)

    def log(self, node: Node) -> str:
        path = node.file("/var/log/hpcc-bootstrap.log")
        return path.read_text(errors="replace") if path.exists() else ""

    def diagnose(self) -> str:
        """The tail of every node's log, for assertion messages."""
        return "\n".join(f"--- {n.name}\n" + "\n".join(self.log(n).splitlines()[-25:]) for n in self.nodes)
