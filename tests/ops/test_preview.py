"""Pulumi's preview events as hpcc Changes, and the guard that stops replacements (no stack, no AWS)."""

from __future__ import annotations

import pytest
from rich.console import Console

from infra.ops import OpsError
from infra.ops.preview import ChangeCollector, blocking, check, print_summary, step_change
from infra.plan.guard import Change
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
