"""Cluster in a box: nodes as network namespaces on a bridge, each with a private mount namespace and its
own sshd, and a moto server as their AWS. Runs the very bootstrap scripts the program renders.

What a node keeps to itself: /root/.ssh, /etc/hpcc, /etc/ssh, /etc/profile.d, /run, /var/log and
/usr/local/bin (bind mounts inside its mount namespace); everything else is the host's.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import boto3

from infra.catalog import lookup
from infra.components.compute import bootstrap_context
from infra.config import parse
from infra.efa import efa_device_count, interface_layout
from infra.naming import Paths, compute_node_name
from infra.userdata import render

PREFIX = "hpccbox"
BRIDGE = "hpccbr0"
SUBNET = "10.200.0"
GATEWAY = f"{SUBNET}.1"
MOTO_PORT = 5123
REGION = "us-east-1"
VENV_BIN = Path(__file__).resolve().parents[2] / ".venv" / "bin"
PRIVATE = ("root/.ssh", "etc/hpcc", "etc/ssh", "etc/profile.d", "run", "var/log", "usr/local/bin")
COPIED = ("etc/ssh", "etc/profile.d", "usr/local/bin")  # start as the host's, then diverge


def sh(*cmd: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True, **kw)


def can_run() -> str | None:
    """None when this machine can run the box, else the reason it cannot."""
    if os.geteuid() != 0:
        return "needs root (network and mount namespaces)"
    for tool in ("ip", "unshare", "nsenter", "sshd", "mpirun", "fi_info"):
        if not shutil.which(tool) and not Path(f"/usr/sbin/{tool}").exists():
            return f"needs {tool} (make deps installs it)"
    if sh("ip", "netns", "add", f"{PREFIX}-probe", check=False).returncode != 0:
        return "ip netns add is not permitted here"
    sh("ip", "netns", "del", f"{PREFIX}-probe", check=False)
    return None


def cleanup_leftovers() -> None:
    """Remove namespaces, processes and the bridge of an earlier box, even one that crashed."""
    for line in sh("ip", "netns", "list", check=False).stdout.splitlines():
        ns = line.split()[0] if line.split() else ""
        if ns.startswith(PREFIX):
            for pid in sh("ip", "netns", "pids", ns, check=False).stdout.split():
                sh("kill", "-9", pid, check=False)
            sh("ip", "netns", "del", ns, check=False)
    # A namespace dies asynchronously; its veth peers would block the next box's names.
    for line in sh("ip", "-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name.startswith("hbv"):
            sh("ip", "link", "del", name, check=False)
    sh("ip", "link", "del", BRIDGE, check=False)


@dataclass
class Node:
    name: str
    index: int  # position in the hosts parameter: 0 head, 1.. compute
    ip: str
    root: Path  # this node's private directories live under here
    holder: subprocess.Popen | None = None
    bootstrap: subprocess.Popen | None = None

    @property
    def netns(self) -> str:
        return f"{PREFIX}-{self.index}"

    def enter(self, *cmd: str) -> list[str]:
        return ["nsenter", "-t", str(self.holder.pid), "-m", "-n", *cmd]

    def run(self, *cmd: str, check: bool = False, timeout: float = 120, env: dict | None = None):
        return subprocess.run(self.enter(*cmd), capture_output=True, text=True, check=check, timeout=timeout,
                              env=env or node_env(self))

    def file(self, path: str) -> Path:
        """A private path as the host sees it (e.g. /etc/hpcc/hostfile)."""
        rel = path.lstrip("/")
        for private in PRIVATE:
            if rel == private or rel.startswith(private + "/"):
                return self.root / rel
        return Path(path)


def node_env(node: Node, endpoint: str = f"http://{GATEWAY}:{MOTO_PORT}") -> dict:
    return {
        "PATH": f"{VENV_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root", "LANG": "C.UTF-8",
        "HPCC_NODE_IP": node.ip, "HPCC_SKIP_STEPS": "lustre,mount",  # no Lustre server in the box
        "AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }


@dataclass
class Box:
    """N nodes (a head and compute nodes) plus `ghosts`: compute nodes listed in the hosts parameter that never boot."""

    compute_type: str = "c6i.xlarge"
    compute_count: int = 2
    ghosts: int = 0
    join_timeout_minutes: int = 1
    name: str = "box"
    nodes: list[Node] = field(default_factory=list)
    workdir: Path | None = None
    moto: object = None

    # -- the cluster's config, as a user would write it ----------------------------------------------
    def config(self):
        return parse(REGION, {
            "name": self.name, "headNode": {"instanceType": "c6i.xlarge"},
            "compute": {"instanceType": self.compute_type, "count": self.compute_count + self.ghosts},
            "bootstrap": {"timeoutMinutes": 10, "joinTimeoutMinutes": self.join_timeout_minutes}}).cluster

    def scripts(self) -> dict[str, str]:
        cfg = self.config()
        compute = lookup(cfg.compute.instance_type)
        out = {}
        for role, itype, efa in (("head", lookup(cfg.head_node.instance_type), True),
                                 ("compute", compute, cfg.compute.efa is not False)):
            devices = efa_device_count(interface_layout(itype, efa))
            out[role] = render(bootstrap_context(cfg, REGION, role, itype, compute, devices))
        return out

    # -- start and stop ------------------------------------------------------------------------------
    def start(self) -> "Box":
        cleanup_leftovers()
        self.workdir = Path(tempfile.mkdtemp(prefix="hpcc-box-"))
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
        sh("ip", "link", "set", BRIDGE, "up")
        names = ["head"] + [compute_node_name(i) for i in range(self.compute_count)]
        for index, name in enumerate(names):
            self.nodes.append(self._start_node(index, name))
        self._start_moto()
        self._seed_cloud()
        return self

    def _start_node(self, index: int, name: str) -> Node:
        node = Node(name, index, f"{SUBNET}.{10 + index}", self.workdir / name)
        ns, veth = node.netns, f"hbv{index}"
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
        (node.root / "root/.ssh").chmod(0o700)
        (node.root / "run/sshd").mkdir()
        # Stale drop-ins copied from the host would not be this node's.
        for stale in ("etc/ssh/ssh_config.d/50-hpcc.conf", "etc/ssh/sshd_config.d/50-hpcc.conf"):
            (node.root / stale).unlink(missing_ok=True)
        node.holder = subprocess.Popen(["ip", "netns", "exec", ns, "unshare", "--mount", "--propagation", "private",
                                        "sleep", "infinity"])
        deadline = time.time() + 10
        while Path(f"/proc/{node.holder.pid}/comm").read_text().strip() != "sleep":  # unshare has exec'd
            if time.time() > deadline:
                raise RuntimeError(f"{name}: its namespaces never came up")
            time.sleep(0.05)
        for private in PRIVATE:
            Path(f"/{private}").mkdir(parents=True, exist_ok=True)  # a mount point; stays empty on the host
            sh(*node.enter("mount", "--bind", str(node.root / private), f"/{private}"))
        sh(*node.enter("/usr/sbin/sshd", "-o", f"ListenAddress={node.ip}", "-o", "PidFile=/run/sshd.pid"))
        return node

    def _start_moto(self) -> None:
        from moto.server import ThreadedMotoServer

        self.moto = ThreadedMotoServer(ip_address=GATEWAY, port=MOTO_PORT, verbose=False)
        self.moto.start()
        # moto keeps its state per process, not per server: start every box from an empty AWS.
        import requests

        requests.post(f"http://{GATEWAY}:{MOTO_PORT}/moto-api/reset", timeout=10).raise_for_status()

    def client(self, service: str):
        return boto3.client(service, region_name=REGION, endpoint_url=f"http://{GATEWAY}:{MOTO_PORT}",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def hosts(self) -> list[str]:
        ghosts = [f"{SUBNET}.{200 + i}" for i in range(self.ghosts)]
        return [n.ip for n in self.nodes] + ghosts

    def _seed_cloud(self) -> None:
        """What `pulumi up` creates before the nodes boot (docs/bootstrap-contract.md), nothing more."""
        paths = Paths(self.name)
        ssm = self.client("ssm")
        ssm.put_parameter(Name=paths.hosts, Type="String", Value="\n".join(self.hosts()))
        ssm.put_parameter(Name=paths.fsx, Type="String",
                          Value=json.dumps({"dnsName": "fs-box.fsx.us-east-1.amazonaws.com", "mountName": "boxfs"}))
        names = ["head"] + [compute_node_name(i) for i in range(self.compute_count + self.ghosts)]
        for name in names:
            ssm.put_parameter(Name=paths.node(name), Type="String", Value='{"phase": "pending"}')
        self.client("secretsmanager").create_secret(Name=paths.ssh_secret, Description="box")

    def stop(self) -> None:
        for node in self.nodes:
            if node.bootstrap and node.bootstrap.poll() is None:
                node.bootstrap.kill()
        cleanup_leftovers()
        for node in self.nodes:
            if node.holder:
                node.holder.kill()
                node.holder.wait(timeout=10)
        if self.moto:
            self.moto.stop()
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- the bootstrap -------------------------------------------------------------------------------
    def boot(self, timeout: float = 300, wait: list[str] | None = None) -> dict[str, int]:
        """Run every node's bootstrap at once, as EC2 would; return the exit codes of the nodes
        named in `wait` (default: all)."""
        scripts = self.scripts()
        for node in self.nodes:
            path = self.workdir / f"bootstrap-{node.name}.sh"
            path.write_text(scripts["head" if node.index == 0 else "compute"])
            node.bootstrap = subprocess.Popen(node.enter("bash", str(path)), env=node_env(node),
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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

    def rerun(self, node: Node) -> int:
        path = self.workdir / f"bootstrap-{node.name}.sh"
        return subprocess.run(node.enter("bash", str(path)), env=node_env(node), capture_output=True,
                              timeout=300).returncode

    def status(self, node_name: str) -> dict:
        value = self.client("ssm").get_parameter(Name=Paths(self.name).node(node_name))["Parameter"]["Value"]
        return json.loads(value)

    def log(self, node: Node) -> str:
        path = node.file("/var/log/hpcc-bootstrap.log")
        return path.read_text() if path.exists() else ""


def fingerprint(node: Node, paths: list[str]) -> dict[str, tuple[str, float]]:
    """Content hash and mtime of every file under the given private paths."""
    out = {}
    for p in paths:
        base = node.file(p)
        files = [base] if base.is_file() else sorted(f for f in base.rglob("*") if f.is_file())
        for f in files:
            out[str(f)] = (hashlib.sha256(f.read_bytes()).hexdigest(), f.stat().st_mtime)
    return out
