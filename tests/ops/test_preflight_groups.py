"""Preflight shows each node group's count and type and the account's EC2 launch rate (RunInstances' resource
bucket: 1,000 at once, then 2 a second), warning when the groups together exceed the bucket; the neighbours'
Parameter Store warning stays in the same run."""

from __future__ import annotations

from types import SimpleNamespace

import yaml

from infra.config.stackfile import load, read_raw
from infra.config.validators.findings import INFO, WARNING
from infra.ops.aws import Aws, Backoff
from infra.ops.preflight.groups import launch_rate
from infra.ops.preflight.rules import preflight
from infra.plan.embedded_aws import embedded_aws
from tests.ops.support import EXAMPLES
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
