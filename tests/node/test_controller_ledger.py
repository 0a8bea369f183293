"""The ledger against moto's DynamoDB: the lease fences a second controller, writes are conditional on the
version read, one name holds one instance and one instance one name, and everything reads back."""

from __future__ import annotations

import pytest

from hpcc_node.controller.ledger import Conflict, LeaseLost, Ledger, read_name
from hpcc_node.controller.model import Event, GroupState, Slot
from hpcc_node.controller.timers import Timers
from tests.node.conftest import LEDGER_TABLE

TABLE = LEDGER_TABLE


class Clock:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_a_second_controller_cannot_write_while_the_first_holds_the_lease(ddb):
    clock = Clock()
    old_head, new_head = Ledger(ddb, TABLE, "head-a", clock), Ledger(ddb, TABLE, "head-b", clock)
    assert old_head.acquire() and not new_head.acquire()
    with pytest.raises(LeaseLost):
        new_head.put_slot(Slot("gpu-000", "gpu", 0), state="ready")
    assert old_head.acquire()  # renewed each loop
    clock.t += Timers().lease_seconds + 1  # the old head stops renewing
    assert new_head.acquire() and new_head.holder()[0] == "head-b"
    with pytest.raises(LeaseLost):  # the old head, still alive, is fenced out
        old_head.put_slot(Slot("gpu-000", "gpu", 0), state="ready")
    assert not old_head.acquire()
    assert "gpu-000" not in new_head.load().slots


def test_writes_are_conditional_on_the_version_read(ddb):
    ledger = Ledger(ddb, TABLE, "head-a", Clock())
    ledger.acquire()
    first = ledger.put_slot(Slot("gpu-000", "gpu", 0), state="booting")
    assert first.version == 1
    second = ledger.put_slot(first, state="ready")
    with pytest.raises(Conflict):
        ledger.put_slot(first, state="failed")  # stale: written by someone since
    with pytest.raises(Conflict):
        ledger.put_slot(Slot("gpu-000", "gpu", 0), state="booting")  # created once only
    assert ledger.load().slots["gpu-000"] == second


def test_one_name_one_instance_and_nodes_read_their_name_by_instance_id(ddb):
    clock = Clock()
    ledger = Ledger(ddb, TABLE, "head-a", clock)
    ledger.acquire()
    assert read_name(ddb, TABLE, "i-1") is None  # the agent waits until it is there
    named = ledger.name(Slot("gpu-000", "gpu", 0), "i-1", clock())
    assert read_name(ddb, TABLE, "i-1") == "gpu-000" and named.instance_id == "i-1"
    with pytest.raises(Conflict):
        ledger.name(Slot("gpu-001", "gpu", 1), "i-1", clock())  # the instance already has a name
    with pytest.raises(Conflict):
        ledger.name(Slot("gpu-000", "gpu", 0), "i-2", clock())  # the name is already held
    assert read_name(ddb, TABLE, "i-2") is None and "gpu-001" not in ledger.load().slots
    moved = ledger.name(ledger.put_slot(named, state="replacing"), "i-2", clock())  # a replacement
    assert read_name(ddb, TABLE, "i-2") == "gpu-000" and moved.attempts == 0 and moved.state == "booting"


def test_everything_reads_back_and_old_records_are_pruned(ddb):
    clock = Clock()
    ledger = Ledger(ddb, TABLE, "head-a", clock)
    ledger.acquire()
    ledger.put_group(GroupState("gpu"), consecutive_failures=2, protected="")
    ledger.launch_intent("gpu-1-0", "gpu", 3, clock())
    ledger.launch_intent("gpu-1-0", "gpu", 3, clock())  # recorded again after a restart: no error
    ledger.launch_result("gpu-1-0", "gpu", 3, clock(), ["i-1", "i-2", "i-3"])
    ledger.event(Event(clock() - 90_000, "replace", "gpu-000", "instance", "instance:x"), 1)
    ledger.event(Event(clock() - 10, "replace", "gpu-001", "bootstrap", "bootstrap:y"), 2)
    ledger.alert("breaker", clock())
    ledger.set_membership(3, "abc", '"etag"')
    loaded = ledger.load()
    assert loaded.groups["gpu"].consecutive_failures == 2
    assert [(r.token, r.instance_ids) for r in loaded.launches] == [("gpu-1-0", ("i-1", "i-2", "i-3"))]
    assert [e.node for e in loaded.events] == ["gpu-001"]  # older than a day: stale
    assert set(loaded.alerts) == {"breaker"} and loaded.membership["generation"] == 3
    assert ledger.prune(loaded) == 1
    ledger.launch_intent("gpu-2-0", "gpu", 1, clock())  # a launch whose result never came
    clock.t += 2 * Timers().orphan_timeout_seconds + 1
    assert ledger.acquire()
    # the intent is retried within the orphan timeout, then dropped; a launch's instances stay the controller's to
    # name or terminate a day (issue 33: nothing is terminated for its tags alone)
    assert ledger.prune(ledger.load()) == 1 and [r.token for r in ledger.load().launches] == ["gpu-1-0"]
    clock.t += Timers().event_keep_seconds
    assert ledger.acquire()
    assert ledger.prune(ledger.load()) == 2 and ledger.load().launches == []


def test_an_item_this_controller_cannot_read_is_left_out_and_named_the_rest_reads(ddb, caplog):
    """A malformed item (a hand edit, a bug) never stops the loop: EC2 and Slurm are still reconciled, and the
    item is named with what is wrong with it, every loop until it is mended (issue 38)."""
    from hpcc_node.controller.observe import observe

    clock = Clock()
    ledger = Ledger(ddb, TABLE, "head-a", clock)
    ledger.acquire()
    ledger.put_slot(Slot("gpu-000", "gpu", 0))
    ledger.put_slot(Slot("gpu-001", "gpu", 1))
    ddb.put_item(TableName=TABLE, Item={"pk": {"S": "slot#gpu-002"}, "v": {"N": "1"}, "doc": {"S": "{not json"}})
    ddb.put_item(TableName=TABLE, Item={"pk": {"S": "event#x"}})  # no version
    loaded = ledger.load()
    assert sorted(loaded.slots) == ["gpu-000", "gpu-001"]
    assert sorted(loaded.dropped) == ["event#x", "slot#gpu-002"] and "slot#gpu-002" not in loaded.versions
    assert all(loaded.dropped.values())

    class NoInstances:
        def get_paginator(self, _):
            return type("P", (), {"paginate": lambda self, **_: iter([{"Reservations": []}])})()

    caplog.set_level("WARNING", logger="hpcc.controller")
    snap, _ = observe(NoInstances(), ledger, "c", clock, dict, None)
    assert sorted(snap.slots) == ["gpu-000", "gpu-001"]
    assert "ledger item slot#gpu-002 cannot be read" in caplog.text and "event#x" in caplog.text


class CliShaped:
    """The ledger's client as hpcc_node.awscli gives it on the head: no `.exceptions`, and an error's cancellation
    reasons only in its message, as the AWS CLI prints them."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, op):
        from botocore.exceptions import ClientError as BotoError

        from hpcc_node.awscli import ClientError

        def call(**kw):
            try:
                return getattr(self._client, op)(**kw)
            except BotoError as e:
                err = e.response["Error"]
                raise ClientError(err["Code"], err["Message"], e.operation_name) from None

        return call


def test_conflicts_and_a_lost_lease_are_told_apart_through_the_aws_cli_clients_errors(ddb):
    clock = Clock()
    cli = CliShaped(ddb)
    assert not hasattr(cli, "exceptions") or not hasattr(cli.exceptions, "TransactionCanceledException")
    mine, other = Ledger(cli, TABLE, "head-a", clock), Ledger(cli, TABLE, "head-b", clock)
    assert mine.acquire() and not other.acquire()  # a refused lease is False, not an error
    first = mine.put_slot(Slot("gpu-000", "gpu", 0), state="booting")
    mine.put_slot(first, state="ready")
    with pytest.raises(Conflict):
        mine.put_slot(first, state="failed")
    with pytest.raises(LeaseLost):
        other.put_slot(Slot("gpu-001", "gpu", 1), state="booting")


def test_a_best_effort_launch_is_recorded_with_its_minimum_for_its_retry(ddb):
    clock = Clock()
    ledger = Ledger(ddb, TABLE, "head-a", clock)
    ledger.acquire()
    ledger.launch_intent("gpu-1-0", "gpu", 4, clock(), minimum=1)
    ledger.launch_intent("gpu-1-1", "gpu", 4, clock())
    assert sorted((r.token, r.minimum) for r in ledger.load().launches) == [("gpu-1-0", 1), ("gpu-1-1", 0)]
