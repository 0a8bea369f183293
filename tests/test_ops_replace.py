"""`hpcc replace NODE...`: exactly those instances replaced (the guard lets only them through), then a wait
until they are ready on their new instances and every node has applied the new hosts (fake stack, moto AWS)."""

from __future__ import annotations

import pytest
from rich.console import Console
from typer.testing import CliRunner

from infra.cli import app
from infra.ops import OpsError
from infra.ops.aws import Aws
from infra.ops.replace import UnknownNodes, replace
from infra.plan.embedded_aws import embedded_aws
from tests.ops_support import EXAMPLES, FakeStack, pre_event, put_status, replace_instance, replacement_events

REGION = "us-east-1"
CPU = EXAMPLES / "c6i-oneccl.yaml"
C = "cpu-oneccl"
INSTANCE = "aws:ec2/instance:Instance"
PARAM = "aws:ssm/parameter:Parameter"
NODES = ["head", "compute-000", "compute-001", "compute-002", "compute-003"]


def ready_cluster(env) -> FakeStack:
    stack = FakeStack(env, CPU).planned()
    for node in NODES:
        put_status(env, C, node, phase="ready", step="launch-env")
    # What Pulumi previews for `--replace`: each named URN replaced, /hosts updated with the new address.
    stack.events = lambda kw: [e for u in kw.get("replace", []) for e in replacement_events(u, INSTANCE)] + \
        [pre_event("update", stack.urn(f"{C}-hosts-param"), PARAM, diffs=["value"])]
    return stack


def run(stack, tmp_path, nodes, out=None, **options):
    return replace(CPU, "dev", nodes, aws=Aws(REGION), stack_factory=lambda name: stack, console=out or Console(record=True, width=200),
                   hostfile_path=tmp_path / "hostfile", poll=0, **options)


def test_replace_passes_exactly_that_instance_and_waits_for_it_and_the_new_hosts(tmp_path):
    with embedded_aws(REGION) as env:
        stack = ready_cluster(env)
        swapped = {}
        stack.on_up = lambda kw: swapped.update(zip(("old", "new"), replace_instance(env, C, "compute-001")))
        polls = []

        def agents(_seconds):  # poll 1: the new instance finishes its bootstrap; poll 2: every node applies /hosts
            polls.append(1)
            if len(polls) == 1:
                put_status(env, C, "compute-001", phase="ready", step="launch-env")
            else:
                for node in NODES:
                    put_status(env, C, node, phase="ready", step="launch-env")

        report = run(stack, tmp_path, ["compute-001"], sleep=agents)
        urn = stack.urn(f"{C}-compute-001")
        assert [(name, kw.get("replace")) for name, kw in stack.calls if name in ("preview", "up")] == \
            [("preview", [urn]), ("up", [urn])]
        assert report.ok and len(polls) == 2
        assert report.readiness.nodes["compute-001"].instance_id == swapped["new"] != swapped["old"]


def test_replace_times_out_naming_the_old_status_and_the_nodes_behind_on_hosts(tmp_path):
    with embedded_aws(REGION) as env:
        stack = ready_cluster(env)
        stack.on_up = lambda kw: replace_instance(env, C, "compute-001")
        out = Console(record=True, width=200)
        report = run(stack, tmp_path, ["compute-001"], out, wait_seconds=0, sleep=lambda _: None)
        text = out.export_text()
        assert not report.ok and [r.node for r in report.readiness.waiting] == sorted(NODES)
        assert "compute-001 not ready: instance running, bootstrap phase pending; status written by i-" in text
        assert "(a previous instance)" in text
        assert "compute-002 ready but not converged: applied hosts version 1, current 2" in text


def test_replace_is_stopped_by_another_guarded_change_but_not_by_its_own(tmp_path):
    with embedded_aws(REGION) as env:
        stack = ready_cluster(env)
        own = stack.events
        stack.events = lambda kw: own(kw) + replacement_events(stack.urn(f"{C}-compute-002"), INSTANCE, ["launchTemplate.version"])
        with pytest.raises(OpsError, match="replace instance cpu-oneccl-compute-002") as stopped:
            run(stack, tmp_path, ["compute-001"], sleep=lambda _: None)
        assert "compute-001" not in str(stopped.value)
        assert [name for name, _ in stack.calls if name in ("preview", "up")] == ["preview"]
        stack.events = own
        report = run(stack, tmp_path, ["compute-001"], wait_seconds=0, sleep=lambda _: None)
        assert [name for name, _ in stack.calls if name in ("preview", "up")] == ["preview", "preview", "up"]
        # this fake up replaced nothing: compute-001 is still on the instance it was to leave, so it is not done
        assert [r.node for r in report.readiness.waiting] == ["compute-001"] and not report.readiness.failed


def test_unknown_nodes_are_named_with_the_known_ones(tmp_path, monkeypatch):
    with embedded_aws(REGION) as env:
        stack = ready_cluster(env)
        with pytest.raises(UnknownNodes, match=r"not a node of stack 'dev': compute-009, login; its nodes are: "
                                               r"head, compute-000, compute-001, compute-002, compute-003"):
            run(stack, tmp_path, ["compute-001", "compute-009", "login"])
        assert [name for name, _ in stack.calls if name in ("preview", "up")] == []
        monkeypatch.setattr("infra.ops.up.require_pulumi", lambda which=None: "/usr/bin/pulumi")
        monkeypatch.setattr("infra.ops.up.local_stack", lambda name, project: stack)
        out = CliRunner().invoke(app, ["replace", str(CPU), "--stack", "dev", "compute-009"])
        assert out.exit_code == 2 and "compute-009" in out.output and "Traceback" not in out.output
