"""Every cell of every operator table is cleaned (infra/ops/terminal.py): node-written records, with markup and
terminal escapes in every field, print as plain text; a node-written `ip` is shown only if it is an address and
only from the live instance's own status."""

from __future__ import annotations

import pytest
from rich.console import Console
from rich.table import Table

from infra.ops.reap_kinds import Inventory, Item
from infra.ops.reap_report import table as reap_table
from infra.ops.status import NodeStatus, apply_status, table
from infra.ops.terminal import row
from tests.ops_support import put_status
from tests.test_ops_status import C, cluster, status_cli  # noqa: F401 - cluster is a fixture

EVIL = "\x1b]0;t\x07\x1b[2J[link=https://evil.example/x]10.0.16.9[/link]\x1b]52;c;ZXZpbA==\x07 [/oops]"
SHOWN = "[link=https://evil.example/x]10.0.16.9[/link] [/oops]"  # what is left: printed, not parsed


def rendered(renderable) -> str:
    console = Console(record=True, width=400, force_terminal=True, color_system="truecolor")
    console.print(renderable)
    return console.export_text(styles=True)


def assert_inert(out: str) -> None:
    assert "\x1b]" not in out and "\x07" not in out and "\x1b[2J" not in out  # no OSC (title, link, clipboard)
    assert "[/oops]" in out and "[link=https://evil.example/x]" in out  # shown as typed: no markup was parsed


def test_every_field_of_a_node_status_prints_as_plain_text(cluster):
    fields = dict(phase=EVIL, step=EVIL, message=EVIL, updated=EVIL, logTail=[EVIL, EVIL], hostsVersion=EVIL,
                  ip=EVIL, slurm={EVIL: "compute-000", "idle": EVIL})
    for node in ("head", "compute-001"):
        put_status(cluster, C, node, **fields)
    put_status(cluster, C, "compute-002", instanceId=EVIL, ip=EVIL, phase=EVIL)  # a writer that is not the instance
    out = status_cli()
    assert "Traceback" not in out.output and out.exit_code in (0, 1)
    assert_inert(out.output)


def test_a_status_ip_is_used_only_from_the_live_instance_and_only_if_it_is_an_address():
    def ip(status: dict) -> str | None:
        return apply_status(NodeStatus("compute-000", "compute", "i-0live", state="terminated"), status).private_ip

    assert ip({"instanceId": "i-0live", "ip": "10.0.16.9"}) == "10.0.16.9"
    assert ip({"instanceId": "i-0live", "ip": EVIL}) is None
    assert ip({"instanceId": "i-0live", "ip": "999.999.999.999"}) is None
    assert ip({"instanceId": "i-0live", "ip": ["10.0.16.9"]}) is None
    assert ip({"instanceId": "i-0old", "ip": "10.0.16.9"}) is None  # a previous instance's word
    assert ip({"ip": "10.0.16.9"}) is None
    dead = NodeStatus("compute-000", "compute", "i-0live", state="terminated", private_ip=None)
    assert_inert(rendered(table(C, [apply_status(dead, {"instanceId": "i-0live", "ip": EVIL, "message": EVIL})])))


@pytest.mark.parametrize("maker", ["status", "reap", "row"])
def test_every_table_cleans_every_cell(maker):
    if maker == "status":
        r = NodeStatus(EVIL, EVIL, EVIL, EVIL, EVIL, EVIL, EVIL, EVIL, EVIL, EVIL, slurm=EVIL)
        out = rendered(table(EVIL, [r]))
    elif maker == "reap":
        out = rendered(reap_table(Inventory(EVIL, "us-east-1", items=[Item(EVIL, EVIL, EVIL, result=EVIL)]), "t"))
    else:
        t = Table()
        t.add_column("x")
        t.add_column("y")
        row(t, EVIL, None)
        out = rendered(t)
    assert_inert(out)
