"""The offline plan of node groups: what it lists, that its size does not grow with the node count (4,096 nodes of
two groups), the groups parameter the controller reads, and the tier check on it."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from infra.plan.runner import PlanError, plan_config

DYNAMIC = "pulumi-python:dynamic:Resource"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"


def two_groups(gpus: int, cpus: int, **extra) -> dict:
    return {
        "aws:region": "us-east-1",
        "hpcc:cluster": {
            "name": "groups",
            "headNode": {"instanceType": "c5n.18xlarge"},
            "scheduler": "slurm",
            "nodeGroups": [
                {"name": "gpu", "instanceType": "p5.48xlarge", "count": gpus},
                {"name": "cpu", "instanceType": "c6i.16xlarge", "count": cpus, "market": "spot"},
            ],
            "fsx": {"deploymentType": "SCRATCH_2", "storageCapacityGiB": 2400},
            **extra,
        },
    }


@pytest.fixture(scope="module")
def small():
    return plan_config(two_groups(2, 1))


@pytest.fixture(scope="module")
def large():
    return plan_config(two_groups(2048, 2048))


def test_4096_nodes_plan_with_as_many_resources_as_3(small, large):
    assert Counter(r["type"] for r in large.resources) == Counter(r["type"] for r in small.resources)
    assert [r for r in large.resources if r["type"] == INSTANCE] == [large.named("groups-head")]


def test_the_plan_lists_each_group_its_count_and_the_names_it_will_get(large):
    assert [(g["name"], g["instanceType"], g["count"], g["nodes"]) for g in large.outputs["nodeGroups"]] == [
        ("gpu", "p5.48xlarge", 2048, "gpu-000..gpu-2047"),
        ("cpu", "c6i.16xlarge", 2048, "cpu-000..cpu-2047"),
    ]


def test_each_group_has_its_template_without_a_subnet_and_a_resource_that_terminates_it(large):
    for group in ("gpu", "cpu"):
        lt = large.named(f"groups-{group}-lt")
        assert lt["type"] == LT and lt["inputs"]["name"] == f"hpcc-groups-{group}"
        assert all("subnetId" not in nic for nic in lt["inputs"]["networkInterfaces"])
        tagged = {s["resourceType"]: s["tags"] for s in lt["inputs"]["tagSpecifications"]}
        assert tagged["instance"]["hpcc:group"] == group and tagged["instance"]["hpcc:role"] == "compute"
        resource = large.named(f"groups-group-{group}")
        assert resource["type"] == DYNAMIC and (resource["inputs"]["cluster"], resource["inputs"]["group"]) == (
            "groups",
            group,
        )
        # Destroy removes the head (the controller) before any group's instances.
        assert f"groups-group-{group}" in large.named("groups-head")["dependsOn"]
    assert large.named("groups-head-lt")["inputs"]["networkInterfaces"][0]["subnetId"]


def test_the_groups_parameter_is_what_the_controller_builds_groups_from(large):
    from hpcc_contract import groups as groups_format
    from hpcc_node.controller.model import Group

    value = json.loads(large.named("groups-groups-param")["inputs"]["value"])
    assert value[groups_format.FORMAT_KEY] == groups_format.FORMAT
    built = []
    for entry in value[groups_format.GROUPS_KEY]:
        # the contract's fields, all of them but those at their defaults (left out: hpcc_contract/groups.py)
        assert set(entry) | set(groups_format.DEFAULTS) == set(groups_format.FIELDS) | {groups_format.SLURM}
        slurm = entry.pop("slurm")
        built.append(Group(**entry))
        assert slurm["cpus"] > 0 and slurm["real_memory"] > 0
    assert [(g.name, g.count, g.launch_template, g.market, g.efa) for g in built] == [
        ("gpu", 2048, "hpcc-groups-gpu", "on-demand", True),
        ("cpu", 2048, "hpcc-groups-cpu", "spot", False),
    ]
    assert all(g.subnet_id.startswith("subnet-") and g.availability_zone for g in built)
    assert all(g.lt_version >= 1 and len(g.spec) == 10 and g.update_strategy == "rolling" for g in built)
    assert (
        value["groups"][0]
        and json.loads(large.named("groups-groups-param")["inputs"]["value"])["groups"][0]["slurm"]["gres"] == "gpu:8"
    )


def test_the_ledger_and_state_bucket_are_created_and_named_in_the_settings(large):
    table = large.named("groups-ledger")
    assert (table["inputs"]["name"], table["inputs"]["hashKey"], table["inputs"]["billingMode"]) == (
        "hpcc-groups-ledger",
        "pk",
        "PAY_PER_REQUEST",
    )
    settings = large.named("groups-settings-param")["inputs"]["value"]
    assert "STATE_BUCKET=hpcc-groups-state-123456789012\n" in settings
    assert "LEDGER_TABLE=hpcc-groups-ledger\n" in settings and "NODE_COUNT=4096\n" in settings
    assert large.outputs["stateBucket"] == "hpcc-groups-state-123456789012"


def test_the_tier_check_covers_the_groups_parameter(monkeypatch):
    """A groups value over 8 KB is refused by the plan naming the field that sizes it."""
    from infra.program.components import compute

    monkeypatch.setattr(compute, "groups_value", lambda entries: json.dumps({"groups": entries, "pad": "x" * 8192}))
    with pytest.raises(
        PlanError,
        match=r"groups-groups-param: ValidationException: .*Intelligent-Tiering tier holds "
        r"at most 8192 bytes: cluster.nodeGroups sets its size",
    ):
        plan_config(two_groups(1, 1))


def test_the_most_groups_fit_the_parameter():
    from infra.facts.limits import MAX_GROUPS

    groups = [
        {
            "name": f"gpugroup{i:02d}xx",
            "instanceType": "p5.48xlarge",
            "count": 256,
            "market": "capacity-block",
            "capacityReservationId": "cr-0123456789abcdef0",
            "placementGroup": "x" * 60,
        }
        for i in range(MAX_GROUPS)
    ]
    config = two_groups(0, 0)
    config["hpcc:cluster"]["nodeGroups"] = groups
    result = plan_config(config)
    assert len(result.named("groups-groups-param")["inputs"]["value"].encode()) <= 8192
