"""The controller's side of the prewarm (hpcc_node/controller/images.py) on real files: the nodes' usage records read
incrementally (only new whole lines, a shrunk file from its start, a damaged line skipped, at most a budget a loop,
a bounded memory), the images each group wants from Slurm's running and requeued jobs, and the document written
only when a group's wanted images change, atomically, each change logged with its reason."""

from __future__ import annotations

import json
import os

from hpcc_contract import containers as c
from hpcc_contract import prewarm as contract
from hpcc_node.controller import images
from hpcc_node.controller.model import Slot, SlurmJob, SlurmNode, Snapshot

A, B, C = (f"sha256:{x * 64}" for x in "abc")
PYTORCH, NEMO = "nvcr.io/nvidia/pytorch:24.07-py3", "nvcr.io/nvidia/nemo:24.07"


def line(job, node, digest, reference=PYTORCH, t=100.0):
    return c.dumps_usage(c.UsageRecord(job, reference, digest, node, t))


def usage_dir(tmp_path):
    d = tmp_path / "fsx" / ".hpcc" / "image-usage"
    d.mkdir(parents=True, exist_ok=True)
    return d


def append(d, node, text):
    with open(d / f"{node}.jsonl", "a") as f:
        f.write(text)


# -- reading the records -----------------------------------------------------------------------------------------


def test_only_new_whole_lines_are_read_each_time(tmp_path):
    d = usage_dir(tmp_path)
    tail = images.UsageTail(str(d))
    append(d, "gpu-001", line("1", "gpu-001", A) + line("2", "gpu-001", B))
    assert tail.read() == 2
    assert tail.read() == 0  # nothing new
    partial = line("3", "gpu-001", C)
    append(d, "gpu-001", partial[:20])
    assert tail.read() == 0  # half a line waits for its end
    append(d, "gpu-001", partial[20:] + "not json\n")
    assert tail.read() == 1  # the damaged line skipped, the rest counted
    assert sorted(tail.uses()) == ["1", "2", "3"]
    assert tail.offsets["gpu-001.jsonl"] == os.path.getsize(d / "gpu-001.jsonl")


def test_a_file_that_shrank_is_read_from_its_start(tmp_path):
    d = usage_dir(tmp_path)
    tail = images.UsageTail(str(d))
    append(d, "gpu-001", line("1", "gpu-001", A) + line("2", "gpu-001", B))
    tail.read()
    (d / "gpu-001.jsonl").write_text(line("9", "gpu-001", C))
    assert tail.read() == 1 and "9" in tail.uses()


def test_a_backlog_is_read_a_budget_a_loop(tmp_path, monkeypatch):
    d = usage_dir(tmp_path)
    one = line("1", "gpu-001", A)
    monkeypatch.setattr(images, "READ_BUDGET", len(one) * 2 + 5)
    append(d, "gpu-001", "".join(line(str(i), "gpu-001", A) for i in range(10, 15)))
    tail = images.UsageTail(str(d))
    assert [tail.read() for _ in range(4)] == [2, 2, 1, 0]


def test_what_is_kept_is_bounded_and_forgotten_jobs_go(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "MAX_JOBS", 3)
    tail = images.UsageTail(str(tmp_path))
    for i in range(5):
        tail.add(c.UsageRecord(str(i), PYTORCH, A, "gpu-001", float(i)))
    assert sorted(tail.uses()) == ["2", "3", "4"]  # over the bound at 4: the oldest dropped, down to 9/10 of it
    tail.forget(listed={"2"}, now=3.5 + images.FORGET_S)
    assert sorted(tail.uses()) == ["2", "4"]  # 3 is unlisted and old; 4's record is recent enough


# -- what each group wants ---------------------------------------------------------------------------------------


def uses(*records):
    tail = images.UsageTail("/nonexistent")
    for r in records:
        tail.add(r)
    return tail.uses()


def rec(job, node, digest, reference=PYTORCH):
    return c.UsageRecord(job, reference, digest, node, 1.0)


def test_running_jobs_images_are_wanted_by_their_nodes_groups_and_requeued_ones_by_where_they_ran():
    found = uses(
        rec("10", "gpu-001", A),
        rec("11", "gpu-002", B, NEMO),  # requeued after gpu-002 failed
        rec("12", "big-001", C),  # finished
        rec("13", "gpu-003", C),  # pending, never requeued: no node to prewarm for it
    )
    jobs = [
        SlurmJob("10", "RUNNING", frozenset({"gpu-001", "gpu-004"}), end=1827633133.0),  # squeue: start + limit
        SlurmJob("11", "PENDING", frozenset(), restarts=1),
        SlurmJob("12", "COMPLETED", frozenset({"big-001"}), end=50.0),
        SlurmJob("13", "PENDING", frozenset()),
        SlurmJob("14", "RUNNING", frozenset({"gpu-005"})),  # no container: no record
    ]
    wanted = images.wanted_images(found, jobs, {})
    assert list(wanted) == ["gpu"]
    assert [(w.digest, w.reference, tuple(w.jobs)) for w in wanted["gpu"]] == [
        (A, c.parse_reference(PYTORCH).canonical, ("10",)),
        (B, c.parse_reference(NEMO).canonical, ("11",)),
    ]


def test_the_most_used_images_come_first_and_a_group_holds_at_most_its_cap(monkeypatch):
    monkeypatch.setattr(contract, "MAX_IMAGES_PER_GROUP", 2)
    found = uses(rec("1", "gpu-001", C), rec("2", "gpu-002", B), rec("3", "gpu-003", B), rec("4", "gpu-004", A))
    jobs = [SlurmJob(j, "RUNNING", frozenset({f"gpu-00{j}"})) for j in "1234"]
    assert [w.digest for w in images.wanted_images(found, jobs, {})["gpu"]] == [B, A]


def test_a_requeued_job_is_kept_first_among_an_images_jobs_so_its_restart_finds_its_digest(monkeypatch):
    monkeypatch.setattr(contract, "MAX_JOBS_PER_IMAGE", 2)
    found = uses(*(rec(j, "gpu-001", A) for j in ("1", "2", "3")), rec("9", "gpu-002", A))
    jobs = [SlurmJob(j, "RUNNING", frozenset({"gpu-001"})) for j in ("1", "2", "3")]
    jobs.append(SlurmJob("9", "PENDING", frozenset(), restarts=1))  # its node failed: requeued
    (wanted,) = images.wanted_images(found, jobs, {})["gpu"]
    assert tuple(wanted.jobs) == ("9", "1")
    jobs[-1] = SlurmJob("9", "RUNNING", frozenset({"gpu-003"}), restarts=1)  # restarted before a loop saw it pend
    assert tuple(images.wanted_images(found, jobs, {})["gpu"][0].jobs) == ("9", "1")
    doc = contract.loads_prewarm(contract.dumps_prewarm({"gpu": [wanted]}, 1.0))
    assert contract.job_digest(doc, "9", c.parse_reference(PYTORCH).canonical) == A
    assert contract.job_digest(doc, "9", c.parse_reference(NEMO).canonical) is None  # another image of the job's
    assert contract.job_digest(doc, "3", c.parse_reference(PYTORCH).canonical) is None  # beyond the cap: resolved


def test_the_ledgers_group_names_win_over_the_node_names():
    found = uses(rec("1", "gpu-001", A))
    jobs = [SlurmJob("1", "RUNNING", frozenset({"gpu-001"}))]
    assert list(images.wanted_images(found, jobs, {"gpu-001": "train"})) == ["train"]


# -- the document ------------------------------------------------------------------------------------------------


def wanted_a(jobs=("10",)):
    return {"gpu": [contract.Wanted(A, c.parse_reference(PYTORCH).canonical, jobs)]}


def test_the_document_is_written_when_a_group_changes_with_the_reason_and_not_otherwise(tmp_path):
    lines: list = []
    fsx = str(tmp_path / "fsx")
    pub = images.Publisher(fsx, lambda: 5.0, lines.append)
    assert pub.publish(wanted_a()) is True
    path = contract.prewarm_path(fsx)
    assert contract.loads_prewarm(open(path).read()) == contract.Prewarm(wanted_a(), {})
    assert lines == [f"prewarm: group gpu: +{c.parse_reference(PYTORCH).canonical} ({A}) for jobs 10"]
    assert pub.publish(wanted_a(("10", "11"))) is False  # another job, the same image: nodes have nothing to do
    assert images.Publisher(fsx, lambda: 6.0, lines.append).publish(wanted_a()) is False  # a restarted controller
    assert pub.publish(wanted_a(), {"gpu": ["gpu-009"]}) is True
    assert lines[-1] == "prewarm: group gpu: spare gpu-009 held (it copies the group's images)"
    assert contract.loads_prewarm(open(path).read()).spares == {"gpu": ("gpu-009",)}
    assert pub.publish({}) is True
    assert "no running or requeued job of the group uses it" in lines[-1] and "spare gpu-009 released" in lines[-1]
    assert json.loads(open(path).read())["groups"] == {}
    assert sorted(os.listdir(os.path.dirname(path))) == ["prewarm.json"]  # no temp file left


def test_the_loops_hook_writes_the_groups_images_from_the_snapshot(tmp_path):
    d = usage_dir(tmp_path)
    append(d, "gpu-001", line("10", "gpu-001", A))
    lines: list = []
    hook = images.Prewarm(str(tmp_path / "fsx"), lambda: 1.0, lines.append)
    snap = Snapshot(
        now=200.0,
        slots={"gpu-001": Slot("gpu-001", "gpu", 1)},
        slurm={"gpu-001": SlurmNode("gpu-001", frozenset({"ALLOCATED"}))},
        jobs=(SlurmJob("10", "RUNNING", frozenset({"gpu-001"})),),
        reservations={"hpcc-spares-gpu": frozenset({"gpu-002"})},
    )
    assert hook(snap) is True
    assert hook(snap) is False
    doc = contract.loads_prewarm(open(contract.prewarm_path(str(tmp_path / "fsx"))).read())
    assert [w.digest for w in doc.groups["gpu"]] == [A] and doc.spares == {"gpu": ("gpu-002",)}
    assert hook(Snapshot(now=1.0)) is False  # no Slurm: nothing


def test_the_hook_runs_where_slurm_and_a_file_system_are():
    assert images.fsx_mount("STATE_BUCKET=x\nMOUNT_POINT=/lustre\n", {}) == "/lustre"
    assert images.fsx_mount("MOUNT_POINT=/lustre\n", {"HPCC_FSX_MOUNT": "/fsx"}) == "/fsx"
    assert images.hook("MOUNT_POINT=/lustre\n", {}, True, lambda: 0.0) is not None
    assert images.hook("MOUNT_POINT=/lustre\n", {}, False, lambda: 0.0) is None
    assert images.hook("", {}, True, lambda: 0.0) is None


def test_a_built_controller_calls_the_hook_after_each_loop_with_the_lease_and_a_failing_hook_spares_the_loop(caplog):
    from hpcc_node.controller.loop import build_step
    from tests.node.test_controller_restart import BUCKET, CLUSTER, GPU, TABLE, fresh_env

    seen = []

    def after(snap):
        seen.append(snap.now)
        raise OSError("the file system is gone")

    with fresh_env() as env:
        step = build_step(
            env.ec2, env.ddb, env.s3, CLUSTER, TABLE, BUCKET, lambda: [GPU], "head-1", env.clock, after=after
        )
        assert step()["lease"] is True
    assert len(seen) == 1
    assert any("the file system is gone" in r.getMessage() for r in caplog.records)
