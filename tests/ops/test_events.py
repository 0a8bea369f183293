"""`hpcc events` (infra/ops/events.py): every action the controller kept in its ledger, filtered by node or group,
by kind and by age; a kind the controller never records is a message naming --kind, not a traceback."""

from __future__ import annotations

import pytest
from moto import mock_aws
from typer.testing import CliRunner

from hpcc_node.controller import model
from hpcc_node.controller.model import Event
from infra.ops.cli import app
from infra.ops.events import select
from tests.ops.fleet import REGION, C, fleet


@pytest.fixture
def f():
    with mock_aws():
        yield fleet({"gpu": 3})


def events_cli(*extra):
    out = CliRunner().invoke(app, ["events", "--cluster", C, "--region", REGION, *extra], env={"COLUMNS": "250"})
    return out.exit_code, " ".join(out.output.split())


def test_the_kept_actions_are_listed_oldest_first_and_filtered(f):
    led, now = f.ledger(), f.clock()
    for seq, (ago, kind, node, detail) in enumerate(
        [
            (3 * 3600, model.DOWN, "gpu-001", "hpcc: xid: Xid 79 on PCI:0000:53:00"),
            (3 * 3600 - 40, model.REPLACE, "gpu-001", "health: xid: Xid 79 (contact support)"),
            (600, model.DRAIN, "gpu-002", "hpcc: disk_free: / has 3 GiB free"),
            (60, model.SPARES, "gpu", "spares: hold gpu-002"),
        ],
        1,
    ):
        led.event(Event(now - ago, kind, node, "health", "", "start", detail), seq)
    code, text = events_cli()
    assert code == 0 and "the controller's actions" in text
    assert text.index("Xid 79 on PCI") < text.index("contact support") < text.index("3 GiB free") < text.index("hold")
    code, text = events_cli("--node", "gpu-001")
    assert code == 0 and "Xid 79" in text and "3 GiB free" not in text and "hold gpu-002" not in text
    code, text = events_cli("--kind", "drain", "--kind", "spares", "--since-minutes", "30")
    assert code == 0 and "3 GiB free" in text and "hold gpu-002" in text and "Xid 79" not in text
    code, text = events_cli("--node", "gpu-000")
    assert code == 0 and "no action of the controller recorded" in text


def test_a_kind_the_controller_never_records_is_a_message_not_a_traceback(f):
    code, text = events_cli("--kind", "explode")
    assert code != 0 and "--kind explode: not an action the controller records" in text
    assert "Traceback" not in text


def test_select_is_by_age_node_and_kind():
    evs = [Event(100.0, model.DOWN, "a-000"), Event(50.0, model.DRAIN, "a-001"), Event(190.0, model.DOWN, "a-001")]
    assert [e.at for e in select(evs, 200.0)] == [50.0, 100.0, 190.0]
    assert [e.at for e in select(evs, 200.0, since_seconds=120)] == [100.0, 190.0]
    assert [e.at for e in select(evs, 200.0, nodes=["a-001"], kinds=[model.DOWN])] == [190.0]
