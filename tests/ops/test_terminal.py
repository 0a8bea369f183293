"""Every cell of every operator table is cleaned (infra/ops/terminal.py): node-written statuses and ledger-written
reasons, actions and alerts, with markup and terminal escapes in every field, print as plain text; a node-written
`ip` is shown only if it is an address and only from the live instance's own status."""

from __future__ import annotations

import pytest
from moto import mock_aws
from rich.console import Console
from rich.table import Table

from hpcc_node.controller import model
from hpcc_node.controller.model import Event, GroupState
from infra.ops.reap.kinds import Inventory, Item
from infra.ops.reap.report import table as reap_table
from infra.ops.status.cluster import GroupRow, NodeStatus, apply_status
from infra.ops.status.view import events_table, group_table, table
from infra.ops.terminal import row
from tests.ops.fleet import fleet
from tests.ops.test_status import status_cli

EVIL = "\x1b]0;t\x07\x1b[2J[link=https://evil.example/x]10.0.16.9[/link]\x1b]52;c;ZXZpbA==\x07 [/oops]"


def rendered(renderable) -> str:
    console = Console(record=True, width=400, force_terminal=True, color_system="truecolor")
    console.print(renderable)
    return console.export_text(styles=True)


def assert_inert(out: str) -> None:
    assert "\x1b]" not in out and "\x07" not in out and "\x1b[2J" not in out  # no OSC (title, link, clipboard)
    assert "[/oops]" in out and "[link=https://evil.example/x]" in out  # shown as typed: no markup was parsed


def test_every_node_and_ledger_written_field_prints_as_plain_text():
    with mock_aws():
        f = fleet({"gpu": 3})
        fields = dict(
            phase=EVIL,
            step=EVIL,
            message=EVIL,
            updated=EVIL,
            logTail=[EVIL, EVIL],
            generation=EVIL,
            ip=EVIL,
            failure=EVIL,
            evidence=EVIL,
            slurm={EVIL: "gpu-000", "idle": EVIL},
        )
        f.status(f.head, name="head", **fields)
        f.status(f.ids["gpu-001"], name="gpu-001", ok=False, **fields)
        led = f.ledger()
        led.put_slot(led.load().slots["gpu-002"], state=model.FAILED, reason=EVIL)
        led.put_group(GroupState("gpu"), protected=EVIL, status=EVIL)
        led.event(Event(f.clock(), model.ALERT, EVIL, EVIL, EVIL, "start", EVIL), 1)
        out = status_cli()
    assert "Traceback" not in out.output and out.exit_code == 1
    assert_inert(out.output)


def test_a_status_ip_is_used_only_from_the_live_instance_and_only_if_it_is_an_address():
    def ip(status: dict) -> str | None:
        return apply_status(NodeStatus("gpu-000", "compute", "i-0live", state="terminated"), status).private_ip

    assert ip({"instance_id": "i-0live", "ip": "10.0.16.9"}) == "10.0.16.9"
    assert ip({"instance_id": "i-0live", "ip": EVIL}) is None
    assert ip({"instance_id": "i-0live", "ip": "999.999.999.999"}) is None
    assert ip({"instance_id": "i-0live", "ip": ["10.0.16.9"]}) is None
    assert ip({"instance_id": "i-0old", "ip": "10.0.16.9"}) is None  # a previous instance's word
    assert ip({"ip": "10.0.16.9"}) is None
    dead = NodeStatus("gpu-000", "compute", "i-0live", state="terminated", private_ip=None)
    assert_inert(rendered(table("c", [apply_status(dead, {"instance_id": "i-0live", "ip": EVIL, "message": EVIL})])))


@pytest.mark.parametrize("maker", ["nodes", "groups", "events", "reap", "row"])
def test_every_table_cleans_every_cell(maker):
    if maker == "nodes":
        r = NodeStatus(EVIL, EVIL, EVIL, EVIL, EVIL, EVIL, EVIL, EVIL, EVIL, EVIL, slurm=EVIL, group=EVIL, slot=EVIL)
        out = rendered(table(EVIL, [r]))
    elif maker == "groups":
        out = rendered(group_table(EVIL, [GroupRow(EVIL, 1, 1, 1, 0, 0, EVIL, EVIL)]))
    elif maker == "events":
        out = rendered(events_table([Event(0.0, EVIL, EVIL, EVIL, EVIL, EVIL, EVIL)]))
    elif maker == "reap":
        out = rendered(reap_table(Inventory(EVIL, "us-east-1", items=[Item(EVIL, EVIL, EVIL, result=EVIL)]), "t"))
    else:
        t = Table()
        t.add_column("x")
        t.add_column("y")
        row(t, EVIL, None)
        out = rendered(t)
    assert_inert(out)
