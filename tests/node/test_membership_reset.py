"""Issue 37, fault 5: the membership generation is the controller's own count (the ledger's record), so a corrupted
membership.json (garbage, no metadata) never sends it back to 1 under nodes that applied more; no delta is written
from a corrupted base; and a node follows a true reset (a lower generation whose bytes are the controller's) but
never a lower one whose bytes are not. The ledger in moto's DynamoDB; the membership in moto's S3 or the agent
tests' S3 (tests/node/agent_support.py)."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import boto3
import pytest

from hpcc_contract.names import MEMBERSHIP_GENERATION_META, MEMBERSHIP_KEY, MEMBERSHIP_SHA256_META
from hpcc_contract.names import membership_delta_key as delta_key
from hpcc_node.aws import AwsError
from hpcc_node.controller import membership, observe
from hpcc_node.controller.act import Executor
from hpcc_node.controller.decide import decide, overwritten
from hpcc_node.controller.ledger import Ledger
from hpcc_node.controller.loop import membership_etag
from hpcc_node.controller.model import PUBLISH, READY, Group, Instance, Slot, Snapshot
from tests.node.agent_support import SETTINGS, STATE, FakeAws, P, instance_of, make_agent, membership_doc
from tests.node.conftest import LEDGER_TABLE

LOG = logging.getLogger("hpcc.controller")


def clock() -> float:
    return 1_000_000.0


def hosts(n: int) -> list[str]:
    """The head, compute-000 (moved to another address at each generation n: a replacement), compute-001."""
    return ["10.0.0.4", f"10.0.0.{10 + n}", "10.0.0.6"]


def publish(ddb, s3, addresses: list[str], bucket: str = STATE) -> None:
    """One controller loop's publish: the ledger read as observe() reads it, decide()'s PUBLISH of these nodes, the
    executor's write (the ledger's mark, the delta, the object)."""
    actions, ledger, snap, groups = loop_actions(ddb, s3, addresses, bucket)
    assert actions
    Executor(None, ledger, s3, bucket, "c", groups, clock).run(actions, snap)


def loop_actions(ddb, s3, addresses: list[str], bucket: str = STATE):
    """What one loop decides to publish for these nodes, the object's ETag read as loop.membership_etag reads it."""
    ledger = Ledger(ddb, LEDGER_TABLE, "head-1", clock)
    assert ledger.acquire()
    loaded = ledger.load()
    insts = {}
    for i, ip in enumerate(addresses[1:]):
        name, iid = f"compute-{i:03d}", instance_of(f"compute-{i:03d}")
        loaded.slots[name] = Slot(name, "compute", i, iid, READY)
        insts[iid] = Instance(iid, "running", 0.0, "compute", ip, name_tag=name)
    head = {"name": "head", "ip": addresses[0], "instance": instance_of("head")}
    found = membership_etag(s3, bucket)
    snap = observe.snapshot("c", clock(), loaded, insts, {}, None, head=head, membership_found=found)
    groups = [Group("compute", "c6i.large", len(addresses) - 1)]
    return [a for a in decide(snap, groups, snap.now) if a.kind == PUBLISH], ledger, snap, groups


def recorded(ddb) -> int:
    return Ledger(ddb, LEDGER_TABLE, "reader", clock).load().membership["generation"]


CORRUPTIONS = {
    # garbage bytes written over it, no metadata (the box's scenario)
    "no metadata": (lambda s3, data: s3.put_object(Bucket=STATE, Key=MEMBERSHIP_KEY, Body=b"\x00\xff\xfegarbage")),
    # garbage bytes under the metadata of the generation it had
    "bytes no JSON": (
        lambda s3, data: s3.put_object(
            Bucket=STATE, Key=MEMBERSHIP_KEY, Body=b"\x00\xff", Metadata={MEMBERSHIP_GENERATION_META: "4"}
        )
    ),
    # a body changed under its metadata: a delta from it would lead the nodes to bytes nobody published
    "tampered": (
        lambda s3, data: s3.put_object(
            Bucket=STATE,
            Key=MEMBERSHIP_KEY,
            Body=data.replace(b"10.0.0.6", b"10.6.6.6"),
            Metadata={MEMBERSHIP_GENERATION_META: "4", MEMBERSHIP_SHA256_META: membership.sha256(data)},
        )
    ),
}
REASONS = {
    "no metadata": "no generation in its metadata",
    "bytes no JSON": "its bytes are no JSON",
    "tampered": "its bytes do not hash to the sha256 in its metadata",
}


@pytest.mark.parametrize("harm", sorted(CORRUPTIONS))
def test_a_corrupted_object_then_a_publish_goes_on_from_the_ledgers_generation_with_no_delta(ddb, caplog, harm):
    s3 = boto3.client("s3", region_name="us-east-1")  # in ddb's moto
    s3.create_bucket(Bucket=STATE)
    for n in range(1, 5):
        publish(ddb, s3, hosts(n))
    assert membership.head(s3, STATE)[0] == recorded(ddb) == 4
    CORRUPTIONS[harm](s3, s3.get_object(Bucket=STATE, Key=MEMBERSHIP_KEY)["Body"].read())
    caplog.set_level("WARNING", logger=LOG.name)
    publish(ddb, s3, hosts(5))
    doc, _ = membership.read(s3, STATE)
    assert membership.head(s3, STATE)[0] == doc["generation"] == recorded(ddb) == 5  # was 1 (no metadata)
    assert f"s3://{STATE}/{MEMBERSHIP_KEY}" in caplog.text and REASONS[harm] in caplog.text, caplog.text
    with pytest.raises(s3.exceptions.NoSuchKey):  # no delta from a corrupted base: the nodes read it whole
        s3.get_object(Bucket=STATE, Key=delta_key(5))


@pytest.mark.parametrize("harm", sorted(CORRUPTIONS) + ["deleted"])
def test_an_object_harmed_while_nothing_changed_is_written_again_in_the_next_loop(ddb, harm):
    """A node that boots now must find a whole membership: the controller does not wait for the next change."""
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket=STATE)
    for n in range(1, 5):
        publish(ddb, s3, hosts(n))
    assert loop_actions(ddb, s3, hosts(4))[0] == []  # nothing changed, the object is the one published
    if harm == "deleted":
        s3.delete_object(Bucket=STATE, Key=MEMBERSHIP_KEY)
    else:
        CORRUPTIONS[harm](s3, s3.get_object(Bucket=STATE, Key=MEMBERSHIP_KEY)["Body"].read())
    (again,) = loop_actions(ddb, s3, hosts(4))[0]
    assert "not the one published" in again.why.text(), again.why
    publish(ddb, s3, hosts(4))
    doc, _ = membership.read(s3, STATE)
    assert doc["generation"] == recorded(ddb) == 5
    assert loop_actions(ddb, s3, hosts(4))[0] == []  # and once written, not again


def test_only_an_object_read_and_not_the_recorded_one_is_written_again():
    snap = Snapshot(now=clock(), cluster="c", slots={}, instances={}, reports={}, membership_etag='"a"')
    assert overwritten(replace(snap, membership_found='"a"')) == ""
    assert overwritten(replace(snap, membership_found=None)) == ""  # S3 did not answer: nothing judged
    assert overwritten(replace(snap, membership_etag="", membership_found='"b"')) == ""  # nothing recorded yet
    assert "ETag none" in overwritten(replace(snap, membership_found=""))  # deleted
    assert "ETag \"b\"" in overwritten(replace(snap, membership_found='"b"'))


def agent_at_generation_4(tmp_path, ddb):
    aws = FakeAws()
    aws.put(f"{P}/settings", SETTINGS)
    a, _ = make_agent(tmp_path, aws)  # compute-001 at 10.0.0.6
    for n in range(1, 5):
        publish(ddb, aws.s3, hosts(n))
        a.tick()
    assert a.node.hosts_version == 4
    return aws, a


def test_an_agent_at_generation_4_reaches_the_controllers_membership_once_the_corruption_is_overwritten(tmp_path, ddb):
    aws, a = agent_at_generation_4(tmp_path, ddb)
    aws.s3.objects[(STATE, MEMBERSHIP_KEY)] = b"\x00\xff\xfegarbage"
    aws.s3.metadata[(STATE, MEMBERSHIP_KEY)] = {}
    with pytest.raises(AwsError):  # logged by the agent's loop; the applied membership stays
        a.tick()
    assert a.node.hosts_version == 4
    publish(ddb, aws.s3, hosts(5))
    a.tick()
    assert a.node.hosts_version == 5  # the head's and every survivor's hostfiles got generation 1, refused, before
    assert [n["ip"] for n in a.doc["nodes"]] == ["10.0.0.15", "10.0.0.6"]


def test_a_true_reset_a_lower_generation_whose_bytes_are_the_controllers_is_applied_and_said(tmp_path, ddb):
    """The ledger lost with the object (a new table, the bucket emptied): the count starts again at 1, and a node
    that applied 4 would otherwise refuse every generation until the count passed 4 again."""
    aws, a = agent_at_generation_4(tmp_path, ddb)
    del aws.s3.objects[(STATE, MEMBERSHIP_KEY)]
    body = membership.body_of(membership_doc("\n".join(hosts(9)), 0))
    membership.publish(aws.s3, STATE, body, 1, "")
    a.tick()
    assert a.node.hosts_version == 1 and [n["ip"] for n in a.doc["nodes"]] == ["10.0.0.19", "10.0.0.6"]
    log = (tmp_path / "compute-001/log").read_text()
    assert "membership generation went back from 4 to 1" in log and "after a reset): applied" in log, log
    a.tick()
    assert len([c for c in a.run.calls if c[-1] == "apply-membership"]) == 5  # once, not every tick


def test_a_lower_generation_whose_bytes_do_not_hash_to_its_sha256_is_not_applied_and_said(tmp_path, ddb):
    aws, a = agent_at_generation_4(tmp_path, ddb)
    data = membership.encode(membership.body_of(membership_doc("\n".join(hosts(9)), 0)), 2)
    aws.s3.objects[(STATE, MEMBERSHIP_KEY)] = data
    aws.s3.metadata[(STATE, MEMBERSHIP_KEY)] = {
        MEMBERSHIP_GENERATION_META: "2",
        MEMBERSHIP_SHA256_META: membership.sha256(data + b" "),
    }
    a.tick()
    a.tick()
    assert a.node.hosts_version == 4 and json.loads(data)["generation"] == 2
    log = (tmp_path / "compute-001/log").read_text() if (tmp_path / "compute-001/log").exists() else ""
    assert log.count("membership generation went back from 4 to 2: its bytes do not hash") == 1, log
    assert "(not the controller's): not applied" in log
