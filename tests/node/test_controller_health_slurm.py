"""The health checks' Slurm side against a real slurmctld (Debian's slurm-wlm, on loopback, auth/none, no slurmd):
slurm.conf's health lines as the template renders them are accepted, and the controller's health commands
(health/act.py: the spares' reservation, scontrol reboot, requeue) do what the rules expect. Skipped where
slurmctld is not installed or the tests do not run as root."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

import pytest

from hpcc_node.controller.health.act import HealthActs
from hpcc_node.controller.health.observe import JOBS, RESERVATIONS, reservations
from hpcc_node.controller.model import REBOOT, SPARES, Action
from tests.render.bootstrap_shell import context, run
from tests.render.test_bootstrap_steps import COMMON

pytestmark = pytest.mark.skipif(
    shutil.which("slurmctld") is None or os.geteuid() != 0, reason="needs Debian's slurmctld and root"
)


def health_lines() -> list:
    out = run(COMMON + ["health"], "slurm_health_conf", context("p5-llm-head"))
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def slurmctld(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=hpcctest",
                "SlurmctldHost=localhost(127.0.0.1)",
                f"SlurmctldPort={_free_port()}",
                "SlurmUser=root",
                "AuthType=auth/none",
                f"StateSaveLocation={tmp_path}",
                "MailProg=/bin/true",
                f"SlurmctldPidFile={tmp_path}/ctld.pid",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                *health_lines(),
                "NodeName=gpu-[000-003] NodeAddr=127.0.0.1 CPUs=1",
                "PartitionName=gpu Nodes=ALL Default=YES",
                "",
            ]
        )
    )
    log = open(tmp_path / "out", "w")
    proc = subprocess.Popen(["slurmctld", "-D", "-f", str(conf)], stdout=log, stderr=subprocess.STDOUT)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    deadline = time.time() + 30
    while subprocess.run(["scontrol", "ping"], env=env, capture_output=True, text=True).stdout.count("UP") == 0:
        assert proc.poll() is None and time.time() < deadline, (tmp_path / "out").read_text()
        time.sleep(0.2)
    yield env, tmp_path / "out"
    proc.terminate()
    proc.wait(timeout=30)
    log.close()


def test_slurmctld_accepts_the_health_lines(slurmctld):
    _, out = slurmctld
    text = out.read_text()
    assert "started on cluster hpcctest" in text
    assert not [line for line in text.splitlines() if "Invalid" in line or "unrecognized" in line or "fatal" in line]


class Real(HealthActs):
    def __init__(self, env):
        self.env, self.ec2 = env, None
        self.slurm = lambda argv: subprocess.run(argv, env=env, check=True, capture_output=True, text=True)

    def read(self, argv):
        return subprocess.run(argv, env=self.env, check=True, capture_output=True, text=True).stdout


def test_the_spares_reservation_is_created_moved_and_deleted(slurmctld):
    env, _ = slurmctld
    r = Real(env)
    spares = dict(group="gpu", data={"reservation": "hpcc-spares-gpu", "nodes": ["gpu-003"], "exists": False})
    r._spares(Action(SPARES, **spares))
    assert reservations(r.read(RESERVATIONS)) == {"hpcc-spares-gpu": frozenset({"gpu-003"})}
    r._spares(
        Action(
            SPARES,
            group="gpu",
            data={"reservation": "hpcc-spares-gpu", "nodes": ["gpu-001", "gpu-002"], "exists": True},
        )
    )
    assert reservations(r.read(RESERVATIONS)) == {"hpcc-spares-gpu": frozenset({"gpu-001", "gpu-002"})}
    r._spares(Action(SPARES, group="gpu", data={"reservation": "hpcc-spares-gpu", "nodes": [], "exists": True}))
    assert reservations(r.read(RESERVATIONS)) == {}


def test_a_reboot_is_requested_with_the_hpcc_reason_and_comes_back_down(slurmctld):
    env, _ = slurmctld
    r = Real(env)
    r._reboot(
        Action(
            REBOOT,
            node="gpu-001",
            instance_id="i-1",
            data={"reason": "hpcc: reboot for reset: xid: Xid 79 on PCI:0000:53:00", "via": "slurm"},
        )
    )
    node = r.read(["scontrol", "show", "node", "gpu-001", "--oneliner"])
    assert "REBOOT_REQUESTED" in node and "NextState=DOWN" in node
    assert "Reason=hpcc: reboot for reset: xid: Xid 79 on PCI:0000:53:00" in node


def test_requeue_of_a_job_slurm_does_not_know_fails_loudly(slurmctld):
    env, _ = slurmctld
    r = Real(env)
    with pytest.raises(subprocess.CalledProcessError):
        r._requeue(Action("requeue", node="gpu-001", data={"job": "99"}))
    assert "No jobs in the system" in r.read(JOBS)
