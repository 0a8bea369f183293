"""Preflight shows each node group's count and type and the account's EC2 launch rate (RunInstances' resource
bucket: 1,000 at once, then 2 a second), warning when the groups together exceed the bucket; the neighbours'
Parameter Store warning stays in the same run."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import yaml

from infra.config.stackfile import load, read_raw
from infra.config.validators.findings import ERROR, INFO, WARNING
from infra.ops.aws import Aws, Backoff
from infra.ops.preflight.groups import launch_rate
from infra.ops.preflight.rules import preflight
from infra.plan.embedded_aws import embedded_aws
from tests.ops.support import EXAMPLES, inject_response, two_groups
from tests.ops.test_preflight_neighbours import seed_cluster

CONFIG = EXAMPLES / "c6i-oneccl.yaml"  # cluster cpu-oneccl: the `compute:` block, 4 nodes


def groups_cfg(tmp_path, *groups):
    """The example with `nodeGroups:` in place of its `compute:` block, loaded as `hpcc` loads it."""
    config = read_raw(CONFIG)
    compute = config["hpcc:cluster"].pop("compute")
    config["hpcc:cluster"]["nodeGroups"] = [{**compute, "name": n, "instanceType": t, "count": c} for n, t, c in groups]
    path = tmp_path / "Pulumi.groups.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return SimpleNamespace(cfg=load(path))


def test_each_group_is_shown_with_its_count_and_the_launch_rate_warns_above_the_bucket(tmp_path):
    found = list(launch_rate(groups_cfg(tmp_path, ("gpu", "c6i.16xlarge", 2048), ("cpu", "c6i.32xlarge", 2048))))
    per_group = [f for f in found if f.message.startswith("group ")]
    assert [(f.field, f.severity) for f in per_group] == [
        ("cluster.nodeGroups[0].count", INFO),
        ("cluster.nodeGroups[1].count", INFO),
    ]
    assert "group gpu: 2048 x c6i.16xlarge" in per_group[0].message
    rate = [f for f in found if f.severity == WARNING]
    assert len(rate) == 1 and "4,096 compute nodes in 2 group(s)" in rate[0].message
    assert rate[0].field == "cluster.nodeGroups"
    assert "1,000 instances at once, then 2 a second" in rate[0].message and "about 26 min" in rate[0].message
    small = list(launch_rate(groups_cfg(tmp_path, ("gpu", "c6i.16xlarge", 1000))))
    assert not [f for f in small if f.severity == WARNING] and "about 1 min" in small[-1].message


def test_a_compute_block_is_one_group_and_the_neighbours_warning_stays():
    with embedded_aws("us-east-1"):
        seed_cluster("other", 300)
        findings = preflight(Aws("us-east-1", backoff=Backoff(sleep=lambda _: None)), load(CONFIG))
    groups = [f for f in findings if f.message.startswith("group compute: 4 x c6i.16xlarge")]
    assert len(groups) == 1 and groups[0].field == "cluster.compute.count"
    assert any(f.severity == WARNING and "share Parameter Store" in f.message for f in findings)


# -- the whole preflight on node groups (issue 32: it crashed on every `nodeGroups:` stack) ------------------


def _whole_preflight(path):
    from typer.testing import CliRunner

    from infra.ops.cli import app

    return CliRunner().invoke(app, ["preflight", str(path), "--emulate"], env={"COLUMNS": "200"})


@pytest.mark.parametrize("example", sorted(p.stem for p in EXAMPLES.glob("*.yaml")))
def test_the_whole_preflight_ends_in_findings_on_every_example(example):
    out = _whole_preflight(EXAMPLES / f"{example}.yaml")
    assert out.exit_code in (0, 1) and isinstance(out.exception, (SystemExit, type(None))), out.output
    assert "Traceback" not in out.output and re.search(r"preflight: \d+ error\(s\), \d+ warning\(s\)", out.output)


def test_the_whole_preflight_passes_a_two_group_stack_and_speaks_of_each_group(tmp_path):
    out = _whole_preflight(two_groups(tmp_path))
    assert out.exit_code == 0 and out.exception is None, out.output
    text = " ".join(out.output.split())
    assert "dry run: AWS would launch 2 x p5.48xlarge" in text and "dry run: AWS would launch 4 x c6i.16xlarge" in text
    assert "cluster.nodeGroups[1].efa: c6i.16xlarge has no EFA" in text


def test_every_rule_reads_each_group_and_names_its_field(tmp_path):
    """efa, the dry run, the quota, the reservation, an empty group: each group's own field."""
    path = two_groups(
        tmp_path,
        nodeGroups=[
            {"name": "gpu", "instanceType": "p5.48xlarge", "count": 2, "efa": False},
            {
                "name": "blk",
                "instanceType": "p5.48xlarge",
                "count": 3,
                "market": "capacity-block",
                "capacityReservationId": "cr-0abcdef0123456789",
            },
            {"name": "cpu", "instanceType": "c6i.16xlarge", "count": 0},
        ],
    )
    with embedded_aws("us-east-1"):
        aws = Aws("us-east-1", backoff=Backoff(sleep=lambda _: None))
        inject_response(
            aws.client("ec2"),
            "DescribeCapacityReservations",
            {
                "CapacityReservations": [
                    {
                        "CapacityReservationId": "cr-0abcdef0123456789",
                        "InstanceType": "p5.48xlarge",
                        "AvailabilityZone": "us-east-1a",
                        "AvailableInstanceCount": 2,
                        "TotalInstanceCount": 2,
                        "State": "active",
                        "ReservationType": "capacity-block",
                    }
                ]
            },
        )
        found = preflight(aws, load(path))
    by_field = {}
    for f in found:
        by_field.setdefault(f.field, []).append(f)
    assert [f.severity for f in by_field["cluster.nodeGroups[0].efa"]] == [WARNING]
    [short] = [f for f in by_field["cluster.nodeGroups[1].capacityReservationId"] if f.severity == ERROR]
    assert "has 2 of 2 instances free, but the cluster needs 3" in short.message
    assert "cluster.nodeGroups[1].count" in short.message
    assert [f.message for f in by_field["cluster.nodeGroups[2].instanceType"] if "dry run" in f.message] == [
        "group cpu has no nodes (count 0): no dry run"
    ]
    assert any(
        "dry run: AWS would launch 2 x p5.48xlarge" in f.message for f in by_field["cluster.nodeGroups[0].instanceType"]
    )
    quota = [f for f in found if "vCPU quota" in f.message]
    assert {f.field for f in quota} == {"cluster.headNode.instanceType", "cluster.nodeGroups[0].instanceType"}
    assert any("needs 960 vCPUs" in f.message for f in quota)  # 5 x p5.48xlarge (192 each): on-demand + block
