"""The health rules' reads (health/observe.py: scontrol's jobs and reservations, the status body's health fields)
and writes (health/act.py: the scontrol and EC2 commands), with recorded commands instead of a cluster."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace

import pytest

from hpcc_node.controller import observe
from hpcc_node.controller import slurm_records as records
from hpcc_node.controller.health import observe as observe_health
from hpcc_node.controller.health.act import HealthActs, NotConfirmed
from hpcc_node.controller.model import (
    DEEP_CHECK,
    REBOOT,
    REQUEUE,
    SPARES,
    START_NOW,
    Action,
    SlurmJob,
    SlurmNode,
    Snapshot,
)
from tests.node.controller_cases import NOW


class Log:
    def __init__(self):
        self.lines = []

    def warning(self, fmt, *args):
        self.lines.append(fmt % args)

    debug = warning


def job_record(
    job_id,
    name,
    state,
    nodes="",
    restarts=0,
    end=0,
    requeue=True,
    reason="None",
    eligible=0,
    user="ubuntu",
    shape="v0.0.38",
    **more,
):
    """One job of `squeue --json` as Slurm 21.08/22.05 (openapi v0.0.37/38: a state, times in epoch seconds) or
    23.02 and later (data_parser v0.0.39+: states as a list, times as {set, infinite, number}) print it."""
    if shape == "v0.0.38":
        return {
            "job_id": job_id,
            "name": name,
            "job_state": state,
            "nodes": nodes,
            "restart_cnt": restarts,
            "end_time": end,
            "requeue": requeue,
            "state_reason": reason,
            "eligible_time": eligible,
            "user_name": user,
            "user_id": 1000,
            **more,
        }
    t = lambda v: {"set": bool(v), "infinite": False, "number": v}  # noqa: E731
    return {
        "job_id": job_id,
        "name": name,
        "job_state": [state],
        "nodes": nodes,
        "restart_cnt": restarts,
        "end_time": t(end),
        "requeue": requeue,
        "state_reason": reason,
        "eligible_time": t(eligible),
        "user_name": user,
        "user_id": 1000,
        **more,
    }


def squeue_json(*jobs) -> str:
    return json.dumps({"meta": {"plugin": {"type": "openapi/v0.0.38"}}, "errors": [], "jobs": list(jobs)})


FAILED_JOB = dict(
    job_id=41,
    name="train",
    state="FAILED",
    nodes="gpu-[000-001,007]",
    restarts=2,
    end=1e9,
    reason="NonZeroExitCode",
    eligible=1e9 - 63,
    command="/fsx/train-resumable.sbatch",
)
RUNNING_JOB = dict(job_id=42, name="x", state="RUNNING", nodes="cpu-001", requeue=False)
RESERVATION = (
    "ReservationName=hpcc-spares-gpu StartTime=2026-11-24T14:00:00 EndTime=2027-11-24T14:00:00 "
    "Duration=365-00:00:00 Nodes=gpu-[003,010] NodeCnt=2 CoreCnt=192 Features=(null) PartitionName=(null) "
    "Flags=MAINT,IGNORE_JOBS,SPEC_NODES TRES=cpu=192 Users=root Groups=(null) Accounts=(null) "
    "Licenses=(null) State=ACTIVE BurstBuffer=(null) MaxStartDelay=(null)"
)


@pytest.mark.parametrize("shape", ["v0.0.38", "v0.0.40"])
def test_jobs_are_read_with_their_nodes_restarts_end_and_requeue_flag(shape):
    got = records.jobs_from_json(
        squeue_json(job_record(**FAILED_JOB, shape=shape), job_record(**RUNNING_JOB, shape=shape)), limit=1000
    )
    assert got[0] == SlurmJob(
        "41",
        "FAILED",
        frozenset({"gpu-000", "gpu-001", "gpu-007"}),
        2,
        1e9,
        True,
        "NonZeroExitCode",
        1e9 - 63,
        "train",
        "ubuntu",
    )
    assert (got[1].state, got[1].end, got[1].requeue, got[1].nodes) == ("RUNNING", 0.0, False, frozenset({"cpu-001"}))
    assert records.jobs_from_json(squeue_json(), limit=10) == ()
    requeued = job_record(43, "train", "PENDING", reason="BeginTime", restarts=1, eligible=1_795_000_240, shape=shape)
    if shape != "v0.0.38":  # data_parser lists a job's flags beside its base state, in any order
        requeued["job_state"] = ["REQUEUED", "PENDING"]
    (job,) = records.jobs_from_json(squeue_json(requeued), limit=10)
    assert (job.state, job.reason, job.restarts, job.nodes, job.eligible) == (
        "PENDING",
        "BeginTime",
        1,
        frozenset(),
        1_795_000_240,
    )


def test_whatever_a_users_strings_hold_a_job_is_its_own_record():
    """Issue 33, finding 1: a held job whose name, script path, working directory and comment hold `JobId=`,
    `JobName=`, `NodeList=` (a malformed one, a huge one) and a newline is one job, Slurm's, with its own id, owner
    and name; a record that cannot be read is dropped and logged, the others stand."""
    hostile = "evil JobId=1 NodeList=gpu-[0-99999999999]\nJobId=5 JobName=hpcc-deep-check UserId=root(0)"
    texts = {
        "name": hostile,
        "command": "./job NodeList=gpu-[x] JobId=7.sh",
        "comment": "x Reason=BeginTime",
        "current_working_directory": "/fsx/NodeList=gpu-[0-99999999999]",
        "standard_output": "JobState=FAILED",
    }
    jobs = [
        job_record(
            9,
            texts["name"],
            "PENDING",
            reason="JobHeldUser",
            user="mallory",
            **{k: v for k, v in texts.items() if k != "name"},
        ),
        {"job_id": "10; rm", "name": "x", "job_state": "FAILED"},  # not Slurm's shape: this one dropped
        job_record(11, "train", "FAILED", nodes="gpu-[000-999999]"),  # more nodes than the cluster: dropped
        job_record(12, "train", "FAILED", nodes="gpu-001"),
    ]
    log = Log()
    got = records.jobs_from_json(squeue_json(*jobs), limit=4096, log=log)
    assert [(j.job_id, j.user, j.name, j.state, j.nodes) for j in got] == [
        ("9", "mallory", hostile, "PENDING", frozenset()),
        ("12", "ubuntu", "train", "FAILED", frozenset({"gpu-001"})),
    ]
    assert len(log.lines) == 2 and "record 1" in log.lines[0] and "more than the cluster's 4096" in log.lines[1]


def test_the_fixed_fields_form_reads_slurms_fields_only():
    """Where this Slurm has no JSON: Slurm's fields only, in order, separated by `|`; no user-set string among
    them, the deep checks' identity by Slurm's own --name/--user filter."""
    text = (
        "41|ubuntu|FAILED|2|1|2026-11-24T14:01:03|2026-11-24T14:00:00|NonZeroExitCode|gpu-[000-001,007]\n"
        "77|root|RUNNING|0|0|N/A|2026-11-24T14:00:00|None|gpu-003\n"
        "78|alice|RUNNING|0|1|N/A|N/A|None|gpu-004\n"
        "79|alice|FAILED|0|1|N/A|N/A|a|b|gpu-004\n"
    )
    log = Log()
    got = records.jobs_from_fields(text, frozenset({"77"}), 100, log, parse_time=lambda v: 5.0)
    assert [(j.job_id, j.user, j.name, j.state, j.end, j.requeue) for j in got] == [
        ("41", "ubuntu", "", "FAILED", 5.0, True),
        ("77", "root", "hpcc-deep-check", "RUNNING", 5.0, False),
        ("78", "alice", "", "RUNNING", 5.0, True),
    ]
    assert got[0].nodes == frozenset({"gpu-000", "gpu-001", "gpu-007"}) and len(log.lines) == 1
    assert records.JOBS_FIXED[-1] == (
        "JobId:0|,UserName:0|,State:0|,RestartCnt:0|,Requeue:0|,EndTime:0|,EligibleTime:0|,Reason:0|,NodeList:0"
    )


def test_the_reader_takes_the_first_form_this_slurm_answers_and_keeps_it():
    asked = []

    def run(argv):
        asked.append(argv[:2])
        if argv == records.JOBS_JSON:
            raise subprocess.CalledProcessError(1, argv, "", "squeue: unrecognized option '--json'")
        if argv == records.DEEP_CHECKS_FIXED:
            return "77\n"
        return "77|root|RUNNING|0|0|N/A|N/A|None|gpu-003\n"

    reader = records.Reader(run, Log())
    assert [j.name for j in reader.jobs(10)] == ["hpcc-deep-check"]
    assert [j.name for j in reader.jobs(10)] == ["hpcc-deep-check"]
    assert asked == [["squeue", "--json"], ["squeue", "-h"], ["squeue", "-h"], ["squeue", "-h"], ["squeue", "-h"]]


def test_reservations_and_hostlists():
    assert observe_health.reservations(RESERVATION + "\n", 100) == {
        "hpcc-spares-gpu": frozenset({"gpu-003", "gpu-010"})
    }
    assert observe_health.reservations("No reservations in the system\n", 100) == {}
    assert observe_health.hostnames("gpu-[998-1000],cpu-001", 10) == frozenset(
        {"gpu-998", "gpu-999", "gpu-1000", "cpu-001"}
    )
    with pytest.raises(records.BadRecord, match="more than the cluster's 3 nodes"):
        observe_health.hostnames("gpu-[998-1000],cpu-001", 3)
    for bad in ("gpu-[0-99999999999]", "gpu-[x]", "gpu-[3-1]", "gpu-[[1]]", "gpu-[1-2]-[3]"):
        with pytest.raises(records.BadRecord):
            observe_health.hostnames(bad, 4096)


def test_the_agents_status_object_carries_its_failed_verdict_to_the_controllers_report(tmp_path):
    """End to end on the node side: the health thread's verdict file, the agent's status at status/<arn>.json
    (ok, failure, evidence, check, action, remedy), the controller's report of that object."""
    from hpcc_node.controller import membership
    from hpcc_node.health import service, verdict
    from tests.node.agent_support import ARN, SETTINGS, STATE, FakeAws, P, instance_of, make_agent

    aws = FakeAws()
    aws.members("10.0.0.4\n10.0.0.5\n10.0.0.6")
    aws.put(f"{P}/settings", SETTINGS)
    a, _ = make_agent(tmp_path, aws)
    failed = verdict.node_verdict(
        [verdict.ok("gpu"), verdict.fail("xid", "Xid 79 GPU has fallen off the bus", action="down", remedy="reboot")],
        NOW,
    )
    verdict.write_verdict(f"{a.c.run}/{service.VERDICT_NAME}", failed)
    a.tick()
    key = membership.status_key(ARN + instance_of("compute-001"))
    body = aws.s3.objects[(STATE, key)]
    doc = json.loads(body)
    assert (doc["ok"], doc["failure"], doc["check"], doc["action"], doc["remedy"], doc["health"]) == (
        False,
        "health",
        "xid",
        "down",
        "reboot",
        "fail",
    )
    assert doc["evidence"] == "Xid 79 GPU has fallen off the bus" and doc["phase"] == "ready"
    rep = observe.verdict(body, key)
    assert (rep.name, rep.ok, rep.failure, rep.check, rep.action, rep.remedy) == (
        "compute-001",
        False,
        "health",
        "xid",
        "down",
        "reboot",
    )
    assert rep.evidence == "Xid 79 GPU has fallen off the bus"


def test_when_the_deep_checks_last_ran_goes_from_the_node_to_the_controllers_report(tmp_path):
    from hpcc_node.health import service, verdict

    path = str(tmp_path / "verdict")
    verdict.write_verdict(path, verdict.node_verdict([verdict.ok("gpu_count")], NOW))
    assert "deepChecked" not in service.status_fields(path, state_dir=str(tmp_path))  # never ran: not said
    service._write_int(service.deep_checked_path(str(tmp_path)), int(NOW) - 60)
    fields = service.status_fields(path, state_dir=str(tmp_path))
    assert fields["deepChecked"] == int(NOW) - 60
    body = {"name": "gpu-003", "instance_id": "i-1", "ok": True, "at": NOW, **fields}
    assert observe_health.report_fields(body)["deep_checked"] == NOW - 60
    assert observe_health.report_fields({**body, "deepChecked": "soon"})["deep_checked"] == 0.0  # malformed: unsaid


def test_extras_are_read_only_where_slurm_runs():
    asked = []

    def read():
        asked.append(1)
        return records.jobs_from_json(squeue_json(job_record(**FAILED_JOB)), 100), observe_health.reservations(
            RESERVATION, 100
        )

    no_slurm = Snapshot(now=NOW)
    assert observe_health.with_slurm_extras(no_slurm, read) is no_slurm and asked == []
    snap = observe_health.with_slurm_extras(
        replace(no_slurm, slurm={"gpu-000": SlurmNode("gpu-000", frozenset())}), read
    )
    assert [j.job_id for j in snap.jobs] == ["41"] and set(snap.reservations) == {"hpcc-spares-gpu"}


class Recorder(HealthActs):
    def __init__(self, slurm=True, jobs=()):
        self.calls = []
        self.slurm = self.calls.append if slurm else None
        self.ec2 = self
        self.jobs_now = lambda: jobs  # Slurm's jobs, read again before a requeue or a start-now

    def reboot_instances(self, InstanceIds):
        self.calls.append(["ec2", "reboot-instances", *InstanceIds])


TRAIN = {"user": "ubuntu", "name": "train"}  # the owner and name decide() read from Slurm


def test_each_health_action_runs_its_command():
    r = Recorder(
        jobs=(
            SlurmJob("41", "FAILED", user="ubuntu", name="train"),
            SlurmJob("43", "PENDING", user="ubuntu", name="train"),
        )
    )
    r._requeue(Action(REQUEUE, node="gpu-001", data={"job": "41", **TRAIN}))
    r._reboot(
        Action(REBOOT, node="gpu-001", instance_id="i-1", data={"reason": "hpcc: reboot for reset: x", "via": "slurm"})
    )
    r._spares(
        Action(SPARES, group="gpu", data={"reservation": "hpcc-spares-gpu", "nodes": ["gpu-003"], "exists": False})
    )
    r._spares(
        Action(SPARES, group="gpu", data={"reservation": "hpcc-spares-gpu", "nodes": ["gpu-002"], "exists": True})
    )
    r._spares(Action(SPARES, group="gpu", data={"reservation": "hpcc-spares-gpu", "nodes": [], "exists": True}))
    r._start_now(Action(START_NOW, data={"job": "43", **TRAIN}))
    assert r.calls == [
        ["scontrol", "requeue", "41"],
        ["scontrol", "reboot", "ASAP", "nextstate=DOWN", "reason=hpcc: reboot for reset: x", "gpu-001"],
        [
            "scontrol",
            "create",
            "reservation",
            "ReservationName=hpcc-spares-gpu",
            "StartTime=now",
            "Duration=infinite",
            "Users=root",
            "Flags=MAINT,IGNORE_JOBS",
            "Nodes=gpu-003",
        ],
        ["scontrol", "update", "ReservationName=hpcc-spares-gpu", "Nodes=gpu-002"],
        ["scontrol", "delete", "ReservationName=hpcc-spares-gpu"],
        ["scontrol", "update", "JobId=43", "StartTime=now"],
    ]
    r.calls.clear()
    r._spares(
        Action(
            SPARES, group="gpu", data={"reservation": "hpcc-spares-gpu", "nodes": [], "exists": True, "cancel": ["77"]}
        )
    )
    r._deep_check(
        Action(DEEP_CHECK, group="gpu", node="gpu-003", data={"reservation": "hpcc-spares-gpu", "partition": "gpu"})
    )
    assert r.calls == [
        ["scancel", "--user=root", "--name=hpcc-deep-check", "77"],
        ["scontrol", "delete", "ReservationName=hpcc-spares-gpu"],
        [
            "sbatch",
            "--parsable",
            "--job-name=hpcc-deep-check",
            "--reservation=hpcc-spares-gpu",
            "--partition=gpu",
            "--nodelist=gpu-003",
            "--nodes=1",
            "--exclusive",
            "--time=190",
            "--output=/var/log/hpcc-deep-check.log",
            "--open-mode=append",
            "--no-requeue",
            "/usr/local/sbin/hpcc-deep",
        ],
    ]
    ec2 = Recorder(slurm=False)
    ec2._reboot(Action(REBOOT, node="gpu-001", instance_id="i-1", data={"reason": "r", "via": "ec2"}))
    assert ec2.calls == [["ec2", "reboot-instances", "i-1"]]


@pytest.mark.parametrize(
    "data, now",
    [
        ({"job": "41"}, [SlurmJob("41", "FAILED", user="ubuntu", name="train")]),  # owner and name never read
        ({"job": "41", **TRAIN}, [SlurmJob("41", "FAILED", user="alice", name="train")]),  # another owner now
        ({"job": "41", **TRAIN}, [SlurmJob("41", "FAILED", user="ubuntu", name="other")]),  # another name now
        ({"job": "41", **TRAIN}, []),  # gone
    ],
)
def test_a_requeue_or_start_now_runs_only_on_the_job_slurm_confirms(data, now):
    """Issue 33, finding 1: cancel, requeue and start-now name only jobs whose owner and name Slurm confirmed."""
    r = Recorder(jobs=now)
    with pytest.raises(NotConfirmed):
        r._requeue(Action(REQUEUE, node="gpu-001", data=data))
    with pytest.raises(NotConfirmed):
        r._start_now(Action(START_NOW, data=data))
    assert r.calls == []
