"""`hpcc status` of a group being rolled to a new launch (hpcc_node/controller/decide_rolling.py): its progress in
the group's note, and instances launched before version tags reported as "version unknown"."""

from __future__ import annotations

from rich.console import Console

from hpcc_contract.names import TAG_GROUP, TAG_LAUNCH_SPEC, TAG_ROLE, node_name
from hpcc_node.controller import model
from hpcc_node.controller.ledger import Loaded
from hpcc_node.controller.model import Slot
from infra.ops.status.cluster import build
from infra.ops.status.view import group_table

GROUP = {"name": "gpu", "count": 6, "lt_version": 7, "spec": "new", "update_strategy": "rolling"}
STATES = [model.READY, model.READY, model.READY, model.DRAINING, model.DRAINING, model.BOOTING]
SPECS = ["new", "new", "new", "old", "old", "new"]


def cluster(specs=SPECS, group=GROUP):
    raw, slots = [], {}
    for i, (state, spec) in enumerate(zip(STATES, specs, strict=True)):
        iid = f"i-{i:017x}"
        tags = [{"Key": TAG_ROLE, "Value": "compute"}, {"Key": TAG_GROUP, "Value": "gpu"}]
        tags += [{"Key": TAG_LAUNCH_SPEC, "Value": spec}] if spec else []
        raw.append({"InstanceId": iid, "State": {"Name": "running"}, "InstanceType": "p5.48xlarge", "Tags": tags})
        slots[node_name("gpu", i)] = Slot(node_name("gpu", i), "gpu", i, iid, state)
    return build("c", raw, Loaded(slots=slots), {}, [group], 0.0)


def test_a_rolling_group_shows_how_many_nodes_are_on_the_new_version_draining_and_booting():
    [row] = cluster().groups
    assert row.note == "rolling to version 7: 4 of 6 on it, 2 draining, 1 booting"
    console = Console(width=300, record=True)
    console.print(group_table("c", cluster().groups))
    assert "rolling to version 7: 4 of 6 on it" in console.export_text()


def test_instances_without_the_tag_are_version_unknown_and_a_finished_roll_says_nothing():
    [row] = cluster(["new", "new", "new", "", "", "new"]).groups
    assert row.note.startswith("rolling to version 7: 4 of 6 on it") and "2 version unknown" in row.note
    [done] = cluster(["new"] * 6).groups
    assert done.note == ""
    [manual] = cluster(group={**GROUP, "update_strategy": "manual"}).groups
    assert manual.note.endswith("(updateStrategy manual: `hpcc replace` them)")
    [before] = cluster(group={"name": "gpu", "count": 6}).groups  # a program before versions
    assert before.note == ""
