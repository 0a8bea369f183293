"""Node groups (`nodeGroups:`): names, the cap, per-group rules naming the group's own field, and `compute:` as the
one group named compute."""

import pytest

from hpcc_contract.names import compute_node_name, node_name
from infra.config.parse import ConfigError, parse
from infra.config.validators.check import check_config
from infra.facts.limits import MAX_NODES
from tests.facts.instance_data import offline_facts

GPU = {"name": "gpu", "instanceType": "p4d.24xlarge", "count": 2}
CPU = {"name": "cpu", "instanceType": "c6i.16xlarge", "count": 3}


def groups(*gs, **extra):
    return {"name": "demo", "headNode": {"instanceType": "c5n.18xlarge"}, "nodeGroups": list(gs), **extra}


def problems(cluster):
    try:
        cfg = parse("us-east-1", cluster)
    except ConfigError as e:
        return e.problems
    return [(f.field, f.message) for f in check_config(cfg, offline_facts()) if f.is_error]


def test_groups_parse_in_order_with_their_counts():
    cfg = parse("us-east-1", groups(GPU, CPU)).cluster
    assert [(g.name, g.instance_type, g.count) for g in cfg.node_groups] == [
        ("gpu", "p4d.24xlarge", 2),
        ("cpu", "c6i.16xlarge", 3),
    ]
    assert cfg.node_count == 5
    assert cfg.group_field(1, "count") == "cluster.nodeGroups[1].count"
    assert not problems(groups(GPU, CPU))


def test_compute_is_one_group_named_compute():
    cfg = parse(
        "us-east-1", {"name": "demo", "compute": {"instanceType": "c6i.16xlarge", "count": 4, "market": "spot"}}
    ).cluster
    [group] = cfg.node_groups
    assert (group.name, group.count, group.market) == ("compute", 4, "spot")
    assert cfg.group_field(0, "market") == "cluster.compute.market"


def test_spares_are_part_of_the_count_and_reach_the_controllers_group():
    """`spares` of `count` are launched with it; /hpcc/<c>/groups carries them to Group.spares."""
    from hpcc_node.controller.__main__ import parse_groups
    from infra.render.groups_param import group_entry, groups_value

    cfg = parse("us-east-1", groups({**GPU, "count": 5, "spares": 1}, CPU, scheduler="slurm")).cluster
    assert cfg.node_count == 8 and [g.spares for g in cfg.node_groups] == [1, 0]
    assert not problems(groups({**GPU, "count": 5, "spares": 1}, CPU, scheduler="slurm"))
    entry = group_entry(
        cfg, 0, cfg.node_groups[0], offline_facts().get("p4d.24xlarge"), "lt-1", "subnet-1", "us-east-1a", None
    )
    [group] = parse_groups(groups_value([entry]), "/hpcc/demo/groups")  # as the controller reads it each loop
    assert (group.count, group.spares) == (5, 1)


def test_a_group_may_be_empty():
    assert parse("us-east-1", groups({**CPU, "count": 0})).cluster.node_count == 0


CASES = [
    # (cluster, field, words)
    (groups(GPU, {**CPU, "name": "head"}), "cluster.nodeGroups[1].name", "the head node's name"),
    (groups({**GPU, "name": "Gpu"}), "cluster.nodeGroups[0].name", "lower-case letters and digits"),
    (groups({**GPU, "name": "gpu-a"}), "cluster.nodeGroups[0].name", "lower-case letters and digits"),
    (groups({**GPU, "name": "abcdefghijklm"}), "cluster.nodeGroups[0].name", "1-12"),
    (groups(GPU, {**CPU, "name": "gpu"}), "cluster.nodeGroups[1].name", "also the name of cluster.nodeGroups[0]"),
    (groups({**GPU, "count": 4000}, {**CPU, "count": 97}), "cluster.nodeGroups", f"at most {MAX_NODES}"),
    (groups({**GPU, "count": MAX_NODES + 1}), "cluster.nodeGroups[0].count", f"less than or equal to {MAX_NODES}"),
    (groups({**GPU, "count": -1}), "cluster.nodeGroups[0].count", "greater than or equal to 0"),
    (groups({**GPU, "count": 2, "spares": 1}), "cluster.nodeGroups[0].spares", "give cluster.scheduler: slurm"),
    (groups(GPU, {**CPU, "efa": True}), "cluster.nodeGroups[1].efa", "has no EFA"),
    (
        groups(GPU, {**CPU, "instanceType": "hpc7a.96xlarge", "market": "spot"}),
        "cluster.nodeGroups[1].market",
        "on-demand only",
    ),
    (
        groups(GPU, {**CPU, "instanceType": "p9.huge"}),
        "cluster.nodeGroups[1].instanceType",
        "DescribeInstanceTypes does not list it",
    ),
    (
        groups(GPU, {**CPU, "instanceType": "vt1.24xlarge"}),
        "cluster.nodeGroups[1].instanceType",
        "cannot join a cluster placement group",
    ),
    (groups(GPU, {**CPU, "market": "capacity-block"}), "cluster.nodeGroups[1].capacityReservationId", "give its id"),
    (
        groups(GPU, {**CPU, "instanceType": "hpc7g.16xlarge"}),
        "cluster.headNode.instanceType",
        "cluster.nodeGroups[1].instanceType hpc7g.16xlarge runs arm64",
    ),
    (groups(GPU, {**CPU, "gpus": 8}), "cluster.nodeGroups[1].gpus", "unknown key"),
    (groups(), "cluster.nodeGroups", "at least 1 item"),
    (
        {**groups(GPU), "compute": {"instanceType": "c6i.16xlarge", "count": 1}},
        "cluster",
        "either compute (one group named compute) or nodeGroups, not both",
    ),
    ({"name": "demo"}, "cluster", "nodeGroups is required"),
    (groups({**GPU, "spares": 3}, scheduler="slurm"), "cluster.nodeGroups[0]", "give count >= spares"),
    (groups(GPU, {**CPU, "spares": 1}), "cluster.nodeGroups[1].spares", "give cluster.scheduler: slurm"),
    (groups({**GPU, "spares": -1}, scheduler="slurm"), "cluster.nodeGroups[0].spares", "greater than or equal to 0"),
    (groups({**GPU, "updateStrategy": "drain"}), "cluster.nodeGroups[0].updateStrategy", "'rolling', 'terminate'"),
    (groups({**GPU, "maxUnavailable": 0}), "cluster.nodeGroups[0].maxUnavailable", "give 1 or more"),
]


@pytest.mark.parametrize("cluster,field,words", CASES, ids=[f"{c[1]}:{c[2][:24]}" for c in CASES])
def test_bad_group_is_named_with_the_fix(cluster, field, words):
    found = problems(cluster)
    assert any(path == field and words in msg for path, msg in found), found


def test_node_names_have_three_digits_below_a_thousand_and_plain_digits_above():
    assert [node_name("gpu", i) for i in (0, 7, 999, 1000, 4095)] == [
        "gpu-000",
        "gpu-007",
        "gpu-999",
        "gpu-1000",
        "gpu-4095",
    ]
    assert compute_node_name(12) == "compute-012"


def test_the_state_bucket_name_is_the_one_the_policy_pack_recognises():
    from hpcc_contract import names as contract_names
    from policy import bucket_rules

    m = bucket_rules.STATE_BUCKET.match(contract_names.state_bucket("my-cluster", "123456789012"))
    assert m and (m.group("cluster"), m.group("account")) == ("my-cluster", "123456789012")
    assert not bucket_rules.STATE_BUCKET.match(contract_names.bundle_bucket("my-cluster", "123456789012"))


def test_the_update_strategy_defaults_to_rolling_one_at_a_time_and_a_bound_of_the_whole_group_is_warned():
    """ParallelCluster's DRAIN and HyperPod's rolling updates (infra/config/nodes.py); the groups value carries
    both to the controller."""
    from hpcc_node.controller.__main__ import parse_groups
    from infra.render.groups_param import group_entry, groups_value

    cfg = parse("us-east-1", groups(GPU, {**CPU, "updateStrategy": "terminate", "maxUnavailable": 2})).cluster
    assert [(g.update_strategy, g.max_unavailable) for g in cfg.node_groups] == [("rolling", 1), ("terminate", 2)]
    entry = group_entry(
        cfg, 1, cfg.node_groups[1], offline_facts().get("c6i.16xlarge"), "lt", "s", "az", None, 5, "ami-1"
    )
    [group] = parse_groups(groups_value([entry]), "/hpcc/demo/groups")
    assert (group.update_strategy, group.max_unavailable, group.lt_version) == ("terminate", 2, 5)
    assert group.spec  # with an image: the digest the controller compares to each instance's tag
    whole = parse("us-east-1", groups({**GPU, "maxUnavailable": 2}))
    [warned] = [f for f in check_config(whole, offline_facts()) if f.field == "cluster.nodeGroups[0].maxUnavailable"]
    assert not warned.is_error and "the whole group out at once" in warned.message


def test_the_launch_spec_changes_with_what_needs_a_new_instance_and_not_with_the_imds_options():
    from infra.render.groups_param import launch_spec

    cfg = parse("us-east-1", groups(GPU)).cluster
    group = cfg.node_groups[0]
    base = launch_spec(group, True, "ami-1", None)
    assert launch_spec(group, True, "ami-1", None) == base
    changed = [
        launch_spec(group.model_copy(update={"instance_type": "p5.48xlarge"}), True, "ami-1", None),
        launch_spec(group, False, "ami-1", None),
        launch_spec(group, True, "ami-2", None),
        launch_spec(group.model_copy(update={"root_volume_gib": 500}), True, "ami-1", None),
        launch_spec(group, True, "ami-1", "pg-1"),
    ]
    assert base not in changed and len(set(changed)) == len(changed)
