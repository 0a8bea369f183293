"""The box's machine layer: nodes as network namespaces on a bridge, each with a private mount namespace, its own
hostname and sshd, and a moto server as their AWS. tests/box/cloud.py's FleetBox builds the small cloud on it
(the program's plan seeded, the head, the controller's launches).

What a node keeps to itself (bind mounts inside its mount namespace): /root, /etc/hpcc, /etc/ssh (a copy of the
host's with the node's own host keys), /etc/profile.d, /run, /var/log, /usr/local/bin and /usr/local/sbin, and
what Slurm, munge and the bundles keep (tests/box/node.py PRIVATE); everything else (/usr, /tmp, the venv) is the
host's. See tests/box/README.md.

Only one box runs on a machine at a time (fixed bridge, addresses and port): `start()` takes a lock, and under it
removes whatever a crashed earlier box left behind.
"""

from __future__ import annotations

import atexit
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import boto3

from tests.box.machine import (
    BRIDGE,
    GATEWAY,
    MOTO_PORT,
    MOUNTPOINTS_MADE,
    NETWORK,
    PREFIX,
    TMP_PREFIX,
    VETH,
    Lock,
    cleanup_leftovers,
    sh,
)
from tests.box.node import ENDPOINT, PRIVATE, REGION, Node, node_env, shared_under_root
from tests.facts.instance_data import facts_for as lookup

COPIED = (
    "etc/ssh",
    "etc/profile.d",
    "usr/local/bin",
    "usr/local/sbin",
    "etc/slurm",
)  # start as the host's, then diverge
BOX_AMI = "ami-0b0c0b0c0b0c0b0c0"  # moto runs any image id; the box's "instances" only carry tags and ids
PREFIX_LENGTH = NETWORK.split("/")[1]

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
    """The machine under a small cloud: the bridge, the moto server, and the namespace nodes started on it."""

    profile: str = "cpu"
    name: str = "box"
    nodes: list[Node] = field(default_factory=list)
    workdir: Path | None = None
    moto: object = None
    lock: Lock = field(default_factory=Lock)

    @property
    def slots(self) -> int:
        return lookup(PROFILES[self.profile][1]).slots

    @property
    def head(self) -> Node:
        return self.nodes[0]

    @property
    def compute(self) -> list[Node]:
        return self.nodes[1:]

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    # -- start and stop ------------------------------------------------------------------------------
    def _bridge_up(self) -> None:
        """A clean machine (a crashed box's leftovers gone), the box's work directory and its bridge."""
        self.lock.acquire()
        atexit.register(self.stop)  # also when the test process is interrupted
        cleanup_leftovers()
        self.workdir = Path(tempfile.mkdtemp(prefix=TMP_PREFIX))
        self.workdir.chmod(0o755)
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", f"{GATEWAY}/{PREFIX_LENGTH}", "dev", BRIDGE)
        sh("ip", "link", "set", BRIDGE, "up")

    def _mountpoint(self, path: Path) -> None:
        """A host directory to bind a node's private one onto; stays empty on the host, removed at cleanup."""
        if not path.exists():
            path.mkdir(parents=True)
            with MOUNTPOINTS_MADE.open("a") as made:
                made.write(f"{path}\n")

    def _start_node(self, index: int, name: str, ip: str, instance_id: str, **fields) -> Node:
        """A namespace node at `ip` (its instance's address in moto), bridged, with its private directories, its
        own hostname, cgroup stand-in and sshd."""
        node = Node(name, index, ip, self.workdir / f"{name}.{index}", instance_id=instance_id, **fields)
        ns, veth = node.netns, f"{VETH}{index}"
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", veth, "master", BRIDGE, "up")
        sh("ip", "-n", ns, "addr", "add", f"{node.ip}/{PREFIX_LENGTH}", "dev", "eth0")
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
    def start_bootstrap(self, node: Node, script: str, env: dict | None = None) -> None:
        """`script` (the node's user data) run as root in the node, as EC2 would; whatever it prints before its
        own log takes over goes to <workdir>/bootstrap-<netns>.sh.out."""
        path = self.workdir / node.script
        path.write_text(script)
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

    def log(self, node: Node) -> str:
        path = node.file("/var/log/hpcc-bootstrap.log")
        return path.read_text(errors="replace") if path.exists() else ""

    def diagnose(self) -> str:
        """The tail of every node's log, for assertion messages."""
        return "\n".join(f"--- {n.name}\n" + "\n".join(self.log(n).splitlines()[-25:]) for n in self.nodes)
