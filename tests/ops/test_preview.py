"""Pulumi's preview events as hpcc Changes, and the guard that stops replacements (no stack, no AWS)."""

from __future__ import annotations

import pytest
from rich.console import Console

from infra.ops import OpsError
from infra.ops.preview import ChangeCollector, blocking, check, preview, print_summary, step_change
from infra.plan.guard import Change, roll
from tests.ops.support import pre_event, replacement_events

INSTANCE = "aws:ec2/instance:Instance"
PARAM = "aws:ssm/parameter:Parameter"
URN = "urn:pulumi:dev::hpcc::hpcc:cluster:Compute$aws:ec2/instance:Instance::bert-compute-001"


@pytest.mark.parametrize(
    "op, action",
    [
        ("create", "create"),
        ("update", "update"),
        ("replace", "replace"),
        ("create-replacement", "replace"),
        ("delete-replaced", "replace"),
        ("delete", "delete"),
        ("same", None),
        ("read", None),
        ("read-replacement", None),
        ("refresh", None),
        ("discard", None),
        ("import", None),
    ],
)
def test_each_engine_op_maps_to_one_action_or_none(op, action):
    change = step_change(
        pre_event(op, URN, INSTANCE, keys=["launchTemplate"], diffs=["launchTemplate"]).resource_pre_event.metadata
    )
    assert (change and change.action) == action
    if change:
        assert change.name == "bert-compute-001" and change.type == INSTANCE


def test_a_replacement_is_one_change_with_the_keys_that_force_it():
    collect = ChangeCollector()
    for event in replacement_events(URN, INSTANCE, keys=["launchTemplate.version"]):
        collect(event)
    collect(pre_event("same", URN.replace("compute-001", "compute-002"), INSTANCE))
    collect(
        pre_event(
            "update", "urn:pulumi:dev::hpcc::aws:ssm/parameter:Parameter::bert-hosts-param", PARAM, diffs=["value"]
        )
    )
    assert collect.changes == [
        Change("bert-compute-001", INSTANCE, "replace", ("launchTemplate.version",)),
        Change("bert-hosts-param", PARAM, "update", ("value",)),
    ]


def test_events_without_a_resource_step_are_ignored():
    from pulumi.automation.events import EngineEvent

    collect = ChangeCollector()
    collect(EngineEvent.from_json({"sequence": 1, "timestamp": 0, "stdoutEvent": {"message": "hi", "color": "never"}}))
    assert collect.changes == []


def test_named_replacements_pass_and_everything_else_guarded_still_stops():
    changes = [
        Change("bert-compute-001", INSTANCE, "replace"),
        Change("bert-compute-002", INSTANCE, "replace"),
        Change("bert-compute-003", INSTANCE, "delete"),
        Change("bert-hosts-param", PARAM, "update"),
    ]
    assert [c.name for c in blocking(changes, ["bert-compute-001"])] == ["bert-compute-002", "bert-compute-003"]
    assert blocking(changes[:1], ["bert-compute-001"]) == []
    deleting = Change("bert-compute-001", INSTANCE, "delete")  # naming a node allows its replacement, not its deletion
    assert blocking([deleting], ["bert-compute-001"]) == [deleting]
    with pytest.raises(OpsError, match="replace instance bert-compute-002") as stopped:
        check(changes, allow_replace=False, allowed_replacements=["bert-compute-001"])
    assert "bert-compute-001" not in str(stopped.value)
    check(changes, allow_replace=True)  # --allow-replace lets everything through
    check(changes[:1] + changes[3:], allow_replace=False, allowed_replacements=["bert-compute-001"])


def test_summary_counts_actions_and_names_every_guarded_change():
    out = Console(record=True, width=200)
    print_summary(
        out,
        [
            Change("a", PARAM, "update"),
            Change("b", PARAM, "update"),
            Change("c", INSTANCE, "create"),
            Change("d", INSTANCE, "replace", ("launchTemplate.version",)),
        ],
    )
    text = out.export_text()
    assert "preview: 1 to create, 2 to update, 1 to replace" in text
    assert "replace instance d (launchTemplate.version)" in text and "instance c" not in text


LT = "aws:ec2/launchTemplate:LaunchTemplate"
SECRET = {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", "ciphertext": "[secret]"}
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"  # a value known only once applied (pulumi's stack/deployment.go)


def step(op: str, name: str, type_: str, diffs: list[str], old: dict | None, new: dict | None):
    """A ResourcePreEvent with the states Pulumi's event log carries (secrets blinded, unknowns as a placeholder)."""
    from pulumi.automation.events import EngineEvent

    urn = f"urn:pulumi:dev::hpcc::hpcc:cluster:Compute${type_}::{name}"
    metadata = {"op": op, "urn": urn, "type": type_, "provider": "", "diffs": diffs}
    metadata |= {side: {"type": type_, "urn": urn, "inputs": s} for side, s in (("old", old), ("new", new)) if s}
    return EngineEvent.from_json({"sequence": 1, "timestamp": 0, "resourcePreEvent": {"metadata": metadata}})


def new_type_events(template_diffs: list[str]) -> list:
    """A preview of group gpu's launch changed: its template updated, the groups value unreadable (a secret before,
    unknown after: it carries the template's new version)."""
    return [
        step("update", "duo-groups-param", PARAM, ["value"], {"value": SECRET}, {"value": UNKNOWN}),
        step(
            "update",
            "duo-gpu-lt",
            LT,
            template_diffs,
            {"name": "hpcc-duo-gpu", "instanceType": "p5.48xlarge"},
            {"name": "hpcc-duo-gpu", "instanceType": "p4d.24xlarge"},
        ),
    ]


class PreviewOnly:
    def __init__(self, events):
        self.events = events

    def preview(self, on_event, **_):
        for event in self.events:
            on_event(event)


def duo(strategy: str = "rolling"):
    from infra.config.parse import parse

    return parse(
        "us-east-1",
        {
            "name": "duo",
            "availabilityZone": "us-east-1a",
            "headNode": {"instanceType": "c6i.xlarge"},
            "nodeGroups": [{"name": "gpu", "instanceType": "p4d.24xlarge", "count": 16, "updateStrategy": strategy}],
        },
    ).cluster


def test_up_stops_before_a_groups_roll_unless_allowed():
    changes = preview(PreviewOnly(new_type_events(["instanceType"])), duo())
    assert roll("gpu", ["instanceType"]) in changes
    with pytest.raises(OpsError, match=r"replace nodes of group gpu \(instanceType\)\n.*--allow-replace"):
        check(changes, allow_replace=False)
    with pytest.raises(OpsError, match="replace nodes of group gpu"):  # naming a node does not allow a roll
        check(changes, allow_replace=False, allowed_replacements=["gpu", "gpu-001"])
    check(changes, allow_replace=True)
    out = Console(record=True, width=200)
    print_summary(out, changes)
    text = out.export_text()
    assert "preview: 2 to update\n" in text and "  replace nodes of group gpu (instanceType)" in text


def test_up_goes_ahead_when_no_group_rolls():
    assert blocking(preview(PreviewOnly(new_type_events(["userData"])), duo())) == []  # user data: read at boot
    assert blocking(preview(PreviewOnly(new_type_events(["instanceType"])), duo("manual"))) == []
    assert blocking(preview(PreviewOnly(new_type_events(["instanceType"])))) == []  # no config: resources only
