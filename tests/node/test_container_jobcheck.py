"""The image service's job check (hpcc_node/containers/jobcheck.py): a caller is accepted only when its own cgroup,
as /proc/<pid>/cgroup shows it, is Slurm's cgroup of the job it names (cgroup v1 with the caller's uid in the path,
cgroup v2 under slurmstepd's scope), and refused for everything else."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from hpcc_contract import containers as c
from hpcc_node.containers.jobcheck import in_job, read_proc_cgroup, slurm_job_check
from hpcc_node.containers.service import ImageService, Peer

# What /proc/<pid>/cgroup holds for a task of job 42 of uid 1000, per Slurm's layouts (cgroups(7)'s line format).
V1_TASK = (
    "12:pids:/system.slice/slurmd.service\n"
    "11:freezer:/slurm/uid_1000/job_42/step_0/task_0\n"
    "10:memory:/slurm/uid_1000/job_42/step_0/task_0\n"
    "4:cpuset:/slurm/uid_1000/job_42/step_0\n"
    "1:name=systemd:/system.slice/slurmd.service\n"
)
V2_TASK = "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n"
V2_STEPD_CHILD = "0::/system.slice/slurmstepd.scope/job_42/step_batch/slurm\n"  # where pyxis' importer runs
V2_MULTI_SLURMD = "0::/system.slice/node7_slurmstepd.scope/job_42/step_extern/user/task_special\n"
NOT_A_JOB = "0::/user.slice/user-1000.slice/session-3.scope\n"
STEPD_ITSELF = "0::/system.slice/slurmstepd.scope/system\n"


@pytest.mark.parametrize("text", [V1_TASK, V2_TASK, V2_STEPD_CHILD, V2_MULTI_SLURMD])
def test_a_process_in_the_jobs_cgroup_is_accepted(text):
    assert in_job(text, "42", 1000)


@pytest.mark.parametrize(
    "text, job, uid",
    [
        (V1_TASK, "43", 1000),  # another job
        (V1_TASK, "4", 1000),  # a prefix of the job's id
        (V1_TASK.replace("job_42", "job_420"), "42", 1000),  # the job's id a prefix of another's
        (V1_TASK, "42", 1001),  # cgroup v1: the job belongs to another uid
        (V2_TASK, "43", 1000),
        (V2_TASK.replace("job_42", "job_421"), "42", 1000),
        (NOT_A_JOB, "42", 1000),  # a login session, no job
        (STEPD_ITSELF, "42", 1000),
        ("", "42", 1000),
        ("garbage without colons\n", "42", 1000),
        (V2_TASK, "42_1", 1000),  # an array task's id: SLURM_JOB_ID is numeric, no cgroup is named so
        (V2_TASK, "42+1", 1000),
        (V2_TASK, "", 1000),
        (V2_TASK + "1:freezer:/slurm/uid_1000/job_43/step_0\n", "42", 1000),  # two jobs' cgroups: neither's
        ("0::/kubepods/job_42/step_0\n", "42", 1000),  # job_ under a hierarchy not Slurm's: no guess
        ("0::/system.slice/slurmstepd.scope/job_42\n", "42", 1000),  # the job's own cgroup, in no step
        (V2_TASK * 5000, "42", 1000),  # larger than any real file
    ],
)
def test_anything_else_is_refused(text, job, uid):
    assert not in_job(text, job, uid)


def test_the_check_reads_the_callers_own_cgroup_by_pid_and_refuses_a_pid_without_one():
    files = {7: V2_TASK, 8: NOT_A_JOB}
    seen = []

    def read(pid):
        seen.append(pid)
        return files.get(pid)

    check = slurm_job_check(read)
    assert check(Peer(7, 1000, 1000), "42")
    assert not check(Peer(8, 1000, 1000), "42")
    assert not check(Peer(9, 1000, 1000), "42")  # gone: no file
    assert seen == [7, 8, 9]


def test_the_real_reader_reads_proc_and_a_missing_process_is_none(tmp_path):
    (tmp_path / "5").mkdir()
    (tmp_path / "5" / "cgroup").write_text(V1_TASK)
    assert read_proc_cgroup(5, str(tmp_path)) == V1_TASK
    assert read_proc_cgroup(6, str(tmp_path)) is None
    assert read_proc_cgroup(0, str(tmp_path)) is None
    assert read_proc_cgroup(os.getpid()) is not None  # this process's own, from the real /proc


def test_the_service_refuses_a_caller_outside_the_job_with_the_real_check(tmp_path):
    """The service with the real check: this test process is in no Slurm job, so its request is refused by name
    and nothing is imported."""
    ensured = []
    service = ImageService(
        str(tmp_path / "s.sock"), lambda ref: ensured.append(ref) or "/x", slurm_job_check(), lambda r: None, "n1"
    )
    service.bind()
    thread = threading.Thread(target=service.serve, daemon=True)
    thread.start()
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(str(tmp_path / "s.sock"))
        sock.sendall(c.dumps_request(c.ImageRequest("ubuntu:22.04", "42")))
        answer = c.loads_answer(sock.makefile("rb").readline().rstrip(b"\n"))
        sock.close()
    finally:
        service.close()
    assert answer.path is None and f"uid {os.getuid()} runs no Slurm job 42 on this node" in answer.error
    assert ensured == []
