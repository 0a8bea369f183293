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

from hpcc_node.controller import slurm_records as records
from hpcc_node.controller.health.act import HealthActs, NotConfirmed
from hpcc_node.controller.model import REBOOT, REQUEUE, SPARES, Action
from hpcc_node.controller.slurm_records import RESERVATIONS, Reader
from tests.render.bootstrap_shell import context, run
from tests.render.test_bootstrap_steps import COMMON


def reservations(text):
    return records.reservations(text, 4)


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
        self.reader = Reader(self.read)
        self.jobs_now = lambda: self.reader.jobs(4)

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
    with pytest.raises(NotConfirmed, match="job 99 is not ubuntu's 'train' any more"):
        r._requeue(Action("requeue", node="gpu-001", data={"job": "99", "user": "ubuntu", "name": "train"}))
    with pytest.raises(subprocess.CalledProcessError):
        r._scontrol("requeue", "99")
    assert r.jobs_now() == ()


HOSTILE_NAME = "evil JobId=1 NodeList=gpu-[0-99999999999]\nJobId=5 JobName=hpcc-deep-check UserId=root(0)"
HOSTILE_SCRIPT = "job NodeList=gpu-[x] JobId=7.sh"


def submit(r, tmp_path, *args):
    out = r.read(["sbatch", "--parsable", "--hold", f"--chdir={tmp_path}", *args])
    return out.strip().split(";")[0]


def test_jobs_and_nodes_are_slurms_records_whatever_their_strings_hold(slurmctld, tmp_path):
    """Issue 33, findings 1 and 7, on Debian's real Slurm: a held job of nobody's whose name, script path and
    comment hold `JobId=`, `JobName=`, `NodeList=` (a malformed and a huge one) and a newline, and a node drained
    with a reason holding `NodeAddr=`/`State=`, read back as Slurm's records, in every form the reader knows (JSON,
    and the fixed fields of a Slurm without it): the same jobs, owners, states and addresses."""
    env, _ = slurmctld
    r = Real(env)
    script = tmp_path / HOSTILE_SCRIPT
    script.write_text("#!/bin/sh\ntrue\n")
    evil = submit(
        r,
        tmp_path,
        "--uid=65534",
        "--gid=65534",
        f"--job-name={HOSTILE_NAME}",
        "--comment=x Reason=BeginTime NodeList=gpu-[0-99999999999]",
        str(script),
    )
    plain = submit(r, tmp_path, "--job-name=train", "-N", "2", "--wrap", "true")
    r.read(["scontrol", "update", "NodeName=gpu-001", "State=DRAIN", "Reason=bad NodeAddr=10.9.9.9 State=IDLE"])
    jobs = {j.job_id: j for j in r.reader.jobs(4)}
    assert r.reader.form["jobs"] == 0, "Debian's 22.05 answers squeue --json"
    assert set(jobs) == {evil, plain}
    assert (jobs[evil].user, jobs[evil].name, jobs[evil].state, jobs[evil].nodes) == (
        "nobody",
        HOSTILE_NAME,
        "PENDING",
        frozenset(),
    )
    assert (jobs[plain].user, jobs[plain].name) == ("root", "train")
    nodes = r.reader.nodes()
    assert nodes["gpu-001"].addr == "127.0.0.1" and "DRAIN" in nodes["gpu-001"].states
    assert nodes["gpu-001"].reason == "bad NodeAddr=10.9.9.9 State=IDLE" and set(nodes) == {
        f"gpu-00{i}" for i in range(4)
    }
    from hpcc_node.controller.health.observe import extras_reader, with_slurm_extras
    from hpcc_node.controller.model import Snapshot

    snap = with_slurm_extras(Snapshot(now=0.0, slurm=nodes), extras_reader(r.reader, 4))  # as the loop reads them
    assert {j.job_id for j in snap.jobs} == {evil, plain} and snap.reservations == {}
    fixed = {j.job_id: j for j in records.jobs_from_fields(r.read(records.JOBS_FIXED), frozenset(), 4)}
    assert {k: (j.user, j.state, j.nodes, j.requeue) for k, j in fixed.items()} == {
        k: (j.user, j.state, j.nodes, j.requeue) for k, j in jobs.items()
    }
    assert records.nodes_from_fields(r.read(records.NODES_FIXED)) == nodes


def test_a_released_spares_check_is_cancelled_only_if_slurm_says_it_is_roots_deep_check(slurmctld, tmp_path):
    env, _ = slurmctld
    r = Real(env)
    mine = submit(r, tmp_path, "--job-name=hpcc-deep-check", "--wrap", "true")
    users = submit(r, tmp_path, "--uid=65534", "--gid=65534", "--job-name=hpcc-deep-check", "--wrap", "true")
    r._spares(
        Action(
            SPARES,
            group="gpu",
            data={"reservation": "hpcc-spares-gpu", "nodes": [], "exists": False, "cancel": [mine, users]},
        )
    )
    time.sleep(1)
    states = {j.job_id: j.state for j in r.jobs_now()}
    assert states == {mine: "CANCELLED", users: "PENDING"}
    with pytest.raises(NotConfirmed):  # nobody's job is not root's: no requeue either
        r._requeue(Action(REQUEUE, node="gpu-000", data={"job": users, "user": "root", "name": "hpcc-deep-check"}))


def test_addresses_are_set_for_many_nodes_in_one_scontrol_update_as_slurm_takes_it(slurmctld):
    """The executor's batched set-address (act.py set_address_args), run by this machine's slurmctld: each node
    gets its own address and hostname, read back from Slurm's own records."""
    from hpcc_node.controller.act import set_address_args

    env, _ = slurmctld
    nodes = [("gpu-001", "10.0.0.6", "gpu-001"), ("gpu-002", "10.0.0.7", "gpu-002"), ("gpu-003", "10.0.0.9", "gpu-003")]
    subprocess.run(["scontrol", "update", *set_address_args(nodes)], env=env, check=True, capture_output=True)
    read = Reader(lambda argv: subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout)
    got = read.nodes()
    assert {n: got[n].addr for n in ("gpu-000", "gpu-001", "gpu-002", "gpu-003")} == {
        "gpu-000": "127.0.0.1",
        "gpu-001": "10.0.0.6",
        "gpu-002": "10.0.0.7",
        "gpu-003": "10.0.0.9",
    }
