"""`hpcc replace NODE...` records `replace_requested` in the ledger (no Pulumi run), and the real controller loop
then replaces exactly those nodes; unknown names write nothing and list the known ones; a request survives a
controller writing the same slot (conditional write at the version read)."""

from __future__ import annotations

import pytest
from moto import mock_aws
from typer.testing import CliRunner

from hpcc_node.controller import model, observe
from hpcc_node.controller.act import Executor, reconcile_once
from hpcc_node.controller.decide import decide
from hpcc_node.controller.model import Group, Report
from infra.ops.cli import app
from infra.ops.replace import UnknownNodes, request
from tests.ops.fleet import REGION, TABLE, C, fleet


@pytest.fixture
def f():
    with mock_aws():
        yield fleet({"gpu": 3})


def replace_cli(*args):
    return CliRunner().invoke(app, ["replace", "--cluster", C, "--region", REGION, *args], env={"COLUMNS": "300"})


def slots(f):
    return f.read().slots


def controller_loop(f) -> None:
    """One loop of the real controller (observe -> decide -> act) against moto, every node reporting ready."""
    led = f.ledger("head-1")
    groups = [Group("gpu", "c6i.large", 3, launch_template="lt", subnet_id=f.subnet)]
    reports = {n: Report(n, s.instance_id, True, at=f.clock()) for n, s in led.load().slots.items()}
    executor = Executor(f.ec2, led, f.s3, "unused", C, groups, f.clock, None)
    reconcile_once(
        lambda: observe.observe(f.ec2, led, C, f.clock, lambda: reports, None),
        lambda snap: decide(snap, groups, snap.now),
        executor,
        led,
    )


def test_replace_records_the_request_and_the_controller_replaces_that_node_only(f):
    out = replace_cli("gpu-001")
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "gpu-001" in text and "replacement requested in the ledger" in text
    assert "hpcc status --cluster fleet" in text and "journalctl -u hpcc-controller" in text
    got = slots(f)
    assert got["gpu-001"].replace_requested and not got["gpu-000"].replace_requested
    old = got["gpu-001"].instance_id
    controller_loop(f)
    got = slots(f)
    assert got["gpu-001"].state == model.REPLACING and not got["gpu-001"].replace_requested
    assert [s.state for n, s in sorted(got.items()) if n != "gpu-001"] == [model.READY, model.READY]
    state = f.ec2.describe_instances(InstanceIds=[old])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state in ("shutting-down", "terminated")
    events = f.read().events
    assert any(
        e.kind == model.REPLACE and e.node == "gpu-001" and "requested by hpcc replace" in e.detail for e in events
    )


def test_unknown_names_write_nothing_and_list_the_known_ones(f):
    before = slots(f)
    out = replace_cli("gpu-001", "gpu-009", "head")
    assert out.exit_code == 2 and "Traceback" not in out.output
    text = " ".join(out.output.split())
    assert "not a node of cluster 'fleet': gpu-009, head" in text and "gpu-000, gpu-001, gpu-002" in text
    assert "the head is Pulumi's, not the controller's: `pulumi up --replace" in text
    assert slots(f) == before


def test_a_second_request_writes_nothing(f):
    assert replace_cli("gpu-002").exit_code == 0
    version = slots(f)["gpu-002"].version
    out = replace_cli("gpu-002")
    assert out.exit_code == 0 and "requested already; nothing written" in out.output
    assert slots(f)["gpu-002"].version == version


def test_a_request_racing_the_controllers_write_is_kept(f):
    """The controller writes the slot between the request's read and its put: the put is refused, read again."""
    led = f.ledger("head-1")
    real_get = f.ddb.get_item
    raced = []

    class Racing:
        exceptions = f.ddb.exceptions

        def get_item(self, **kw):
            got = real_get(**kw)
            if not raced:
                raced.append(1)
                led.put_slot(led.load().slots["gpu-000"], reason="the controller's own write")
            return got

        def update_item(self, **kw):
            return f.ddb.update_item(**kw)

    done = request(Racing(), TABLE, C, ["gpu-000"], ["gpu-000", "gpu-001"])
    assert [d.node for d in done] == ["gpu-000"] and raced
    slot = slots(f)["gpu-000"]
    assert slot.replace_requested and slot.reason == "the controller's own write"


def test_naming_nothing_is_a_usage_error():
    with pytest.raises(UnknownNodes, match="name at least one node"):
        request(None, TABLE, C, [], ["gpu-000"])


def test_a_slot_that_keeps_changing_is_a_message_not_a_traceback(f, monkeypatch):
    monkeypatch.setattr("infra.ops.replace.RETRIES", 0)
    out = replace_cli("gpu-000")
    assert out.exit_code == 1 and "the slot changed 0 times while asking; run hpcc replace again" in out.output
    assert "Traceback" not in out.output and not slots(f)["gpu-000"].replace_requested
