"""The head's Prometheus scrape targets follow the membership the controller publishes (hpcc_node/controller/targets.py,
issue 34): a node is a target from ready until it leaves, the GPU job only on groups with GPUs, a file rewritten
only when its targets change, and never a loop stopped by it."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace

import pytest

from hpcc_contract import metrics
from hpcc_node.controller import membership, targets
from hpcc_node.controller.model import Group
from tests.node.test_controller_restart import BUCKET, CLUSTER, GPU, TABLE, bring_up, env  # noqa: F401

CPU = Group("cpu", "c6i.32xlarge", 2)
GPUS = replace(GPU, gpus=8)
LOG = logging.getLogger("hpcc.controller")


def body(*nodes, head=("10.0.0.5", "i-head")):
    doc = {
        "nodes": [dict(zip(("name", "group", "ip", "instance", "state"), n, strict=True)) for n in nodes],
        "groups": {},
    }
    if head:
        doc["head"] = {"name": "head", "ip": head[0], "instance": head[1]}
    return doc


def names(found, job):
    return sorted((t["labels"][metrics.LABEL_NODE], t["targets"][0]) for t in found[job])


def test_ready_and_draining_nodes_are_targets_and_booting_failed_or_addressless_ones_are_not():
    doc = body(
        ("gpu-000", "gpu", "10.0.1.1", "i-1", "ready"),
        ("gpu-001", "gpu", "10.0.1.2", "i-2", "draining"),
        ("gpu-002", "gpu", "10.0.1.3", "i-3", "booting"),
        ("gpu-003", "gpu", "10.0.1.4", "i-4", "failed"),
        ("gpu-004", "gpu", "", "i-5", "ready"),
        ("cpu-000", "cpu", "10.0.2.1", "i-6", "ready"),
    )
    found = targets.file_sd(doc, [GPUS, CPU])
    assert names(found, metrics.JOB_NODE) == [
        ("cpu-000", "10.0.2.1:9100"),
        ("gpu-000", "10.0.1.1:9100"),
        ("gpu-001", "10.0.1.2:9100"),
        ("head", "10.0.0.5:9100"),
    ]
    assert names(found, metrics.JOB_GPU) == [("gpu-000", "10.0.1.1:9400"), ("gpu-001", "10.0.1.2:9400")]
    assert names(found, metrics.JOB_PROMETHEUS) == [("head", "10.0.0.5:9090")]  # only the head knows its address
    gpu0 = next(t for t in found[metrics.JOB_GPU] if t["labels"]["node"] == "gpu-000")
    assert gpu0["labels"] == {"node": "gpu-000", "group": "gpu", "instance_id": "i-1"}


def test_a_group_without_gpus_has_no_gpu_targets_and_a_membership_without_a_head_has_no_head_target():
    doc = body(("gpu-000", "gpu", "10.0.1.1", "i-1", "ready"), head=None)
    found = targets.file_sd(doc, [GPU])  # GPU as the groups parameter gives it without `gpus`: 0
    assert found[metrics.JOB_GPU] == [] and names(found, metrics.JOB_NODE) == [("gpu-000", "10.0.1.1:9100")]


def test_the_writer_writes_a_file_only_when_its_targets_change_and_logs_each_change(tmp_path, caplog):
    caplog.set_level("INFO", logger="hpcc.controller")
    writer = targets.Writer(str(tmp_path / "t"), LOG)
    one = body(("gpu-000", "gpu", "10.0.1.1", "i-1", "ready"))
    assert writer.sync(one, [GPUS], 3) == [metrics.JOB_NODE, metrics.JOB_GPU, metrics.JOB_PROMETHEUS]
    path = tmp_path / "t" / metrics.TARGET_FILES[metrics.JOB_GPU]
    assert json.loads(path.read_text())[0]["targets"] == ["10.0.1.1:9400"]
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert writer.sync(one, [GPUS], 4) == []
    replaced = body(("gpu-000", "gpu", "10.0.1.9", "i-9", "booting"))
    assert writer.sync(replaced, [GPUS], 5) == [metrics.JOB_NODE, metrics.JOB_GPU]  # the head's are as they were
    assert json.loads(path.read_text()) == []
    assert "gpu job now 0 targets, from membership generation 5" in caplog.text
    assert not [f for f in os.listdir(tmp_path / "t") if f.startswith(".")]  # no temporary file left


def test_a_restarted_controller_leaves_files_that_already_hold_its_targets(tmp_path):
    one = body(("gpu-000", "gpu", "10.0.1.1", "i-1", "ready"))
    targets.Writer(str(tmp_path), LOG).sync(one, [GPUS], 3)
    before = {f: os.stat(tmp_path / f).st_mtime_ns for f in os.listdir(tmp_path)}
    again = targets.Writer(str(tmp_path), LOG)
    assert again.sync(one, [GPUS], 3) == [] and again.written
    assert before == {f: os.stat(tmp_path / f).st_mtime_ns for f in os.listdir(tmp_path)}


def test_a_target_file_that_cannot_be_written_is_logged_and_the_loop_goes_on(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    writer = targets.Writer(str(blocker / "t"), LOG)  # a directory under a file: never created
    assert writer.sync(body(("gpu-000", "gpu", "10.0.1.1", "i-1", "ready")), [GPUS], 1) == []
    assert "cannot be written" in caplog.text and not writer.written


def test_a_built_controller_keeps_the_targets_in_step_with_the_membership_it_publishes(env, tmp_path):  # noqa: F811
    from hpcc_node.controller.loop import build_step

    groups = [replace(GPUS, count=2)]
    directory = str(tmp_path / "targets")
    step = build_step(
        env.ec2, env.ddb, env.s3, CLUSTER, TABLE, BUCKET, lambda: groups, "head-1", env.clock, head=HEAD,
        targets=targets.Writer(directory, LOG),
    )  # fmt: skip
    bring_up(env, step)
    doc, _ = membership.read(env.s3, BUCKET)
    ready = sorted((n["name"], n["ip"]) for n in doc["nodes"] if n["state"] == "ready")
    assert len(ready) == 2
    on_disk = json.load(open(os.path.join(directory, metrics.TARGET_FILES[metrics.JOB_GPU])))
    assert sorted((t["labels"]["node"], t["targets"][0].rsplit(":", 1)[0]) for t in on_disk) == ready
    # a terminated node: out of the targets with the generation that drops it, before its replacement is ready
    gone = sorted(env.ec2.live())[0]
    env.ec2.terminate_instances(InstanceIds=[gone])
    env.ec2.tick()
    step()
    on_disk = json.load(open(os.path.join(directory, metrics.TARGET_FILES[metrics.JOB_NODE])))
    assert gone not in {t["labels"]["instance_id"] for t in on_disk}
    assert {t["labels"]["node"] for t in on_disk} >= {"head"}
    # a new controller (a restart) that publishes nothing new writes the last membership's targets once
    os.remove(os.path.join(directory, metrics.TARGET_FILES[metrics.JOB_NODE]))
    again = build_step(
        env.ec2, env.ddb, env.s3, CLUSTER, TABLE, BUCKET, lambda: groups, "head-1", env.clock, head=HEAD,
        targets=targets.Writer(directory, LOG),
    )  # fmt: skip
    again()
    doc, _ = membership.read(env.s3, BUCKET)
    expected = targets.encode(targets.file_sd(membership.body_of(doc), groups)[metrics.JOB_NODE])
    assert open(os.path.join(directory, metrics.TARGET_FILES[metrics.JOB_NODE]), "rb").read() == expected


HEAD = {"name": "head", "ip": "10.0.0.5", "instance": "i-head"}


def test_a_groups_gpus_come_from_its_slurm_gres_and_none_without_one():
    from hpcc_contract import groups as groups_format
    from hpcc_node.controller.__main__ import parse_groups

    entries = [
        {"name": "gpu", "instance_type": "p5.48xlarge", "count": 2, "slurm": {"gres": "gpu:8", "cpus": 192}},
        {"name": "cpu", "instance_type": "c6i.32xlarge", "count": 1, "slurm": {"gres": "", "cpus": 128}},
        {"name": "odd", "instance_type": "c6i.32xlarge", "count": 1, "slurm": {"gres": "gpu:8;rm -rf /"}},
        {"name": "bare", "instance_type": "p5.48xlarge", "count": 1},  # no Slurm: no GPU job
    ]
    parsed = parse_groups(groups_format.dumps(entries), "/hpcc/c/groups")
    assert [(g.name, g.gpus) for g in parsed] == [("gpu", 8), ("cpu", 0), ("odd", 0), ("bare", 0)]


@pytest.mark.parametrize("nodes", [5, "gpu-000", None, [5, "x", {"state": "ready"}]])
def test_a_membership_of_another_shape_gives_the_head_alone_and_never_raises(nodes):
    """A membership object read back after a restart may be JSON of any shape (issue 37: it can be overwritten)."""
    found = targets.file_sd({"nodes": nodes, "head": {"ip": "10.0.0.5", "instance": "i-head"}}, [GPUS])
    assert names(found, metrics.JOB_NODE) == [("head", "10.0.0.5:9100")] and found[metrics.JOB_GPU] == []
