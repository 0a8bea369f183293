"""`hpcc hostfile` from the membership the controller published: every group or some, ready nodes only, in name
order with holes kept, slots from each group's instance type; bad input is a message."""

from __future__ import annotations

import pytest
from moto import mock_aws
from typer.testing import CliRunner

from hpcc_node.controller import model
from infra.ops import OpsError
from infra.ops.aws import Aws
from infra.ops.cli import app
from infra.ops.hostfile import entries, render
from tests.ops.fleet import REGION, C, fleet


@pytest.fixture
def f():
    with mock_aws():
        yield fleet({"gpu": 3, "cpu": 2})


def ips(f, *nodes):
    found = {
        i["InstanceId"]: i["PrivateIpAddress"]
        for r in f.ec2.describe_instances()["Reservations"]
        for i in r["Instances"]
    }
    return [found[f.ids[n]] for n in nodes]


def test_every_group_and_one_group_in_name_order_ready_nodes_only(f):
    led = f.ledger()
    slots = led.load().slots
    led.put_slot(slots["gpu-001"], state=model.BOOTING)  # not ready: no ranks on it
    led.forget(led.load().slots["cpu-000"])  # a hole in the names
    f.publish()
    aws = Aws(REGION)
    assert [e.name for e in entries(aws, C)] == ["cpu-001", "gpu-000", "gpu-002"]
    assert [e.ip for e in entries(aws, C, ["gpu"])] == ips(f, "gpu-000", "gpu-002")
    slots_of = {e.name: e.slots for e in entries(aws, C)}
    assert slots_of["cpu-001"] == 2 * slots_of["gpu-000"]  # c6i.xlarge has twice c6i.large's cores
    assert render(aws, C, "hosts", ["cpu"]) == f"{ips(f, 'cpu-001')[0]}\n"


def test_the_cli_writes_per_group_and_refuses_unknown_groups(f, tmp_path):
    out = CliRunner().invoke(
        app, ["hostfile", "--cluster", C, "--region", REGION, "--group", "gpu", "--out", str(tmp_path / "h")]
    )
    assert out.exit_code == 0, out.output
    assert (tmp_path / "h").read_text().splitlines() == [
        f"{ip} slots=1" for ip in ips(f, "gpu-000", "gpu-001", "gpu-002")
    ]
    bad = CliRunner().invoke(app, ["hostfile", "--cluster", C, "--region", REGION, "--group", "tpu"])
    assert bad.exit_code == 1 and "--group tpu: not a group of cluster fleet; its groups are: cpu, gpu" in bad.output


def test_no_ready_node_is_a_message(f):
    led = f.ledger()
    for slot in led.load().slots.values():
        led.put_slot(slot, state=model.BOOTING)
    f.publish()
    with pytest.raises(OpsError, match="no ready compute node in cluster fleet's membership"):
        render(Aws(REGION), C)
