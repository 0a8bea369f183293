"""The health rules' reads (health/observe.py: scontrol's jobs and reservations, the status body's health fields)
and writes (health/act.py: the scontrol and EC2 commands), with recorded commands instead of a cluster."""

from __future__ import annotations

import json
from dataclasses import replace

from hpcc_node.controller import observe
from hpcc_node.controller.health import observe as observe_health
from hpcc_node.controller.health.act import HealthActs
from hpcc_node.controller.model import DEEP_CHECK, REBOOT, REQUEUE, SPARES, START_NOW, Action, SlurmNode, Snapshot
from tests.node.controller_cases import NOW

FAILED_JOB = (
    "JobId=41 JobName=train UserId=ubuntu(1000) GroupId=ubuntu(1000) MCS_label=N/A Priority=4294901759 "
    "Nice=0 Account=(null) QOS=(null) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) Requeue=1 "
    "Restarts=2 BatchFlag=1 Reboot=0 ExitCode=1:0 RunTime=00:01:02 TimeLimit=UNLIMITED TimeMin=N/A "
    "SubmitTime=2026-11-24T14:00:00 EligibleTime=2026-11-24T14:00:00 StartTime=2026-11-24T14:00:01 "
    "EndTime=2026-11-24T14:01:03 Deadline=N/A Partition=gpu AllocNode:Sid=head:1234 NodeList=gpu-[000-001,007] "
    "BatchHost=gpu-000 NumNodes=3 NumCPUs=6 NumTasks=3 Command=/fsx/train-resumable.sbatch"
)
RUNNING_JOB = (
    "JobId=42 JobName=x JobState=RUNNING Reason=None Requeue=0 Restarts=0 BatchFlag=1 "
    "StartTime=2026-11-24T14:00:01 EndTime=Unknown NodeList=cpu-001 BatchHost=cpu-001"
)
RESERVATION = (
    "ReservationName=hpcc-spares-gpu StartTime=2026-11-24T14:00:00 EndTime=2027-11-24T14:00:00 "
    "Duration=365-00:00:00 Nodes=gpu-[003,010] NodeCnt=2 CoreCnt=192 Features=(null) PartitionName=(null) "
    "Flags=MAINT,IGNORE_JOBS,SPEC_NODES TRES=cpu=192 Users=root Groups=(null) Accounts=(null) "
    "Licenses=(null) State=ACTIVE BurstBuffer=(null) MaxStartDelay=(null)"
)


def test_jobs_are_read_with_their_nodes_restarts_end_and_requeue_flag():
    got = observe_health.jobs(
        f"{FAILED_JOB}\n{RUNNING_JOB}\n", parse_time=lambda v: 1e9 if v.startswith("2026") else float(v)
    )
    assert got[0] == observe_health.SlurmJob(
        "41", "FAILED", frozenset({"gpu-000", "gpu-001", "gpu-007"}), 2, 1e9, True, "NonZeroExitCode", 1e9, "train"
    )
    assert (got[1].state, got[1].end, got[1].requeue, got[1].nodes) == ("RUNNING", 0.0, False, frozenset({"cpu-001"}))
    assert observe_health.jobs("No jobs in the system\n") == ()
    requeued = (
        "JobId=43 JobName=train JobState=PENDING Reason=BeginTime Dependency=(null) Requeue=1 Restarts=1 "
        "SubmitTime=2026-11-24T14:02:00 EligibleTime=2026-11-24T14:04:00 StartTime=2026-11-24T14:04:00 "
        "EndTime=Unknown NodeList= BatchHost=gpu-000"
    )
    (job,) = observe_health.jobs(requeued, parse_time=observe_health.local_time)
    assert (job.state, job.reason, job.restarts, job.nodes) == ("PENDING", "BeginTime", 1, frozenset())
    assert job.eligible == observe_health.local_time("2026-11-24T14:04:00")


def test_reservations_and_hostlists():
    assert observe_health.reservations(RESERVATION + "\n") == {"hpcc-spares-gpu": frozenset({"gpu-003", "gpu-010"})}
    assert observe_health.reservations("No reservations in the system\n") == {}
    assert observe_health.hostnames("gpu-[998-1000],cpu-001") == frozenset(
        {"gpu-998", "gpu-999", "gpu-1000", "cpu-001"}
    )


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

    def read(argv):
        asked.append(argv)
        return FAILED_JOB if "jobs" in argv else RESERVATION

    no_slurm = Snapshot(now=NOW)
    assert observe_health.with_slurm_extras(no_slurm, read) is no_slurm and asked == []
    snap = observe_health.with_slurm_extras(
        replace(no_slurm, slurm={"gpu-000": SlurmNode("gpu-000", frozenset())}), read, parse_time=lambda v: 5.0
    )
    assert [j.job_id for j in snap.jobs] == ["41"] and set(snap.reservations) == {"hpcc-spares-gpu"}


class Recorder(HealthActs):
    def __init__(self, slurm=True):
        self.calls = []
        self.slurm = self.calls.append if slurm else None
        self.ec2 = self

    def reboot_instances(self, InstanceIds):
        self.calls.append(["ec2", "reboot-instances", *InstanceIds])


def test_each_health_action_runs_its_command():
    r = Recorder()
    r._requeue(Action(REQUEUE, node="gpu-001", data={"job": "41"}))
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
    r._start_now(Action(START_NOW, data={"job": "43"}))
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
        ["scancel", "77"],
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
