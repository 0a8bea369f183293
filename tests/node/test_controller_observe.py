"""observe(): Slurm's node lines parsed (reasons, not-responding marks), instances read by the cluster's tag in
pages from moto, status checks and scheduled events from a fake EC2, and the agents' reports fetched only where
their ETag changed."""

from __future__ import annotations

import json
import logging
from datetime import UTC

import boto3
import pytest
from moto import mock_aws

from hpcc_node.controller import fleet, membership, observe, slurm_records
from hpcc_node.controller.ledger import Loaded
from hpcc_node.controller.model import Group, Slot
from tests.node.controller_fakes import FakeEC2, moto_launch_template


def node(name, addr, state, flags=(), reason="", shape="v0.0.38"):
    """One node of `sinfo --json` (Slurm 21.08/22.05: a base state and its flags) or `scontrol --json show nodes`
    (23.02 and later: one list of states)."""
    if shape == "v0.0.38":
        return {"name": name, "address": addr, "state": state.lower(), "state_flags": list(flags), "reason": reason}
    return {"name": name, "address": addr, "state": [state, *flags], "reason": reason}


def nodes_json(shape):
    return json.dumps(
        {
            "nodes": [
                node("gpu-000", "10.0.0.4", "IDLE", ["CLOUD"], shape=shape),
                node("gpu-001", "10.0.0.5", "DOWN", ["CLOUD", "NOT_RESPONDING"], "Not responding", shape),
                node("gpu-002", "10.0.0.6", "MIXED", ["DRAIN"], "hpcc: instance: scheduled instance-retirement", shape),
                node("gpu-003", "gpu-003", "IDLE", ["DRAIN"], "alice: bad GPU 3, see ticket 12", shape),
                # a reason carrying node-written evidence: its text stays a reason, never the node's state or address
                node(
                    "gpu-004", "10.0.0.8", "IDLE", [], "hpcc: xid: pid=1 NodeAddr=10.9.9.9 State=DOWN Reason=x", shape
                ),
            ]
        }
    )


@pytest.mark.parametrize("shape", ["v0.0.38", "v0.0.40"])
def test_slurm_node_records_give_states_reasons_and_addresses(shape):
    nodes = observe.slurm_nodes(nodes_json(shape))
    assert nodes["gpu-000"].states == frozenset({"IDLE", "CLOUD"}) and nodes["gpu-000"].reason == ""
    assert nodes["gpu-000"].addr == "10.0.0.4"
    assert nodes["gpu-001"].states == frozenset({"DOWN", "NOT_RESPONDING", "CLOUD"})
    assert nodes["gpu-001"].reason == "Not responding"
    assert nodes["gpu-002"].reason == "hpcc: instance: scheduled instance-retirement"
    assert nodes["gpu-003"].reason == "alice: bad GPU 3, see ticket 12"
    assert (nodes["gpu-004"].addr, nodes["gpu-004"].states) == ("10.0.0.8", frozenset({"IDLE"}))


def test_a_reason_cannot_override_a_nodes_state_or_address_in_the_fixed_fields_form():
    """Issue 33, finding 7, where Slurm has no JSON: the reason is the last field and read whole."""
    text = (
        "gpu-004|10.0.0.8|idle+drain|hpcc: xid: NodeAddr=10.9.9.9|State=IDLE\n"
        "gpu-005|10.0.0.9|down+not_responding|none\n"
        "gpu-006 NodeAddr=1.2.3.4|10.0.0.10|idle|x\n"
    )
    nodes = slurm_records.nodes_from_fields(text)
    assert (nodes["gpu-004"].addr, nodes["gpu-004"].states) == ("10.0.0.8", frozenset({"IDLE", "DRAIN"}))
    assert nodes["gpu-004"].reason == "hpcc: xid: NodeAddr=10.9.9.9|State=IDLE"
    assert nodes["gpu-005"].states == frozenset({"DOWN", "NOT_RESPONDING"}) and nodes["gpu-005"].reason == ""
    assert set(nodes) == {"gpu-004", "gpu-005"}  # a line whose name is not a name: dropped


def test_a_reason_hpcc_writes_holds_no_key_token():
    """Issue 33, finding 7: the evidence in a reason is node-written; what hpcc gives Slurm has no `Key=`."""
    from hpcc_node.controller.act_batch import state_args
    from hpcc_node.health.verdict import CheckResult, clean_reason, slurm_reason

    evidence = "Xid 79 pid=0 NodeAddr=10.9.9.9 State=IDLE\nJobId=1 \u202eReason=x"
    reason = slurm_reason(CheckResult("xid", "fail", evidence, "down", "reboot"))
    assert "=" not in reason and "\n" not in reason and "\u202e" not in reason and reason.startswith("hpcc: xid:")
    calls = [state_args(["gpu-001"], "DOWN", f"hpcc: health: {evidence}")]
    calls.append(state_args(["gpu-001", "gpu-002"], "DRAIN", f"hpcc: health: {evidence}"))  # many nodes, one reason
    assert [c[-1] for c in calls] == [f"Reason={clean_reason('hpcc: health: ' + evidence)}"] * 2
    assert all(c[-1].count("=") == 1 for c in calls)


def test_instances_are_read_by_the_clusters_tag_with_their_group_and_address():
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        made = moto_launch_template(ec2, "hpcc-c-gpu", {})
        subnet, image = made["subnet"], made["image"]
        group = Group("gpu", "t3.micro", 3, launch_template="hpcc-c-gpu", subnet_id=subnet)
        mine = fleet.launch(ec2, fleet.request(group, 3, "a", "c")).instance_ids
        fleet.launch(ec2, fleet.request(group, 2, "b", "other-cluster"))
        ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1)  # no tag at all
        found = observe.instances(ec2, "c")
        assert sorted(found) == sorted(mine)
        assert {i.group for i in found.values()} == {"gpu"} and all(i.private_ip for i in found.values())
        assert {i.launch_tag for i in found.values()} == {"a"}  # the launch's token, for a restart to find them
        assert all(i.state in ("pending", "running") and i.launch_time > 0 for i in found.values())


def test_status_checks_and_scheduled_events_come_from_filtered_reads():
    ec2 = FakeEC2(lambda: 100.0)
    ids = ec2.create_fleet(
        ClientToken="t",
        TargetCapacitySpecification={"TotalTargetCapacity": 3},
        TagSpecifications=[{"Tags": [{"Key": "hpcc:cluster", "Value": "c"}, {"Key": "hpcc:role", "Value": "compute"}]}],
    )
    ids = sorted(ids["Instances"][0]["InstanceIds"])
    ec2.tick()
    ec2.instances[ids[0]]["status_ok"] = False
    ec2.instances[ids[1]]["events"] = ["instance-retirement"]
    found = observe.health(ec2, ids)
    assert found == {ids[0]: (False, ()), ids[1]: (None, ("instance-retirement",))}
    merged = observe.with_health(observe.instances(ec2, "c"), found)
    assert merged[ids[0]].status_ok is False and merged[ids[1]].events == ("instance-retirement",)
    assert merged[ids[2]].status_ok is None and merged[ids[2]].events == ()


def arn(iid: str) -> str:
    return membership.instance_arn("aws", "us-east-1", "123456789012", iid)


def test_reports_are_fetched_only_where_they_changed():
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="hpcc-c")
        for name, iid, ok in (("gpu-000", "i-0a0", True), ("gpu-001", "i-0a1", False)):
            s3.put_object(
                Bucket="hpcc-c",
                Key=membership.status_key(arn(iid)),
                Body=membership.status_body(name, iid, ok, "" if ok else "hook", "" if ok else "hook x exited 1", 5),
            )
        s3.put_object(Bucket="hpcc-c", Key="status/junk.json", Body=b"not json")
        gets = []

        class Counting:
            def __getattr__(self, name):
                if name == "get_object":
                    return lambda **kw: (gets.append(kw["Key"]), s3.get_object(**kw))[1]
                return getattr(s3, name)

        cache = {}
        reps = observe.reports(Counting(), "hpcc-c", cache)
        assert reps["i-0a0"].ok and not reps["i-0a1"].ok and reps["i-0a1"].failure == "hook"
        assert len(gets) == 3
        s3.put_object(
            Bucket="hpcc-c",
            Key=membership.status_key(arn("i-0a0")),
            Body=json.dumps(
                {"name": "gpu-000", "instance_id": "i-0a0", "ok": False, "failure": "health", "evidence": "xid 79"}
            ),
        )
        reps = observe.reports(Counting(), "hpcc-c", cache)
        assert gets[3:] == [membership.status_key(arn("i-0a0"))] and reps["i-0a0"].evidence == "xid 79"
        listed = {o["Key"]: o["LastModified"].timestamp() for o in s3.list_objects_v2(Bucket="hpcc-c")["Contents"]}
        assert reps["i-0a1"].heard == listed[membership.status_key(arn("i-0a1"))] > 0  # the heartbeat's time


def test_a_report_counts_only_for_the_instance_its_key_names_and_once_it_is_a_verdict():
    """A node may write only status/<its ARN>.json (IAM); a body naming another instance there is no report, and
    a bootstrap still running (ok, phase running) is no verdict yet."""
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="hpcc-c")
        forged = dict(json.loads(membership.status_body("gpu-002", "i-0b2", False, "bootstrap", "x")))
        s3.put_object(Bucket="hpcc-c", Key=membership.status_key(arn("i-0b9")), Body=json.dumps(forged))
        s3.put_object(
            Bucket="hpcc-c",
            Key=membership.status_key(arn("i-0b3")),
            Body=json.dumps({"name": "gpu-003", "instance_id": "i-0b3", "ok": True, "phase": "running", "step": "efa"}),
        )
        s3.put_object(
            Bucket="hpcc-c",
            Key=membership.status_key(arn("i-0b4")),
            Body=json.dumps({"name": "gpu-004", "instance_id": "i-0b4", "ok": True, "phase": "ready", "at": 7}),
        )
        # a predecessor's last word and its successor's: the later one is the name's report
        s3.put_object(
            Bucket="hpcc-c",
            Key=membership.status_key(arn("i-0b5")),
            Body=membership.status_body("gpu-005", "i-0b5", False, "instance", "gone", at=10),
        )
        s3.put_object(
            Bucket="hpcc-c",
            Key=membership.status_key(arn("i-0b6")),
            Body=membership.status_body("gpu-005", "i-0b6", True, at=20),
        )
        reps = observe.reports(s3, "hpcc-c", {})
        assert set(reps) == {"i-0b4", "i-0b5", "i-0b6"}, reps
        slots = {"gpu-005": Slot("gpu-005", "gpu", 5, "i-0b6"), "gpu-004": Slot("gpu-004", "gpu", 4, "i-0b4")}
        assert observe.for_slots(slots, reps)["gpu-005"].instance_id == "i-0b6"  # the slot's own instance's


def test_a_node_naming_another_in_its_status_speaks_only_for_itself():
    """Issue 33, finding 6: gpu-001's instance writes its own key (IAM allows it) with gpu-000's name and a time
    in the future. gpu-000's own failed verdict stands; the forged body counts only for gpu-001's slot, and its time
    is no later than its object's LastModified."""
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="hpcc-c")
        s3.put_object(
            Bucket="hpcc-c",
            Key=membership.status_key(arn("i-0c0")),
            Body=json.dumps(
                {
                    "name": "gpu-000",
                    "instance_id": "i-0c0",
                    "ok": False,
                    "failure": "health",
                    "evidence": "Xid 79",
                    "check": "xid",
                    "action": "down",
                    "remedy": "reboot",
                    "at": 100.0,
                }
            ),
        )
        s3.put_object(
            Bucket="hpcc-c",
            Key=membership.status_key(arn("i-0c1")),
            Body=membership.status_body("gpu-000", "i-0c1", True, at=4_000_000_000.0),
        )
        reps = observe.reports(s3, "hpcc-c", {})
        written = max(o["LastModified"].timestamp() for o in s3.list_objects_v2(Bucket="hpcc-c")["Contents"])
    slots = {"gpu-000": Slot("gpu-000", "gpu", 0, "i-0c0"), "gpu-001": Slot("gpu-001", "gpu", 1, "i-0c1")}
    loaded = Loaded(slots=slots)
    snap = observe.snapshot("c", 200.0, loaded, {}, reps, None)
    assert snap.reports["gpu-000"].instance_id == "i-0c0" and not snap.reports["gpu-000"].ok
    assert snap.reports["gpu-000"].action == "down"
    assert snap.reports["gpu-001"].ok and snap.reports["gpu-001"].name == "gpu-001"
    assert snap.reports["gpu-001"].at <= written < 4_000_000_000.0


def test_capacity_block_windows_come_from_one_describe_call():
    from dataclasses import replace
    from datetime import datetime

    start, end = datetime(2026, 12, 1, 11, 30, tzinfo=UTC), datetime(2026, 12, 8, 11, 30, tzinfo=UTC)
    calls = []

    class EC2:
        def get_paginator(self, name):
            assert name == "describe_capacity_reservations"

            class Pages:
                def paginate(self, **kw):
                    calls.append(kw)
                    return [
                        {
                            "CapacityReservations": [
                                {
                                    "CapacityReservationId": "cr-b",
                                    "ReservationType": "capacity-block",
                                    "StartDate": start,
                                    "EndDate": end,
                                },
                                {"CapacityReservationId": "cr-o", "ReservationType": "default"},
                            ]
                        }
                    ]

            return Pages()

    gpu = Group("gpu", "p5.48xlarge", 4, market="capacity-block", capacity_reservation_id="cr-b")
    odcr = Group("cpu", "c7i.48xlarge", 2, capacity_reservation_id="cr-o")
    out = observe.capacity_blocks(EC2(), [gpu, odcr])
    assert out[0].capacity_block.start == start.timestamp() and out[0].capacity_block.end == end.timestamp()
    assert out[1] == odcr and calls == [{"CapacityReservationIds": ["cr-b"]}]
    assert observe.capacity_blocks(EC2(), [replace(gpu, market="on-demand")]) == [replace(gpu, market="on-demand")]


KEY = membership.status_key(arn("i-0d0"))
GOOD = json.loads(membership.status_body("gpu-000", "i-0d0", False, "health", "Xid 79", 5))
MALFORMED = {  # issue 37, fault 6: each dropped with its key and why, never silently
    "binary garbage": (KEY, b"\x00\xff\xfe\x89PNG", "not JSON"),
    "a JSON list": (KEY, b"[1, 2]", "a JSON array, not an object"),
    "a wrong type": (KEY, json.dumps({**GOOD, "ok": "false"}).encode(), "'ok' is a string, not a boolean"),
    "a number as a name": (KEY, json.dumps({**GOOD, "name": 7}).encode(), "'name' is a number, not a string"),
    "no instance": (
        KEY,
        json.dumps({k: v for k, v in GOOD.items() if k != "instance_id"}).encode(),
        "no 'instance_id'",
    ),
    "a key that is no instance": ("status/junk.json", json.dumps(GOOD).encode(), "its key names no instance"),
    "another instance": (
        membership.status_key(arn("i-0d9")),
        json.dumps(GOOD).encode(),
        "its body names instance 'i-0d0', not its key's i-0d9",
    ),
    "a stamp that is no version": (KEY, json.dumps({**GOOD, "format": "x1"}).encode(), "format 'x1' is not a version"),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_a_malformed_status_is_no_verdict_and_is_logged_with_its_key_and_why(kind, caplog):
    key, body, why = MALFORMED[kind]
    with caplog.at_level(logging.WARNING, logger="hpcc.controller"):
        assert observe.verdict(body, key) is None
    assert f"status object {key!r} dropped: " in caplog.text and why in caplog.text, caplog.text
    assert "\\x00" not in caplog.text and "PNG" not in caplog.text  # the body is never printed


def test_a_booting_status_or_a_good_one_is_not_malformed(caplog):
    booting = {**GOOD, "ok": True, "phase": "efa"}
    with caplog.at_level(logging.WARNING, logger="hpcc.controller"):
        assert observe.verdict(json.dumps(booting).encode(), KEY) is None
        assert observe.verdict(json.dumps(GOOD).encode(), KEY).evidence == "Xid 79"
    assert caplog.text == ""


def test_a_malformed_status_is_logged_once_a_version_and_named_by_dropped(caplog):
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="hpcc-c")
        s3.put_object(Bucket="hpcc-c", Key=KEY, Body=json.dumps(GOOD))
        s3.put_object(Bucket="hpcc-c", Key="status/junk.json", Body=b"\x00garbage")
        cache = {}
        with caplog.at_level(logging.WARNING, logger="hpcc.controller"):
            for _ in range(3):  # loops: the object is fetched again only when its ETag changed
                assert set(observe.reports(s3, "hpcc-c", cache)) == {"i-0d0"}
            assert caplog.text.count("'status/junk.json' dropped") == 1
            assert observe.dropped(cache) == {
                "status/junk.json": "its key names no instance (status/<instance ARN>.json)"
            }
            s3.put_object(Bucket="hpcc-c", Key=KEY, Body=json.dumps({**GOOD, "at": "soon"}))
            observe.reports(s3, "hpcc-c", cache)
            observe.reports(s3, "hpcc-c", cache)
            assert caplog.text.count(f"{KEY!r} dropped: 'at' is a string, not a number") == 1
            assert sorted(observe.dropped(cache)) == sorted([KEY, "status/junk.json"])
            s3.delete_object(Bucket="hpcc-c", Key="status/junk.json")
            observe.reports(s3, "hpcc-c", cache)
            assert list(observe.dropped(cache)) == [KEY]
