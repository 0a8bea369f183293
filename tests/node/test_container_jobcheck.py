"""The image service's job check (hpcc_node/containers/jobcheck.py): a caller is accepted only when its own cgroup,
as /proc/<pid>/cgroup shows it, is Slurm's cgroup of the job it names (cgroup v1 with the caller's uid in the path,
cgroup v2 under slurmstepd's scope); on a node without cgroups, when Slurm itself says so (scontrol pidinfo, and
the job's owner from squeue's JSON); refused for everything else."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from hpcc_contract import containers as c
from hpcc_node.containers.jobcheck import in_job, job_owner, pidinfo_job, read_proc_cgroup, slurm_job_check
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

    asked = []
    check = slurm_job_check(read, run=lambda argv: asked.append(argv))  # Slurm answers nothing
    assert check(Peer(7, 1000, 1000), "42")
    assert not check(Peer(8, 1000, 1000), "42")
    assert not check(Peer(9, 1000, 1000), "42")  # gone: no file
    assert seen == [7, 8, 9]
    assert asked == [
        ["scontrol", "pidinfo", "8"]
    ]  # only the process in no Slurm cgroup: Slurm asked, and it said nothing


# Slurm's answers: scontrol pidinfo as 22.05 prints it (the box's, src/scontrol/info_job.c scontrol_pid_info) and as
# later releases do (the step too); squeue --json's job_id and user_id (openapi v0.0.38 and later)
PIDINFO_42 = "Slurm JobId=42 ends at Wed Dec 01 03:47:45 2027\nJob remaining time is 31535996 seconds\n"
PIDINFO_42_STEP = "Slurm JobId=42.batch ends at Wed Dec 01 03:47:45 2027\nJob remaining time is 31535996 seconds\n"
OWNED_BY_1000 = '{"jobs": [{"job_id": 42, "user_id": 1000, "name": "train; rm -rf /"}]}'


class Slurm:
    """scontrol as a node's slurmd and slurmctld would answer: pid -> job, job -> owner's uid."""

    def __init__(self, jobs_of: dict, owners: dict) -> None:
        self.jobs_of, self.owners, self.calls = jobs_of, owners, []

    def __call__(self, argv):
        self.calls.append(list(argv))
        if argv[:2] == ["scontrol", "pidinfo"]:
            job = self.jobs_of.get(int(argv[2]))
            return f"Slurm JobId={job} ends at Tue Dec 01 02:00:00 2026\n" if job else None
        assert argv[:3] == ["squeue", "--json", "--jobs"], argv
        owner = self.owners.get(argv[3])
        return None if owner is None else f'{{"jobs": [{{"job_id": {argv[3]}, "user_id": {owner}}}]}}'


def test_on_a_node_without_cgroups_slurm_says_which_job_runs_the_caller_and_whose_it_is():
    slurm = Slurm({7: "42", 8: "43"}, {"42": 1000, "43": 2000})
    check = slurm_job_check(lambda pid: NOT_A_JOB, run=slurm)
    assert check(Peer(7, 1000, 1000), "42")
    assert slurm.calls == [["scontrol", "pidinfo", "7"], ["squeue", "--json", "--jobs", "42"]]
    assert not check(Peer(7, 1000, 1000), "43")  # its process runs job 42, not the one it names
    assert not check(Peer(7, 2000, 2000), "42")  # job 42 is uid 1000's
    assert not check(Peer(9, 1000, 1000), "42")  # Slurm knows no job of pid 9
    assert not check(Peer(7, 1000, 1000), "42; true")  # not a job id: Slurm not asked
    assert ["scontrol", "pidinfo", "7"] in slurm.calls and not any(
        "42; true" in a for call in slurm.calls for a in call
    )


def test_a_cgroup_of_another_job_is_refused_without_asking_slurm():
    slurm = Slurm({7: "42"}, {"42": 1000})
    check = slurm_job_check(lambda pid: V2_TASK.replace("job_42", "job_43"), run=slurm)
    assert not check(Peer(7, 1000, 1000), "42")
    assert slurm.calls == []


def test_scontrols_answers_are_read_as_slurm_prints_them():
    assert pidinfo_job(PIDINFO_42) == "42" and pidinfo_job(PIDINFO_42_STEP) == "42"
    assert pidinfo_job("Slurm JobId=42_3 ends at Wed Dec 01 03:47:45 2027\n") is None  # no array form in a pidinfo
    assert pidinfo_job("slurm_pid2jobid error: Process not managed by Slurm\n") is None
    assert job_owner(OWNED_BY_1000, "42") == 1000
    assert job_owner(OWNED_BY_1000, "4") is None  # another job's entry is not this one's
    assert job_owner('{"jobs": [{"job_id": 42, "user_id": "1000"}]}', "42") is None  # not a number
    assert job_owner("not json", "42") is None and job_owner("[]", "42") is None


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
        str(tmp_path / "s.sock"), lambda ref, job: ensured.append(ref) or "/x", slurm_job_check(), lambda r: None, "n1"
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
