"""`hpcc status` of a controller-run cluster (moto: the ledger, the state bucket, EC2 by tag): per group asked,
launched, ready, failed, being replaced and protected; the controller's recent actions and a systemic alert; a
status counts only for the instance named by its key and its body; node-written text printed as plain text."""

from __future__ import annotations

import pytest
from moto import mock_aws
from rich.console import Console
from typer.testing import CliRunner

from hpcc_contract.names import Paths, node_name
from hpcc_node.controller import model
from hpcc_node.controller.membership import key_instance as instance_id_of_key
from hpcc_node.controller.model import Event, GroupState
from infra.ops.aws import Aws
from infra.ops.cli import app
from infra.ops.status.cluster import cluster_status
from infra.ops.status.view import table
from tests.ops.fleet import BUCKET, REGION, C, arn, fleet


@pytest.fixture
def f():
    with mock_aws():
        yield fleet({"gpu": 3, "cpu": 2})


def status():
    return cluster_status(Aws(REGION), C)


def status_cli(*extra):
    return CliRunner().invoke(app, ["status", "--cluster", C, "--region", REGION, *extra], env={"COLUMNS": "320"})


def groups(found):
    return {g.name: (g.asked, g.launched, g.ready, g.failed, g.replacing, g.protected) for g in found.groups}


def test_a_healthy_cluster_shows_every_group_ready_and_exits_zero(f):
    found = status()
    assert groups(found) == {"gpu": (3, 3, 3, 0, 0, ""), "cpu": (2, 2, 2, 0, 0, "")}
    assert [r.node for r in found.nodes] == ["head", "cpu-000", "cpu-001", "gpu-000", "gpu-001", "gpu-002"]
    assert all(r.ready and r.converged for r in found.nodes) and found.generation == 1
    out = status_cli()
    assert out.exit_code == 0, out.output
    assert "6/6 nodes ready, membership generation 1" in out.output


def test_failed_replacing_requested_protected_and_unnamed_are_counted_per_group(f):
    led = f.ledger()
    slots = led.load().slots
    led.put_slot(slots["gpu-000"], state=model.FAILED, reason="bootstrap: step efa failed (attempt cap)")
    led.put_slot(slots["gpu-001"], state=model.REPLACING, reason="instance: status check failed")
    led.put_slot(slots["cpu-000"], replace_requested=True)
    led.put_group(GroupState("cpu"), protected="10 bootstrap failures in a row: step lustre failed")
    f.launch("compute", "gpu")  # launched, not named yet
    f.groups({"gpu": 4, "cpu": 2})
    found = status()
    assert groups(found) == {
        "gpu": (4, 4, 1, 1, 1, ""),
        "cpu": (2, 2, 2, 0, 1, "10 bootstrap failures in a row: step lustre failed"),
    }
    rows = found.rows()
    assert rows["gpu-000"].failed and not rows["gpu-001"].failed and rows["gpu-001"].replacing
    unnamed = [r for r in found.nodes if r.slot is None and r.role != "head"]
    assert len(unnamed) == 1 and "not named yet" in unnamed[0].message
    out = status_cli()
    assert out.exit_code == 1
    assert (
        "left failed (bootstrap: step efa failed (attempt cap)); fix the cause, then `hpcc replace gpu-000`"
        in " ".join(out.output.split())
    )
    assert "being replaced: cpu-000, gpu-001" in out.output and "failed: gpu-000" in out.output


def test_the_controllers_recent_actions_and_a_systemic_alert_are_shown(f):
    led = f.ledger()
    now = f.clock()
    led.event(
        Event(
            now - 30,
            model.REPLACE,
            "gpu-002",
            "instance",
            "instance:status",
            "start",
            "instance: EC2 status check failed",
        ),
        1,
    )
    led.event(
        Event(
            now - 20,
            model.ALERT,
            "cluster",
            "systemic",
            "",
            "start",
            "6 nodes failing the same way (bootstrap:step lustre failed); no node touched",
        ),
        2,
    )
    led.alert("systemic:bootstrap:step lustre failed", now - 20)
    found = status()
    assert found.alerts == ["6 nodes failing the same way (bootstrap:step lustre failed); no node touched"]
    assert [(e.kind, e.node) for e in found.events] == [("replace", "gpu-002"), ("alert", "cluster")]
    out = status_cli()
    text = " ".join(out.output.split())
    assert out.exit_code == 1 and "ALERT 6 nodes failing the same way" in text
    assert "instance: EC2 status check failed" in text and "recent actions" in text


def test_a_status_counts_only_for_the_instance_its_key_and_body_name(f):
    old = f.ids["gpu-001"]
    led = f.ledger()
    slot = led.load().slots["gpu-001"]
    f.ec2.terminate_instances(InstanceIds=[old])
    led.put_slot(slot, state=model.REPLACING)
    slot = led.load().slots["gpu-001"]
    new = f.launch("compute", "gpu")
    slot = led.name(slot, new, f.clock())  # booting on the new instance
    f.status(new, name="gpu-001", phase="efa", step="efa", generation=1)
    f.s3.put_object(
        Bucket=BUCKET,
        Key=f"status/{arn(f.ids['gpu-002'])}.json",  # a body naming another instance
        Body=b'{"instance_id": "i-0forged", "phase": "failed", "ok": false}',
    )
    rows = status().rows()
    assert rows["gpu-001"].instance_id == new and rows["gpu-001"].phase == "efa" and not rows["gpu-001"].ready
    assert rows["gpu-002"].phase == "ready" and rows["gpu-002"].ready  # the forged "failed" ignored: the ledger stands
    assert any("names another instance" in n for n in status().notes)


def test_a_node_behind_on_membership_is_ready_but_not_converged(f):
    generation = f.publish()
    f.status(f.ids["cpu-001"], name="cpu-001", phase="ready", generation=generation)
    rows = status().rows()
    assert rows["cpu-001"].converged and not rows["cpu-000"].converged and rows["cpu-000"].ready
    console = Console(record=True, width=300)
    console.print(table(C, list(rows.values())))
    cells = {
        line.split("│")[1].strip(): line.split("│")[11].strip()
        for line in console.export_text().splitlines()
        if line.startswith("│")
    }
    assert cells["cpu-001"] == "2/2" and cells["cpu-000"] == "1/2" and cells["head"] == "1/2"


def test_status_keys_name_instances_by_arn_only():
    assert instance_id_of_key("status/arn:aws:ec2:us-east-1:123456789012:instance/i-0abc.json") == "i-0abc"
    assert instance_id_of_key("status/arn:aws-cn:ec2:cn-north-1:123456789012:instance/i-0abc.json") == "i-0abc"
    for key in (
        "status/gpu-000.json",
        "status/arn:aws:ec2:us-east-1:123456789012:instance/i-0abc/x.json",
        "membership.json",
        "status/arn:aws:ec2:us-east-1:1:volume/vol-1.json",
    ):
        assert instance_id_of_key(key) == ""


def test_unknown_cluster_is_a_message_not_a_traceback():
    with mock_aws():
        out = status_cli()
    assert out.exit_code == 1 and "nothing tagged hpcc:cluster=fleet" in out.output and "Traceback" not in out.output


def test_reads_are_filtered_pages_of_1000(f):
    aws = Aws(REGION)
    seen = {}
    for client, op in ((aws.client("ec2"), "DescribeInstances"), (aws.client("s3"), "ListObjectsV2")):
        client.meta.events.register(
            f"provide-client-params.{client.meta.service_model.service_id.hyphenize()}.{op}",
            lambda params, op=op, **_: seen.setdefault(op, dict(params)),
        )
    cluster_status(aws, C)
    assert seen["DescribeInstances"]["MaxResults"] == 1000
    assert {"Name": "tag:hpcc:cluster", "Values": [C]} in seen["DescribeInstances"]["Filters"]
    assert seen["ListObjectsV2"]["MaxKeys"] == 1000 and seen["ListObjectsV2"]["Prefix"] == "status/"


def test_a_4096_node_status_is_built_in_well_under_a_second_per_thousand():
    import time as clock

    from hpcc_node.controller.ledger import Loaded
    from hpcc_node.controller.model import Slot
    from infra.ops.status.cluster import build

    raw, slots, statuses = [], {}, {}
    for g in ("gpu", "cpu"):
        for i in range(2048):
            name, iid = node_name(g, i), f"i-{g}{i:05d}"
            raw.append(
                {
                    "InstanceId": iid,
                    "State": {"Name": "running"},
                    "InstanceType": "p5.48xlarge",
                    "PrivateIpAddress": f"10.0.{i // 250}.{i % 250}",
                    "Tags": [{"Key": "hpcc:role", "Value": "compute"}, {"Key": "hpcc:group", "Value": g}],
                }
            )
            slots[name] = Slot(name, g, i, iid, model.READY)
            statuses[iid] = {"instance_id": iid, "phase": "ready", "generation": 3}
    started = clock.perf_counter()
    found = build(
        C,
        raw,
        Loaded(slots=slots, membership={"generation": 3}),
        statuses,
        [{"name": "gpu", "count": 2048}, {"name": "cpu", "count": 2048}],
        0.0,
        slurm_on=True,
    )
    assert clock.perf_counter() - started < 4.0
    assert [(g.name, g.asked, g.launched, g.ready) for g in found.groups] == [
        ("gpu", 2048, 2048, 2048),
        ("cpu", 2048, 2048, 2048),
    ]
    assert all(r.converged for r in found.nodes)


def test_a_bundle_failure_is_reported_as_not_replaced_by_the_taxonomy(f):
    f.status(
        f.ids["gpu-002"],
        name="gpu-002",
        ok=False,
        phase="failed",
        step="sync",
        failure="bundle",
        message="bundle sha256 mismatch",
    )
    f.status(
        f.ids["gpu-001"],
        name="gpu-001",
        ok=False,
        phase="failed",
        step="efa",
        failure="bootstrap",
        message="no EFA device",
    )
    led = f.ledger()
    slots = led.load().slots
    for n in ("gpu-001", "gpu-002"):
        led.put_slot(slots[n], state=model.BOOTING)
    text = " ".join(status_cli().output.split())
    assert "gpu-002 failed at step sync: bundle: bundle sha256 mismatch" in text
    assert "next: a bundle failure, not replaced: report once for the cluster; a bad bundle is not a bad node" in text
    assert (
        "gpu-001 failed at step efa: bootstrap: no EFA device next: the controller replaces it (attempt 1 of 3)" in text
    )


def test_each_node_shows_its_health_verdict_with_the_check_and_the_controllers_action(f, tmp_path):
    """The fields the agent's health thread adds to its status (hpcc_node/health/service.status_fields)."""
    from hpcc_node.health import service, verdict

    failed = verdict.node_verdict([verdict.fail("xid", "Xid 79 fell off the bus", action="down", remedy="reboot")], 0)
    for node, v in (("gpu-001", failed), ("gpu-000", verdict.node_verdict([verdict.ok("gpu")], 0))):
        path = str(tmp_path / f"{node}.verdict")
        verdict.write_verdict(path, v)
        f.status(f.ids[node], name=node, phase="ready", **service.status_fields(path))
    rows = status().rows()
    assert (rows["gpu-001"].health, rows["gpu-000"].health, rows["gpu-002"].health) == ("fail xid: down", "ok", "")
    out = status_cli()
    line = next(x for x in out.output.splitlines() if "gpu-001" in x and "i-" in x)
    assert "fail xid: down" in line

    def headers(rows):
        return [c.header for c in table(C, rows).columns]

    assert "health" in headers(status().nodes)
    assert "health" not in headers([r for r in status().nodes if not r.health])  # no node runs the checks


def test_each_node_shows_when_its_agent_was_last_heard_and_a_silent_one_stands_out(f):
    """From the status object's LastModified (the agent's heartbeat rewrites it unchanged every 120 s): an agent
    silent past the controller's heartbeat timeout is red, as the controller is about to take the node out."""
    import time

    from infra.ops.status.view import heard_cell

    f.status(f.ids["gpu-001"], name="gpu-001", phase="ready")
    written = time.time()
    rows = cluster_status(Aws(REGION), C, clock=lambda: written + 30).rows()
    assert 25 <= rows["gpu-001"].heard <= 35 and heard_cell(rows["gpu-001"]).plain.endswith(" s ago")
    silent = cluster_status(Aws(REGION), C, clock=lambda: written + 700).rows()["gpu-001"]
    assert heard_cell(silent).plain == "11 min ago" and "red" in str(heard_cell(silent).style)
    line = next(x for x in status_cli().output.splitlines() if "gpu-001" in x and "i-" in x)
    assert " s ago" in line


def test_a_controller_whose_lease_expired_is_reported_not_running(f):
    out = status_cli()
    assert out.exit_code == 0 and "controller: head-1 holds the lease" in out.output
    f.ddb.update_item(
        TableName=f.table,
        Key={"pk": {"S": "lease"}},
        UpdateExpression="SET expires = :e",
        ExpressionAttributeValues={":e": {"N": str(f.clock() - 600)}},
    )
    found = status()
    assert found.controller == "head-1" and found.controller_down and -700 < found.lease_left <= -600
    out = status_cli()
    text = " ".join(out.output.split())
    assert out.exit_code == 1 and "controller not running (its lease expired" in text
    assert "systemctl status hpcc-controller" in text


def test_a_host_ca_rotation_in_progress_is_shown_with_its_phase(f):
    from hpcc_node import certstore

    assert status().rotation is None and "rotation 2026" not in status_cli().output
    Aws(REGION).call(
        "ssm",
        "put_parameter",
        Name=Paths(C).rotation,
        Type="String",
        Overwrite=True,
        Value=certstore.rotation_text(certstore.Rotation("20261124T190000Z", "switch")),
    )
    assert status().rotation == certstore.Rotation("20261124T190000Z", "switch")
    text = " ".join(status_cli().output.split())
    assert (
        "host CA and cluster key rotation 20261124T190000Z: phase switch (the new CA signs and the new keys log in; "
        "the old ones are still trusted)" in text
    )
    Aws(REGION).call("ssm", "put_parameter", Name=Paths(C).rotation, Type="String", Overwrite=True, Value="{not json")
    out = status_cli()
    assert out.exit_code == 0 and "reset it" in " ".join(out.output.split())  # a note, not a traceback


def test_a_controller_loop_over_a_malformed_status_shows_its_count_key_and_why_in_hpcc_status(f):
    """Issue 37, fault 6: the controller drops a status object it cannot read (and logs it), records how many and
    which in the ledger when that changes, and `hpcc status` says so: an operator sees why a node has no verdict."""
    from hpcc_node.controller.__main__ import groups_reader
    from hpcc_node.controller.loop import build_step

    key = f"status/{arn(f.ids['gpu-002'])}.json"
    f.s3.put_object(
        Bucket=BUCKET, Key=key, Body=f'{{"name": "gpu-002", "instance_id": "{f.ids["gpu-002"]}", "ok": "yes"}}'
    )
    step = build_step(f.ec2, f.ddb, f.s3, C, f.table, BUCKET, groups_reader(f.ssm, C), "head-1", f.clock)
    assert step()["lease"]
    text = " ".join(status_cli().output.split())
    assert f"the controller drops 1 malformed status object(s), no verdict from them: {key}: 'ok' is a string" in text
    version = f.ddb.get_item(TableName=f.table, Key={"pk": {"S": "dropped-statuses"}})["Item"]["v"]
    step()
    assert f.ddb.get_item(TableName=f.table, Key={"pk": {"S": "dropped-statuses"}})["Item"]["v"] == version  # unchanged
    f.status(f.ids["gpu-002"], name="gpu-002", phase="ready")  # its node writes a good one again
    step()
    assert "malformed status" not in status_cli().output
