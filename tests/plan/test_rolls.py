"""A group's roll as a guarded change (issue 37): when the controller replaces a group's running nodes, from two
groups documents (the offline plan) or from a preview's launch-template diffs and the config (`hpcc up`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hpcc_contract import groups as groups_format
from infra.config.parse import parse
from infra.config.stackfile import read_raw
from infra.plan.guard import ROLL, Change, guard_message, guarded, roll
from infra.plan.rolls import groups_doc, launch_rolls, roll_changes, roll_note, rolls

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
PARAM = "aws:ssm/parameter:Parameter"
P5 = {
    "name": "gpu",
    "instance_type": "p5.48xlarge",
    "count": 16,
    "efa": True,
    "market": "on-demand",
    "spec": "aaaa",
    "lt_version": 3,
    "max_unavailable": 2,
}


def entry(**changes) -> dict:
    return {**P5, **changes}


@pytest.mark.parametrize(
    "old, new, rolled",
    [
        (entry(), entry(instance_type="p4d.24xlarge", spec="bbbb"), [roll("gpu", ["instance_type"])]),
        (entry(), entry(spec="bbbb", update_strategy="terminate"), [roll("gpu", ["spec"])]),  # an image, a volume
        (entry(), entry(spec="bbbb", update_strategy="manual"), []),  # `hpcc replace NODE` each: nothing replaced
        (entry(), entry(lt_version=4, metadata_hop_limit=2), []),  # the same spec: the hop limit is set in place
        (entry(), entry(spec="bbbb", count=0), []),  # no node left to replace
        (None, entry(spec="bbbb"), []),  # a new group: its nodes are launched on the new spec
    ],
    ids=["rolling", "terminate", "manual", "hop-limit-only", "count-0", "new-group"],
)
def test_a_group_rolls_when_its_spec_changes_under_a_strategy_the_controller_acts_on(old, new, rolled):
    old_doc = {} if old is None else {"gpu": old}
    assert roll_changes(old_doc, {"gpu": new}) == rolled
    assert rolls(old, new) == bool(rolled)


def test_a_roll_is_guarded_and_named_as_the_operator_reads_it():
    change = roll("gpu", ["instance_type"])
    assert change == Change("gpu", ROLL, "replace", ("instance_type",))
    assert guarded([change, Change("gpu-lt", LT, "update")]) == [change]
    message = guard_message([change])
    assert "  replace nodes of group gpu (instance_type)" in message and "--allow-replace" in message


def test_the_plans_note_follows_the_same_rule():
    changed = entry(instance_type="p4d.24xlarge", spec="bbbb")
    assert roll_note("gpu", changed, entry(), "instanceType").startswith(
        "gpu: 16 nodes replaced by the controller, 2 at a time, after their jobs (p5.48xlarge -> p4d.24xlarge)"
    )
    assert roll_note("gpu", {**changed, "update_strategy": "manual"}, entry(), "instanceType") is None
    assert "in place; no node is replaced" in roll_note("gpu", entry(metadata_hop_limit=2), entry(), "metadataOptions")


def test_the_document_is_read_from_a_plans_groups_parameter():
    value = groups_format.dumps([P5])
    records = [{"name": "duo-groups-param", "type": PARAM, "inputs": {"value": value}}]
    assert groups_doc(records)["gpu"]["spec"] == "aaaa"
    assert groups_doc([{**records[0], "inputs": {"value": "not json"}}]) == {}


def cluster(**gpu):
    return parse(
        "us-east-1",
        {
            "name": "duo",
            "availabilityZone": "us-east-1a",
            "headNode": {"instanceType": "c6i.xlarge"},
            "nodeGroups": [
                {"name": "gpu", "instanceType": "p5.48xlarge", "count": 2, **gpu},
                {"name": "cpu", "instanceType": "c6i.16xlarge", "count": 4},
            ],
        },
    ).cluster


@pytest.mark.parametrize(
    "template, gpu, rolled",
    [
        (Change("duo-gpu-lt", LT, "update", ("instanceType",)), {}, [roll("gpu", ["instanceType"])]),
        (  # a root volume (the image's device name beside it) and a market
            Change("duo-gpu-lt", LT, "update", ("blockDeviceMappings", "instanceMarketOptions", "userData")),
            {"updateStrategy": "terminate"},
            [roll("gpu", ["blockDeviceMappings", "instanceMarketOptions"])],
        ),
        (Change("duo-gpu-lt", LT, "update", ("instanceType",)), {"updateStrategy": "manual"}, []),
        (Change("duo-gpu-lt", LT, "update", ("metadataOptions",)), {}, []),  # the hop limit: in place
        (Change("duo-gpu-lt", LT, "update", ("userData",)), {}, []),  # read at boot: new nodes get it
        (Change("duo-gpu-lt", LT, "create"), {}, []),  # a new group
        (Change("duo-gpu-lt", LT, "update", ("instanceType",)), {"count": 0}, []),
        (  # EFA on or off: a path below an input of the spec
            Change("duo-gpu-lt", LT, "update", ("networkInterfaces[0].interfaceType",)),
            {},
            [roll("gpu", ["networkInterfaces[0].interfaceType"])],
        ),
    ],
    ids=["type", "volume-market", "manual", "hop-limit-only", "user-data", "new-group", "count-0", "efa-path"],
)
def test_up_finds_a_roll_in_the_groups_launch_template_diff(template, gpu, rolled):
    assert launch_rolls([template, Change("duo-groups-param", PARAM, "update", ("value",))], cluster(**gpu)) == rolled


@pytest.fixture(scope="module")
def first_plan(tmp_path_factory):
    """c6i-oneccl (group compute: 4 x c6i.16xlarge, updateStrategy rolling by default) planned, as `--previous`."""
    from infra.plan.runner import plan_config

    out = tmp_path_factory.mktemp("first")
    plan_config(read_raw(EXAMPLES / "c6i-oneccl.yaml")).write(out)
    return out


def test_the_offline_plan_flags_a_roll_guarded_with_its_wording(first_plan, tmp_path):
    import yaml
    from typer.testing import CliRunner

    from infra.ops.cli import app
    from infra.plan.previous import PreviousPlan
    from infra.plan.runner import plan_config

    config = read_raw(EXAMPLES / "c6i-oneccl.yaml")
    config["hpcc:cluster"]["compute"]["instanceType"] = "c6i.32xlarge"
    stack = tmp_path / "Pulumi.cpu-oneccl.yaml"
    stack.write_text(yaml.safe_dump({"config": config}))
    args = ["plan", str(stack), "--out", str(tmp_path / "out"), "--previous", str(first_plan)]
    run = CliRunner().invoke(app, args, terminal_width=200)
    assert run.exit_code == 0, run.output
    said = " ".join(run.output.split())
    assert (
        "compute: 4 nodes replaced by the controller, 1 at a time, after their jobs (c6i.16xlarge -> c6i.32xlarge)"
        in said
    )
    # the Replaced and deleted table's row (its cells may fold): c6i.32xlarge has EFA, c6i.16xlarge has not
    assert re.search(r"│ replace │ nodes of group (compute )?│ group/roll │ efa, instance_type │ guarded │", said)
    assert "`hpcc up` stops before 1 of these unless run with --allow-replace" in said

    config["hpcc:cluster"]["compute"]["updateStrategy"] = "manual"
    assert plan_config(config, previous=PreviousPlan.load(first_plan)).rolls == []
