"""A box node as the host sees it: its namespace, its private directories, the environment the box gives its
bootstrap (node_env), and whether this machine can run nodes at all (can_run). tests/box/harness.py's Box starts
and stops them."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.box.machine import GATEWAY, MOTO_PORT, PREFIX, sh

ENDPOINT = f"http://{GATEWAY}:{MOTO_PORT}"
REGION = "us-east-1"
VENV_BIN = Path(__file__).resolve().parents[2] / ".venv" / "bin"
PRIVATE = (
    "root",
    "etc/hpcc",
    "etc/ssh",
    "etc/profile.d",
    "run",
    "var/log",
    "usr/local/bin",
    "usr/local/sbin",
    "etc/munge",
    "etc/slurm",
    "var/lib/munge",
    "var/lib/slurm",  # Slurm and munge keep per-host state there
    "opt/hpcc",  # the bundles the loader unpacks and /opt/hpcc/current
    "var/lib/hpcc",
    "var/lib/prometheus",  # the head's Prometheus keeps its TSDB there (infra/render/prometheus.py DATA_PATH)
)  # the health checks' state (kernel-log offset, fatal Xids kept until a reboot)


def shared_under_root() -> list[Path]:
    """Host directories under /root a node still needs, read-only: the venv's interpreter may live there
    (pyenv), and the nodes run the venv's aws and torchrun."""
    real = Path(os.path.realpath(VENV_BIN / "python"))
    if real.is_relative_to("/root") and real != Path("/root"):
        return [Path("/root") / real.relative_to("/root").parts[0]]
    return []


def can_run() -> str | None:
    """None when this machine can run the box, else the reason it cannot."""
    if os.geteuid() != 0:
        return "needs root (network and mount namespaces)"
    for tool in ("ip", "unshare", "nsenter", "sshd", "ssh", "mpirun", "fi_info"):
        if not shutil.which(tool) and not Path(f"/usr/sbin/{tool}").exists():
            return f"needs {tool} (make deps installs it)"
    for tool in ("aws", "torchrun"):
        if not (VENV_BIN / tool).exists():
            return f"needs {VENV_BIN / tool} (make setup installs it)"
    probe = f"{PREFIX}-probe-{os.getpid()}"
    if sh("ip", "netns", "add", probe, check=False).returncode != 0:
        return "ip netns add is not permitted here"
    sh("ip", "netns", "del", probe, check=False)
    return None


@dataclass
class Node:
    name: str
    index: int  # the box's slot: namespace hpccbox-<index>, address .<10 + index>; 0 is the head
    ip: str
    root: Path  # this node's private directories live under here
    holder: subprocess.Popen | None = None  # `sleep infinity` holding the node's mount namespace
    bootstrap: subprocess.Popen | None = None
    instance_id: str = ""  # its EC2 instance in the moto server
    vpc_cidr: str = ""  # the "VPC" the node accepts addresses in (HPCC_VPC_CIDR): the box's subnet
    named_by_tag: bool = False  # a fleet node: no HPCC_NODE_NAME, it reads its hpcc:node tag (the contract)
    group: str = ""  # a fleet node's hpcc:group
    alive: bool = True  # False once its namespace is gone (killed or its instance terminated)
    boot_env: dict = field(default_factory=dict)  # what its bootstrap got besides node_env (a rerun gets it too)

    @property
    def netns(self) -> str:
        return f"{PREFIX}-{self.index}"

    @property
    def role(self) -> str:
        return "head" if self.index == 0 else "compute"

    def enter(self, *cmd: str) -> list[str]:
        return ["nsenter", "-t", str(self.holder.pid), "-m", "-n", "-u", *cmd]

    @property
    def script(self) -> str:
        return f"bootstrap-{self.netns}.sh"

    def run(self, *cmd: str, check: bool = False, timeout: float = 120, env: dict | None = None):
        return subprocess.run(
            self.enter(*cmd), capture_output=True, text=True, check=check, timeout=timeout, env=env or node_env(self)
        )

    def file(self, path: str) -> Path:
        """A node's file as the host sees it (e.g. /etc/hpcc/hostfile)."""
        rel = path.lstrip("/")
        for private in PRIVATE:
            if rel == private or rel.startswith(private + "/"):
                return self.root / rel
        return Path(path)


# What `pip install boto3==<pin>` puts into the head's controller environment (templates/steps/controller.sh.j2
# controller_python): the box has no PyPI, so it links the same packages from the tests' venv (requirements.txt pins
# the same boto3 as hpcc_node/controller/clients.py), into a venv of the node's own python3.
BOTO3_PACKAGES = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six.py")
CONTROLLER_ENV = "opt/hpcc/controller-env"


def provide_controller_env(root: Path) -> Path:
    """The head's /opt/hpcc/controller-env, as the controller step would have installed it; returns its python3."""
    env = root / CONTROLLER_ENV
    if not (env / "bin" / "python3").exists():
        sh("/usr/bin/python3", "-m", "venv", "--without-pip", str(env))
    site = next((env / "lib").glob("python3*/site-packages"))
    source = Path(
        subprocess.run(
            [str(VENV_BIN / "python"), "-c", "import boto3, pathlib; print(pathlib.Path(boto3.__file__).parents[1])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    for name in BOTO3_PACKAGES:
        link = site / name
        if not link.exists():
            link.symlink_to(source / name)
    return env / "bin" / "python3"


def node_env(node: Node) -> dict:
    """What the box gives a node's bootstrap: the contract's overrides and a local AWS."""
    env = {
        "PATH": f"{VENV_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "HPCC_NODE_NAME": node.name,
        "HPCC_INSTANCE_ID": node.instance_id,  # what IMDS would tell an instance
        "HPCC_NODE_IP": node.ip,
        "HPCC_SKIP_STEPS": "lustre,mount",  # no Lustre server in the box
        "HPCC_VPC_CIDR": node.vpc_cidr,  # the box's "VPC": its nodes' subnet, not the bridge's host address
        "AWS_ENDPOINT_URL": ENDPOINT,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        # No cgroups and 2 CPUs here, not the planned 64 (docs/bootstrap-contract.md): Slurm without cgroup plugins,
        # and slurmd reporting the planned CPUs and memory (SlurmdParameters=config_overrides).
        "HPCC_SLURM_CGROUP": "0",
        "HPCC_SLURM_CONFIG_OVERRIDES": "1",
        # slurmctld pings every 10 s instead of 40: the box's fleet tests see a dead node within seconds
        "HPCC_SLURMD_TIMEOUT": "30",
        # the agent writes its unchanged status every 10 s instead of 120 (the box controller's timeout is 90 s)
        "HPCC_HEARTBEAT_SECONDS": "10",
    }
    if node.named_by_tag:
        del env["HPCC_NODE_NAME"]
    return env


def hostname(node: Node) -> str:
    """A node's hostname (the box names its namespace's UTS after the instance it boots, before the controller
    names the node, as EC2's ip-a-b-c-d hostnames are not the node names either)."""
    return node.run("hostname", check=True).stdout.strip()
