"""The executor's batched runs (act_batch.py, issue 38): many deaths acted on in a few calls (one TerminateInstances,
one `scontrol update` per state and reason, many slots' writes in one TransactWriteItems), each with its own
condition, its own record, the order a replacement's crash safety relies on, and a fallback one by one so that one
bad item, instance or node holds no other back; a lost lease still stops everything."""

from __future__ import annotations

import math
from typing import Any

import pytest

from hpcc_node.controller.act import Executor
from hpcc_node.controller.act_batch import TERMINATE_BATCH, runs, terminate_each
from hpcc_node.controller.decide_failures import down_and_replace
from hpcc_node.controller.ledger import TRANSACT_ITEMS, LeaseLost, Ledger
from hpcc_node.controller.model import (
    DOWN,
    DRAIN,
    DRAINING,
    READY,
    REPLACE,
    REPLACING,
    RESUME,
    TERMINATE_ORPHAN,
    Action,
    Group,
    Slot,
    SlurmNode,
    Snapshot,
    Why,
)
from hpcc_node.controller.timers import Timers
from tests.node.conftest import LEDGER_TABLE
from tests.node.controller_fakes import ClientError, FakeEC2

BUCKET, CLUSTER = "hpcc-b-cluster", "b"
TABLE = LEDGER_TABLE
GPU = Group("gpu", "p5.48xlarge", 64, launch_template="lt-gpu", subnet_id="subnet-1")
WHY = Why("instance", "EC2 status check failed")


class Calls:
    """Every side effect of the clients it wraps, in order, into one list: (operation, what it names)."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    def wrap(self, client: Any, ops: dict[str, Any]) -> Any:
        calls = self

        class Proxy:
            def __getattr__(self, name: str) -> Any:
                attr = getattr(client, name)
                if name not in ops:
                    return attr

                def call(*args: Any, **kwargs: Any) -> Any:
                    calls.log.append((name, ops[name](kwargs)))
                    return attr(*args, **kwargs)

                return call

        return Proxy()

    def of(self, op: str) -> list[Any]:
        return [what for name, what in self.log if name == op]


def items(req: dict[str, Any]) -> list[str]:
    """A transaction's item keys, the lease's check first."""
    bodies = [next(iter(t.values())) for t in req["TransactItems"]]
    return [(b.get("Item") or b["Key"])["pk"]["S"] for b in bodies]


class Env:
    def __init__(self, ddb: Any, n: int) -> None:
        self.now = [1_000_000.0]
        self.ec2 = FakeEC2(self.clock)
        self.calls = Calls()
        self.ddb = ddb
        self.ledger = Ledger(self.calls.wrap(ddb, {"transact_write_items": items}), TABLE, "head-1", self.clock)
        self.ledger.acquire()
        setup = Ledger(ddb, TABLE, "head-1", self.clock)
        self.slots = {}
        for i in range(n):
            iid = f"i-{i:017x}"
            self.ec2.instances[iid] = {"state": "running", "launch": 0.0, "tags": {}, "ip": "", "status_ok": False}
            self.slots[f"gpu-{i:03d}"] = setup.put_slot(Slot(f"gpu-{i:03d}", "gpu", i, iid, READY, 0.0))
        self.slurm: list[list[str]] = []

    def clock(self) -> float:
        return self.now[0]

    def scontrol(self, argv: list[str]) -> None:
        self.calls.log.append(("scontrol", argv))
        self.slurm.append(argv)

    def executor(self, slurm: Any = None) -> Executor:
        ec2 = self.calls.wrap(self.ec2, {"terminate_instances": lambda kw: list(kw["InstanceIds"])})
        return Executor(ec2, self.ledger, None, BUCKET, CLUSTER, [GPU], self.clock, slurm or self.scontrol)

    def snapshot(self) -> Snapshot:
        return Snapshot(now=self.clock(), slots=dict(self.slots), slurm={})

    def deaths(self) -> list[Action]:
        """decide()'s actions for every slot's death: DOWN, then REPLACE, node after node."""
        out: list[Action] = []
        for s in self.slots.values():
            out += down_and_replace(s, WHY, None, self.snapshot())
        return out

    def stored(self) -> dict[str, Slot]:
        return Ledger(self.ddb, TABLE, "reader", self.clock).load().slots

    def events(self) -> list[Any]:
        return Ledger(self.ddb, TABLE, "reader", self.clock).load().events


def test_64_deaths_are_one_scontrol_one_terminate_and_a_few_transactions_each_item_recorded(ddb):
    env = Env(ddb, 64)
    acts = env.deaths()
    lines = env.executor().run(acts, env.snapshot())
    assert lines == [a.line() for a in acts]  # one log line each, as before
    ids = [s.instance_id for s in env.slots.values()]
    assert env.calls.of("terminate_instances") == [ids]  # one call, every id
    assert len(env.slurm) == 1 and env.slurm[0][2] == "NodeName=" + ",".join(env.slots)  # one command, every node
    assert env.slurm[0][3:] == ["State=DOWN", f"Reason=hpcc: {WHY.text()}"]  # the reason is one argument
    transactions = env.calls.of("transact_write_items")
    room = TRANSACT_ITEMS - 1  # the lease's check is the first item of each
    assert len(transactions) == 2 * math.ceil(128 / room) + math.ceil(64 / room)  # starts, slots, ends
    assert all(len(t) <= TRANSACT_ITEMS and t[0] == "lease" for t in transactions)
    stored = env.stored()
    assert all(stored[n].state == REPLACING and stored[n].attempts == 1 for n in env.slots)
    assert all(env.ec2.instances[i]["state"] == "shutting-down" for i in ids)
    phases = sorted((e.kind, e.phase) for e in env.events())
    assert phases == sorted([(DOWN, "start"), (DOWN, "done"), (REPLACE, "start"), (REPLACE, "done")] * 64)
    done = {e.node: e.detail for e in env.events() if e.kind == REPLACE and e.phase == "done"}
    assert done == {s.name: f"terminating {s.instance_id}" for s in env.slots.values()}


def test_each_node_is_recorded_then_down_then_marked_replacing_then_terminated(ddb):
    """The order a restarted controller relies on (act.py's docstring), for every node of a batched run."""
    env = Env(ddb, 5)
    env.executor().run(env.deaths(), env.snapshot())
    seen: dict[str, list[str]] = {n: [] for n in env.slots}
    by_iid = {s.instance_id: n for n, s in env.slots.items()}
    for op, what in env.calls.log:
        if op == "scontrol":
            for n in what[2].removeprefix("NodeName=").split(","):
                seen[n].append("down")
        elif op == "terminate_instances":
            for iid in what:
                seen[by_iid[iid]].append("terminate")
        else:
            for pk in what:
                if pk.startswith("event#"):  # event#<at>-<seq>-<kind>-<node>
                    _, _, kind, name = pk.removeprefix("event#").split("-", 3)
                    seen[name].append(f"{kind}-event")
                elif pk.startswith("slot#"):
                    seen[pk.removeprefix("slot#")].append("replacing")
    for name, order in seen.items():
        steps = [s for s in order if not s.endswith("event")]
        assert steps == ["down", "replacing", "terminate"], (name, order)
        assert order.index("replace-event") < order.index("down")  # both starts recorded before acting


def test_a_slot_changed_by_another_writer_fails_alone_and_the_others_are_replaced(ddb, caplog):
    env = Env(ddb, 4)
    acts = env.deaths()
    stale = env.slots["gpu-002"]
    Ledger(ddb, TABLE, "head-1", env.clock).put_slot(stale, replace_requested=True)  # `hpcc replace` wrote it since
    env.executor().run(acts, env.snapshot())
    slot_writes = [t for t in env.calls.of("transact_write_items") if any(pk.startswith("slot#") for pk in t)]
    assert [len(t) - 1 for t in slot_writes] == [4, 1, 1, 1, 1]  # refused whole, then slot by slot
    stored = env.stored()
    assert stored["gpu-002"].state == READY and stored["gpu-002"].replace_requested  # the other writer's, kept
    assert env.ec2.instances[stale.instance_id]["state"] == "running"  # never terminated unless marked first
    others = [n for n in env.slots if n != "gpu-002"]
    assert all(stored[n].state == REPLACING for n in others)
    assert all(env.ec2.instances[env.slots[n].instance_id]["state"] == "shutting-down" for n in others)
    assert env.calls.of("terminate_instances") == [[env.slots[n].instance_id for n in others]]
    assert "gpu-002" in caplog.text and "read again next loop" in caplog.text
    ends = {(e.node, e.phase) for e in env.events() if e.kind == REPLACE and e.phase != "start"}
    assert ends == {(n, "done") for n in others}  # a conflict is read again, not recorded failed


def test_a_lost_lease_stops_the_run_before_ec2_and_slurm(ddb):
    """Seen by the first transaction's lease check (this head's keep() sees no reason to renew): no write by write."""
    env = Env(ddb, 3)
    later = env.now[0] + Timers().lease_seconds + 1  # another head, whose clock says this head's lease ran out
    assert Ledger(ddb, TABLE, "head-2", lambda: later).acquire()
    with pytest.raises(LeaseLost):
        env.executor().run(env.deaths(), env.snapshot())
    assert env.calls.of("terminate_instances") == [] and env.slurm == []
    assert len(env.calls.of("transact_write_items")) == 1  # the first refusal stops it: no write by write
    assert all(s.state == READY for s in env.stored().values()) and env.events() == []


def test_a_lease_lost_mid_run_stops_it_before_the_slots_and_the_terminations(ddb):
    env = Env(ddb, 3)
    ledger2 = Ledger(ddb, TABLE, "head-2", env.clock)

    def slow_slurm(argv: list[str]) -> None:  # Slurm answers after the lease ran out, and head-2 took it
        env.scontrol(argv)
        env.now[0] += Timers().lease_seconds + 1
        assert ledger2.acquire()

    with pytest.raises(LeaseLost):
        env.executor(slow_slurm).run(env.deaths(), env.snapshot())
    assert len(env.slurm) == 1 and env.calls.of("terminate_instances") == []
    assert all(s.state == READY for s in env.stored().values())


def test_an_instance_already_gone_is_its_own_outcome_and_the_others_are_terminated(ddb):
    env = Env(ddb, 3)
    gone = env.slots["gpu-001"].instance_id
    del env.ec2.instances[gone]  # EC2 forgot it: the whole request is refused (none terminated)
    env.executor().run([a for a in env.deaths() if a.kind == REPLACE], env.snapshot())
    ids = [s.instance_id for s in env.slots.values()]
    assert env.calls.of("terminate_instances") == [ids] + [[i] for i in ids]  # refused whole, then id by id
    assert all(env.ec2.instances[i]["state"] == "shutting-down" for i in ids if i != gone)
    done = {e.node: e.detail for e in env.events() if e.kind == REPLACE and e.phase == "done"}
    assert done["gpu-001"] == f"{gone} already gone" and done["gpu-000"] == f"terminating {ids[0]}"


def test_terminations_are_split_at_ec2s_limit_per_call():
    calls = []

    class EC2:
        def terminate_instances(self, InstanceIds):
            calls.append(len(InstanceIds))
            if len(InstanceIds) > TERMINATE_BATCH:
                raise ClientError("InvalidParameterValue")

    ids = [f"i-{i:017x}" for i in range(2 * TERMINATE_BATCH + 5)]
    out = terminate_each(EC2(), ids + ids[:3])  # an id twice is terminated once
    assert calls == [TERMINATE_BATCH, TERMINATE_BATCH, 5] and set(out) == set(ids)


def test_slurm_gets_one_command_per_state_and_reason_and_node_by_node_when_one_is_refused(ddb, caplog):
    env = Env(ddb, 4)
    names = list(env.slots)
    acts = [Action(DOWN, "gpu", n, "", WHY, {"reason": "hpcc: a"}) for n in names[:3]]
    acts += [Action(DOWN, "gpu", names[3], "", WHY, {"reason": "hpcc: b"})]
    acts += [Action(RESUME, "gpu", n, "", Why("", "healthy")) for n in names[:2]]
    env.executor().run(acts, env.snapshot())
    assert [c[2:] for c in env.slurm] == [
        [f"NodeName={','.join(names[:3])}", "State=DOWN", "Reason=hpcc: a"],
        [f"NodeName={names[3]}", "State=DOWN", "Reason=hpcc: b"],
        [f"NodeName={','.join(names[:2])}", "State=RESUME"],
    ]

    def refusing(argv: list[str]) -> None:
        env.scontrol(argv)
        if "," in argv[2] or argv[2] == "NodeName=gpu-001":
            raise RuntimeError("scontrol: error: Invalid node name specified")

    env.slurm.clear()
    env.executor(refusing).run(acts[:3], env.snapshot())
    assert [c[2] for c in env.slurm] == [f"NodeName={','.join(names[:3])}"] + [f"NodeName={n}" for n in names[:3]]
    assert "DOWN of 3 nodes refused" in caplog.text and caplog.text.count("failed: scontrol") == 1
    ends = {e.node: e.phase for e in env.events() if e.kind == DOWN and e.phase != "start" and e.detail != "down"}
    assert ends == {"gpu-001": "failed"}


def test_a_drain_writes_its_slot_before_slurm_drains_it(ddb):
    env = Env(ddb, 2)
    acts = [
        Action(DRAIN, "gpu", n, s.instance_id, WHY, {"reason": "hpcc: soft", "slot_state": DRAINING})
        for n, s in env.slots.items()
    ]
    env.executor().run(acts, env.snapshot())
    ops = [op for op, what in env.calls.log if op == "scontrol" or any(pk.startswith("slot#") for pk in what)]
    assert ops == ["transact_write_items", "scontrol"]  # both slots in one write, then one drain
    assert all(s.state == DRAINING for s in env.stored().values())


def test_runs_keep_a_nodes_actions_in_their_order_and_leave_other_kinds_alone():
    slot = Slot("gpu-000", "gpu", 0, "i-0", READY)
    down, replace = down_and_replace(slot, WHY, SlurmNode("gpu-000", frozenset({"IDLE"})), Snapshot(0, slurm={}))
    drain = Action(DRAIN, "gpu", "gpu-000", "i-0", WHY, {"reason": "r", "slot_state": DRAINING})
    orphan = Action(TERMINATE_ORPHAN, instance_id="i-9", why=WHY)
    alert = Action("alert", why=WHY, data={"key": "k"})
    assert runs([down, replace, orphan]) == [[down, replace, orphan]]  # DOWN's Slurm step goes before the slot's
    assert runs([drain, replace]) == [[drain], [replace]]  # both write the slot: one after the other
    assert runs([replace, down]) == [[replace], [down]]  # a DOWN after a replacement stays after it
    assert runs([down, alert, replace]) == [[down], [alert], [replace]]
