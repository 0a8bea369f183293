"""The whole loop (observe -> decide -> act) on a fake EC2 and clock, with the ledger in moto's DynamoDB and the
membership in moto's S3: unique names when many instances launch at once, and a controller killed at every step
of a replacement (before and after each side effect) that finishes it exactly once after its restart."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import boto3
import pytest
from moto import mock_aws

from hpcc_contract.ledger import table_definition
from hpcc_node.controller import membership, observe
from hpcc_node.controller.act import Executor, reconcile_once
from hpcc_node.controller.decide import decide
from hpcc_node.controller.ledger import LeaseLost, Ledger, read_name
from hpcc_node.controller.model import READY, REPLACE, Group, Report
from hpcc_node.controller.timers import Timers
from tests.node.controller_fakes import FakeEC2, Killed, Killer

TABLE, BUCKET, CLUSTER = "hpcc-c-ledger", "hpcc-c-cluster", "c"
GPU = Group("gpu", "p5.48xlarge", 4, launch_template="lt-gpu", subnet_id="subnet-1")
TIMERS = Timers()


@dataclass
class Env:
    ddb: Any
    s3: Any
    ec2: FakeEC2
    now: list[float] = field(default_factory=lambda: [1_000_000.0])
    failing: set = field(default_factory=set)  # instance ids whose bootstrap fails

    def clock(self) -> float:
        return self.now[0]

    def reports(self) -> dict[str, Report]:
        """What the node agents write: each running instance reads its name from the ledger, then reports."""
        out = {}
        for iid in self.ec2.live():
            name = read_name(self.ddb, TABLE, iid)
            if name and self.ec2.instances[iid]["state"] == "running":
                ok = iid not in self.failing
                out[name] = Report(name, iid, ok, "" if ok else "bootstrap", "" if ok else "step efa failed")
        return out


@contextmanager
def fresh_env(seed: int = 0):
    """A ledger table and a membership bucket in moto, a fake EC2 (its `seed`) on the same fake clock."""
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        ddb.create_table(**table_definition(TABLE))
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        e = Env(ddb, s3, None)  # type: ignore[arg-type]
        e.ec2 = FakeEC2(e.clock, seed=seed)
        yield e


@pytest.fixture
def env():
    with fresh_env() as e:
        yield e


def loop(env: Env, groups, killer: Killer = None, owner: str = "head-1", timers: Timers = TIMERS) -> dict[str, Any]:
    """One loop of a controller process (a new process each call: nothing survives in memory)."""
    wrap = killer.wrap if killer else (lambda c: c)
    ec2, ddb, s3 = wrap(env.ec2), wrap(env.ddb), wrap(env.s3)
    ledger = Ledger(ddb, TABLE, owner, env.clock, timers)
    executor = Executor(ec2, ledger, s3, BUCKET, CLUSTER, groups, env.clock, None, timers, rand=lambda: 1.0)
    result = reconcile_once(
        lambda: observe.observe(ec2, ledger, CLUSTER, env.clock, env.reports, None),
        lambda snap: decide(snap, groups, snap.now, timers),
        executor,
        ledger,
    )
    env.now[0] += TIMERS.loop_seconds
    env.ec2.tick()
    return result


def settle(env: Env, groups, killer: Killer = None, loops: int = 12) -> int:
    """Loops until a loop does nothing; a killed controller is restarted (a new process) at the next loop."""
    for n in range(loops):
        try:
            if not loop(env, groups, killer)["lines"]:
                return n
        except Killed:
            continue
    raise AssertionError("the controller did not settle")


def check_consistent(env: Env, groups) -> dict[str, Any]:
    slots = Ledger(env.ddb, TABLE, "reader", env.clock).load().slots
    wanted = sum(g.count for g in groups)
    assert len(slots) == wanted and all(s.state == READY for s in slots.values()), slots
    held = [s.instance_id for s in slots.values()]
    assert len(set(held)) == wanted and sorted(held) == sorted(env.ec2.live())  # one name one instance, no orphan
    assert all(read_name(env.ddb, TABLE, s.instance_id) == s.name for s in slots.values())
    assert all(env.ec2.instances[s.instance_id]["tags"]["hpcc:node"] == s.name for s in slots.values())
    doc, _ = membership.read(env.s3, BUCKET)
    assert sorted((n["name"], n["instance"]) for n in doc["nodes"]) == sorted(
        (s.name, s.instance_id) for s in slots.values()
    )
    return slots


def test_many_instances_launched_at_once_get_unique_names():
    cpu = Group("cpu", "c7i.48xlarge", 60, launch_template="lt-cpu", subnet_id="subnet-1")
    with fresh_env(seed=7) as env:
        loop(env, [GPU, cpu])
        assert len(env.ec2.launched) == 64 and env.ec2.calls["create_fleet"] == 2
        # a second head, alive at the same time, cannot name anything while the first holds the lease
        assert loop(env, [GPU, cpu], owner="head-2") == {
            "lease": False,
            "holder": "head-1",
            "until": pytest.approx(env.now[0] - 60 + 120, abs=61),
            "lines": [],
        }
        settle(env, [GPU, cpu])
        slots = check_consistent(env, [GPU, cpu])
        assert sorted(s.name for s in slots.values() if s.group == "cpu") == [f"cpu-{i:03d}" for i in range(60)]
        assert len(env.ec2.launched) == 64


def counted(env: Env, name: str) -> int:
    """The replacements of `name` counted against its cap and the group's budget: REPLACE starts with a failure (an
    uncounted finish of a recorded one has none). The slot's own count restarts once its new instance is ready."""
    events = Ledger(env.ddb, TABLE, "r", env.clock).load().events
    return sum(1 for e in events if e.kind == REPLACE and e.phase == "start" and e.node == name and e.failure)


def _replacement(env: Env, killer: Killer) -> None:
    settle(env, [GPU])
    failed = Ledger(env.ddb, TABLE, "r", env.clock).load().slots["gpu-001"].instance_id
    env.ec2.instances[failed]["status_ok"] = False  # EC2's status check fails
    settle(env, [GPU], killer)
    slots = check_consistent(env, [GPU])
    assert slots["gpu-001"].instance_id != failed and env.ec2.instances[failed]["state"] == "terminated"
    assert counted(env, "gpu-001") == 1  # counted once, however often the controller died
    assert len(env.ec2.launched) == 5  # four, and exactly one replacement
    for name in ("gpu-000", "gpu-002", "gpu-003"):
        assert counted(env, name) == 0 and slots[name].attempts == 0


def test_a_replacement_without_a_crash(env):
    counting = Killer()
    _replacement(env, counting)
    assert counting.count > 10  # the steps the parametrised test below dies at


@pytest.mark.parametrize("tokens", ["honoured", "ignored"])
@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
def test_a_controller_killed_at_every_step_of_a_replacement_finishes_it_once(after, tokens):
    """Also where CreateFleet ignores its ClientToken (the box's moto): a launch killed before its answer was
    recorded is found by its instances' launch tag, not made twice (issue 37, fault 2)."""
    steps = _steps()
    for at in range(1, steps + 1):
        with fresh_env() as env:
            env.ec2.honours_tokens = tokens == "honoured"
            killer = Killer(at, after)
            try:
                _replacement(env, killer)
            except AssertionError as e:
                raise AssertionError(f"killed {'after' if after else 'before'} side effect #{at}: {e}") from e
            assert killer.fired


def _steps() -> int:
    with fresh_env() as env:
        counting = Killer()
        _replacement(env, counting)
        return counting.count


def test_insufficient_capacity_backs_off_without_spending_budget(env):
    settle(env, [GPU])
    failed = Ledger(env.ddb, TABLE, "r", env.clock).load().slots["gpu-002"].instance_id
    env.ec2.instances[failed]["state"] = "terminated"  # EC2 took it
    env.ec2.capacity = 0
    for _ in range(4):
        loop(env, [GPU])
    ledger = Ledger(env.ddb, TABLE, "r", env.clock).load()
    assert ledger.slots["gpu-002"].state == "replacing" and ledger.slots["gpu-002"].attempts == 1
    gs = ledger.groups["gpu"]
    assert gs.launch_failures == 3 and gs.consecutive_failures == 0 and gs.backoff_until >= env.clock()
    # the first launch sets capacity up, then: fails in the loop that replaces gpu-002, waits 60 s (a loop), fails,
    # waits 120 s (two loops), fails: not one call a loop
    assert env.ec2.calls["create_fleet"] == 1 + 3
    env.ec2.capacity = None
    env.now[0] += TIMERS.launch_backoff_max_seconds
    settle(env, [GPU])
    slots = check_consistent(env, [GPU])
    assert (
        slots["gpu-002"].state == READY
        and counted(env, "gpu-002") == 1
        and Ledger(env.ddb, TABLE, "r", env.clock).load().groups["gpu"].launch_failures == 0
    )


def _every_new_instance_fails(env: Env, group: str = "gpu") -> None:
    original = env.ec2.create_fleet

    def failing_fleet(**req):
        out = original(**req)
        if {"Key": "hpcc:group", "Value": group} in req["TagSpecifications"][0]["Tags"]:
            env.failing.update(i for entry in out["Instances"] for i in entry["InstanceIds"])
        return out

    env.ec2.create_fleet = failing_fleet


def test_a_slot_that_fails_every_boot_stops_at_its_attempt_cap_with_a_clear_reason(env):
    settle(env, [GPU])
    _every_new_instance_fails(env)
    first = Ledger(env.ddb, TABLE, "r", env.clock).load().slots["gpu-003"].instance_id
    env.ec2.instances[first]["status_ok"] = False
    settle(env, [GPU], loops=30)
    ledger = Ledger(env.ddb, TABLE, "r", env.clock).load()
    slot = ledger.slots["gpu-003"]
    assert slot.state == "failed" and slot.attempts == TIMERS.slot_attempt_cap
    assert "attempt cap" in slot.reason and "bootstrap: step efa failed" in slot.reason
    assert len(env.ec2.launched) == 4 + TIMERS.slot_attempt_cap
    assert [s.state for n, s in sorted(ledger.slots.items()) if n != "gpu-003"] == [READY] * 3
    assert any(e.kind == "alert" and "gpu-003" in e.detail for e in ledger.events)


def test_a_group_whose_every_node_fails_boot_ends_protected_with_a_clear_reason(env):
    # four failing gpu nodes among 20: below the systemic threshold (5), so the group's own count decides
    timers = Timers(protected_failure_count=5)
    cpu = Group("cpu", "c7i.48xlarge", 16, launch_template="lt-cpu", subnet_id="subnet-1")
    _every_new_instance_fails(env, "gpu")
    for _ in range(20):
        loop(env, [GPU, cpu], timers=timers)
    ledger = Ledger(env.ddb, TABLE, "r", env.clock).load()
    assert ledger.groups["gpu"].protected == "5 bootstrap failures in a row, the last: step efa failed"
    assert len(env.ec2.launched) == 20 + 4  # the first four replaced, the fifth failure protects the group
    gpu = [s for s in ledger.slots.values() if s.group == "gpu"]
    assert {s.state for s in gpu} == {"failed"} and all("group protected" in s.reason for s in gpu)
    assert {s.state for s in ledger.slots.values() if s.group == "cpu"} == {READY}
    assert not ledger.groups.get("cpu") or not ledger.groups["cpu"].protected


def test_a_small_group_whose_every_node_fails_the_same_way_is_systemic_and_nothing_is_replaced(env):
    _every_new_instance_fails(env, "gpu")
    for _ in range(6):
        loop(env, [GPU])
    ledger = Ledger(env.ddb, TABLE, "r", env.clock).load()
    assert len(env.ec2.launched) == 4 and not any(e.kind == "replace" for e in ledger.events)
    assert [k for k in ledger.alerts] == ["systemic:bootstrap:step efa failed"]


def test_any_ready_node_resets_its_groups_failure_count_and_protected_mode_and_its_slots_attempts(env):
    from hpcc_node.controller.model import MARK, Action, GroupState, Slot, Snapshot, Why

    ledger = Ledger(env.ddb, TABLE, "head-1", env.clock)
    ledger.acquire()
    slot = ledger.put_slot(Slot("gpu-000", "gpu", 0, "i-1", attempts=2), state="booting")
    gs = ledger.put_group(GroupState("gpu"), consecutive_failures=7, protected="7 bootstrap failures")
    executor = Executor(env.ec2, ledger, env.s3, BUCKET, CLUSTER, [GPU], env.clock)
    snap = Snapshot(now=env.clock(), slots={"gpu-000": slot}, group_states={"gpu": gs})
    executor.run([Action(MARK, "gpu", "gpu-000", "i-1", Why("", "bootstrap passed"), {"state": READY})], snap)
    after = ledger.load()
    assert (after.slots["gpu-000"].state, after.slots["gpu-000"].attempts) == (READY, 0)  # the cap counts in a row
    assert (after.groups["gpu"].consecutive_failures, after.groups["gpu"].protected) == (0, "")


def test_a_controller_without_the_lease_publishes_nothing(env):
    from hpcc_node.controller.ledger import LeaseLost
    from hpcc_node.controller.model import PUBLISH, Action, Snapshot, Why

    old = Ledger(env.ddb, TABLE, "old-head", env.clock)
    assert old.acquire()
    env.now[0] += TIMERS.lease_seconds + 1
    assert Ledger(env.ddb, TABLE, "new-head", env.clock).acquire()
    executor = Executor(env.ec2, old, env.s3, BUCKET, CLUSTER, [GPU], env.clock)
    with pytest.raises(LeaseLost):
        executor.run(
            [Action(PUBLISH, why=Why("", "membership changed"), data={"body": {"nodes": []}, "digest": "d"})],
            Snapshot(now=env.clock()),
        )
    assert membership.head(env.s3, BUCKET) == (0, "")


def test_the_process_loops_every_minute_and_survives_a_failed_loop(caplog):
    from hpcc_node.controller.loop import forever

    caplog.set_level("INFO", logger="hpcc.controller")
    now, sleeps, calls = [0.0], [], []

    def step():
        calls.append(now[0])
        now[0] += 5
        if len(calls) == 2:
            raise RuntimeError("S3 throttled")
        return {"lease": len(calls) != 3, "holder": "head-2", "until": 99}

    loops = forever(
        step, lambda: now[0], lambda s: (sleeps.append(s), now.__setitem__(0, now[0] + s)), stop=lambda: len(calls) >= 3
    )
    assert loops == 3 and calls == [0.0, 60.0, 120.0]
    assert sleeps[:4] == [15.0, 15.0, 15.0, 10.0]  # the rest of the minute, in status polls (wake_poll_seconds)
    assert "S3 throttled" in caplog.text and "standing by: head-2" in caplog.text


def test_a_new_failed_verdict_brings_the_next_loop_forward_to_its_settle_time_once(caplog):
    """Between loops the controller polls the statuses (Timers.wake_poll_seconds); a failed verdict no loop acted on
    runs the next loop once it is settled (its time + health_settle_seconds), not a whole loop later."""
    from hpcc_node.controller.loop import forever

    caplog.set_level("INFO", logger="hpcc.controller")
    now, calls, fault = [0.0], [], {"at": None}

    def step():
        calls.append(now[0])
        now[0] += 2
        return {"lease": True}

    step.due = lambda: None if fault["at"] is None or len(calls) > 1 else fault["at"] + 20

    def sleep(s):
        now[0] += s
        if now[0] >= 17 and fault["at"] is None:
            fault["at"] = 12.0  # the node's verdict, written at 12 s, seen by the poll at 17 s

    forever(step, lambda: now[0], sleep, stop=lambda: len(calls) >= 3)
    assert calls == [0.0, 32.0, 92.0]  # at 12 + 20 (settled), then the minute from there
    assert "a node's new failed verdict: the next loop in 15 s, not 43 s" in caplog.text


def test_which_failed_verdicts_are_new_to_the_loops():
    from hpcc_node.controller.loop import failed_verdicts, wake_at
    from hpcc_node.controller.timers import Timers

    ok, bad = Report("gpu-000", "i-0", True, at=50.0), Report("gpu-001", "i-1", False, "health", "xid", at=100.0)
    reports = {"gpu-000": ok, "gpu-001": bad}
    assert failed_verdicts(reports) == {("gpu-001", "i-1", 100.0)}
    assert failed_verdicts(reports, settled_by=99.0) == set()  # not settled when that loop read it
    assert wake_at(reports, set(), Timers()) == 120.0
    assert wake_at(reports, failed_verdicts(reports), Timers()) is None  # acted on: no early loop again
    again = {**reports, "gpu-001": Report("gpu-001", "i-1", False, "health", "xid 48", at=300.0)}
    assert wake_at(again, failed_verdicts(reports), Timers()) == 320.0  # the node's verdict changed


def bring_up(env: Env, step, loops: int = 6) -> None:
    """A built controller's loops, a minute apart, with each named node's agent reporting ready in S3."""
    for _ in range(loops):
        step()
        env.now[0] += 60
        env.ec2.tick()
        for iid in env.ec2.live():  # each agent: its name from the ledger, its verdict in S3
            name = read_name(env.ddb, TABLE, iid)
            if name:
                env.s3.put_object(
                    Bucket=BUCKET,
                    Key=membership.status_key(membership.instance_arn("aws", "us-east-1", "123456789012", iid)),
                    Body=membership.status_body(name, iid, True, at=env.clock()),
                )


def test_a_built_controller_brings_a_cluster_up_from_the_agents_reports_in_s3(env):
    from hpcc_node.controller.loop import build_step

    step = build_step(env.ec2, env.ddb, env.s3, CLUSTER, TABLE, BUCKET, lambda: [GPU], "head-1", env.clock)
    bring_up(env, step)
    check_consistent(env, [GPU])
    # a node's failed verdict in S3: the poll between loops asks for a loop once it is settled, and no more after
    iid = sorted(env.ec2.live())[0]
    name = read_name(env.ddb, TABLE, iid)
    written = env.clock()
    env.s3.put_object(
        Bucket=BUCKET,
        Key=membership.status_key(membership.instance_arn("aws", "us-east-1", "123456789012", iid)),
        Body=membership.status_body(name, iid, False, "health", "xid: Xid 79", at=written),
    )
    assert step.due() == written + 20
    env.now[0] += 20
    step()
    assert step.due() is None


def test_a_removed_node_slurm_no_longer_knows_is_terminated_all_the_same(env):
    """A shrink rewrites slurm.conf's range first; the removal's `scontrol update` then fails, and the instance must
    still go (the box saw "remove" logged every loop while the instance ran on)."""
    from hpcc_node.controller.model import REMOVE, Action, Slot, Snapshot, Why

    ledger = Ledger(env.ddb, TABLE, "head-1", env.clock)
    ledger.acquire()
    from hpcc_node.controller import fleet

    iid = env.ec2.create_fleet(**fleet.request(GPU, 1, "t-remove", CLUSTER))["Instances"][0]["InstanceIds"][0]
    slot = ledger.put_slot(Slot("gpu-003", "gpu", 3, iid), state="ready")

    def slurm(argv):
        raise RuntimeError("scontrol: error: Invalid node name specified")

    executor = Executor(env.ec2, ledger, env.s3, BUCKET, CLUSTER, [GPU], env.clock, slurm)
    executor.run(
        [Action(REMOVE, "gpu", "gpu-003", iid, Why("", "shrink"), {"reason": "hpcc: shrink"})],
        Snapshot(now=env.clock(), slots={"gpu-003": slot}),
    )
    assert env.ec2.instances[iid]["state"] == "shutting-down"
    assert ledger.load().slots["gpu-003"].state == "removing"


def test_a_loop_slower_than_the_lease_still_writes_what_it_decided_and_stops_once_another_holds_it(env):
    """Each Slurm call waits out a long timeout (slurmctld restarting): the loop outlives its lease. The actions
    after the lease's end are still written (the lease renewed between actions), unless another controller took
    the lease meanwhile: then the loop stops at its next action."""
    from hpcc_node.controller.ledger import LeaseLost
    from hpcc_node.controller.model import DOWN, MARK, Action, Slot, Snapshot, Why

    ledger = Ledger(env.ddb, TABLE, "head-1", env.clock)
    assert ledger.acquire()
    slots = {f"gpu-00{i}": ledger.put_slot(Slot(f"gpu-00{i}", "gpu", i, f"i-{i}"), state="booting") for i in range(3)}

    def slow_slurm(argv):
        env.now[0] += TIMERS.lease_seconds * 0.4  # each scontrol call gives up after a long timeout

    executor = Executor(env.ec2, ledger, env.s3, BUCKET, CLUSTER, [GPU], env.clock, slow_slurm)
    why = Why("health", "xid: Xid 79")
    actions = [
        a
        for n in slots
        for a in (
            Action(DOWN, "gpu", n, slots[n].instance_id, why, {"reason": "hpcc: x"}),
            Action(MARK, "gpu", n, slots[n].instance_id, why, {"state": "failed"}),
        )
    ]
    executor.run(actions, Snapshot(now=env.clock(), slots=slots))
    assert env.clock() - 1_000_000.0 > TIMERS.lease_seconds  # the loop outlived the lease it started with
    assert {n: s.state for n, s in Ledger(env.ddb, TABLE, "r", env.clock).load().slots.items()} == {
        n: "failed" for n in slots
    }

    other = Ledger(env.ddb, TABLE, "head-2", env.clock)
    env.now[0] += TIMERS.lease_seconds + 1  # head-1 stalled past its lease; head-2 takes over
    assert other.acquire()
    later = Ledger(env.ddb, TABLE, "r", env.clock).load().slots
    with pytest.raises(LeaseLost):
        executor.run(
            [Action(MARK, "gpu", "gpu-000", "i-0", why, {"state": "ready"})], Snapshot(now=env.clock(), slots=later)
        )
    assert Ledger(env.ddb, TABLE, "r", env.clock).load().slots["gpu-000"].state == "failed"


def test_one_action_whose_cloud_call_outlives_the_lease_still_records_its_result(env):
    """A CreateFleet that answers after the lease's end (an API slowed down, a loaded head): the launch's result
    and its event are still written, the lease renewed by the write itself, so the next loop names the
    instances instead of standing by and launching again."""
    from hpcc_node.controller.model import LAUNCH, Action, Snapshot, Why

    ledger = Ledger(env.ddb, TABLE, "head-1", env.clock)
    assert ledger.acquire()
    fake_create = env.ec2.create_fleet

    def slow_create_fleet(**req):
        env.now[0] += TIMERS.lease_seconds + 5
        return fake_create(**req)

    env.ec2.create_fleet = slow_create_fleet
    executor = Executor(env.ec2, ledger, env.s3, BUCKET, CLUSTER, [GPU], env.clock, None)
    executor.run(
        [Action(LAUNCH, "gpu", "", "", Why("missing", "2 node(s) missing"), {"count": 2, "token": "t-1"})],
        Snapshot(now=env.clock()),
    )
    loaded = Ledger(env.ddb, TABLE, "r", env.clock).load()
    assert [len(r.instance_ids or ()) for r in loaded.launches] == [2]
    assert [e.phase for e in loaded.events if e.kind == LAUNCH] == ["start", "done"]


def test_with_s3_down_a_dead_node_is_still_replaced_and_no_live_node_is_judged_silent(env, caplog):
    """The statuses cannot be read (S3 down): EC2 is reconciled all the same (a terminated node's replacement is
    launched within two loops), on the verdicts last read, and no heartbeat is judged missing however long it
    lasts (issue 38: one failure once stopped every loop)."""
    from hpcc_node.controller.loop import build_step

    down = {"s3": False}

    class FlakyS3:
        def __getattr__(self, name):
            if down["s3"]:
                raise RuntimeError("Could not connect to the endpoint URL")
            return getattr(env.s3, name)

    import time

    env.now[0] = time.time()  # moto's LastModified (a status's heartbeat) is the wall clock's
    step = build_step(env.ec2, env.ddb, FlakyS3(), CLUSTER, TABLE, BUCKET, lambda: [GPU], "head-1", env.clock)
    bring_up(env, step)
    before = check_consistent(env, [GPU])
    down["s3"] = True
    caplog.set_level("WARNING", logger="hpcc.controller")
    dead = before[sorted(before)[0]].instance_id
    env.ec2.terminate_instances(InstanceIds=[dead])
    launched = len(env.ec2.launched)
    for _ in range(2):
        env.ec2.tick()
        step()
        env.now[0] += 60
    assert len(env.ec2.launched) == launched + 1  # its replacement, with S3 down
    assert "the nodes' statuses cannot be read" in caplog.text
    env.now[0] += Timers().heartbeat_timeout_seconds * 2  # long past any heartbeat timeout, S3 still down
    for _ in range(3):
        env.ec2.tick()
        step()
        env.now[0] += 60
    slots = Ledger(env.ddb, TABLE, "reader", env.clock).load().slots
    kept = {n: s.state for n, s in slots.items() if n != sorted(before)[0]}
    assert set(kept.values()) == {READY}, kept  # none drained or replaced for a silence S3 hides
    assert len(env.ec2.launched) == launched + 1
    assert "no heartbeat: its status unwritten" not in caplog.text  # not even judged (systemic or not)


def test_launch_backoffs_are_jittered_so_groups_that_failed_together_retry_apart(env):
    """The wait after a failed launch is the doubling cap's upper half at random ("equal jitter"), from the
    injected random source: two groups that failed in the same loop do not retry in the same one."""
    assert [TIMERS.launch_backoff(n, 1.0) for n in (1, 2)] == [TIMERS.launch_backoff_first_seconds * k for k in (1, 2)]
    assert TIMERS.launch_backoff(1, 0.0) == -(-TIMERS.launch_backoff_first_seconds // 2)
    env.ec2.capacity = 0
    waits = []
    for draw in (0.0, 1.0):
        ledger = Ledger(env.ddb, TABLE, "head-1", env.clock)
        ledger.acquire()
        executor = Executor(env.ec2, ledger, env.s3, BUCKET, CLUSTER, [GPU], env.clock, rand=lambda d=draw: d)
        before = ledger.load().groups.get("gpu")
        snap = observe.observe(env.ec2, ledger, CLUSTER, env.clock, env.reports, None)[0]
        executor.run(decide(snap, [GPU], snap.now, TIMERS), snap)
        after = ledger.load().groups["gpu"]
        waits.append(after.backoff_until - env.clock())
        ledger.put_group(after, launch_failures=0, backoff_until=0.0)
        assert before is None or before.launch_failures == 0
    assert waits == [TIMERS.launch_backoff(1, 0.0), TIMERS.launch_backoff(1, 1.0)]


def test_replacements_launch_best_effort_so_capacity_for_one_of_two_replaces_one_now(env):
    """Two nodes lost and EC2 has room for one: the replacements' launch asks for 2 with MinTargetCapacity 1 and
    gets 1, named at once; the other follows when capacity comes back (issue 38: all-or-nothing replaced none)."""
    bigger = replace(GPU, count=8)
    settle(env, [bigger])
    slots = Ledger(env.ddb, TABLE, "r", env.clock).load().slots
    for name in ("gpu-001", "gpu-005"):
        env.ec2.instances[slots[name].instance_id]["state"] = "terminated"  # EC2 took them
    env.ec2.capacity = 1
    settle(env, [bigger])
    states = {n: s.state for n, s in Ledger(env.ddb, TABLE, "r", env.clock).load().slots.items()}
    assert sorted(states.values()).count(READY) == 7, states  # one replaced with capacity for one
    fleets = [t for t in env.ec2.tokens if env.ec2.tokens[t]]
    assert env.ec2.calls["create_fleet"] >= 2 and len(env.ec2.launched) == 8 + 1, fleets
    env.ec2.capacity = None
    env.now[0] += TIMERS.launch_backoff_max_seconds
    settle(env, [bigger])
    check_consistent(env, [bigger])


def test_a_failed_nodes_successor_is_launched_in_the_loop_that_terminates_it(env):
    """One loop, not two: the loop that replaces a node launches its successor (named once the old instance is
    shutting down), so a replacement costs a loop less (issue 38)."""
    settle(env, [GPU])
    slots = Ledger(env.ddb, TABLE, "r", env.clock).load().slots
    old = slots["gpu-001"].instance_id
    env.ec2.instances[old]["status_ok"] = False
    launched = len(env.ec2.launched)
    loop(env, [GPU])
    assert env.ec2.instances[old]["state"] in ("shutting-down", "terminated")
    assert len(env.ec2.launched) == launched + 1  # in the same loop
    new = env.ec2.launched[-1]
    env.now[0] += 60
    env.ec2.tick()
    loop(env, [GPU])
    assert Ledger(env.ddb, TABLE, "r", env.clock).load().slots["gpu-001"].instance_id == new
    settle(env, [GPU])
    check_consistent(env, [GPU])
    assert counted(env, "gpu-001") == 1 and len(env.ec2.launched) == launched + 1


def test_addresses_go_to_slurm_in_one_command_and_node_by_node_only_when_it_is_refused(env, caplog):
    """A bring-up's set-addresses are one `scontrol update` per 500 nodes, not one per node (the simulator's
    4,096-node bring-up loop spent 1,001 calls on them); a refused batch is retried node by node, so the node Slurm
    does not know is the only one left without its address."""
    from hpcc_node.controller.act import SLURM_BATCH
    from hpcc_node.controller.model import SET_ADDR, Action, Snapshot, Why

    ledger = Ledger(env.ddb, TABLE, "head-1", env.clock)
    ledger.acquire()
    names = [f"gpu-{i:03d}" for i in range(SLURM_BATCH + 2)]
    acts = [
        Action(SET_ADDR, "gpu", n, "", Why("", "moved"), {"addr": f"10.0.{i // 250}.{i % 250}", "hostname": n})
        for i, n in enumerate(names)
    ]
    calls = []
    Executor(env.ec2, ledger, env.s3, BUCKET, CLUSTER, [GPU], env.clock, calls.append).run(
        acts, Snapshot(now=env.clock())
    )
    assert [len(c[2].split(",")) for c in calls] == [SLURM_BATCH, 2]  # NodeName= lists of 500, then 2
    assert calls[1][2:] == ["NodeName=gpu-500,gpu-501", "NodeAddr=10.0.2.0,10.0.2.1", "NodeHostname=gpu-500,gpu-501"]

    def refusing(argv):
        calls.append(argv)
        if "," in argv[2] or argv[2] == "NodeName=gpu-001":
            raise RuntimeError("scontrol: error: Invalid node name specified")

    calls.clear()
    three = [
        Action(SET_ADDR, "gpu", n, "", Why("", "moved"), {"addr": f"10.0.0.{i}", "hostname": n})
        for i, n in enumerate(names[:3])
    ]
    Executor(env.ec2, ledger, env.s3, BUCKET, CLUSTER, [GPU], env.clock, refusing).run(three, Snapshot(now=env.clock()))
    assert [c[2] for c in calls] == [
        "NodeName=gpu-000,gpu-001,gpu-002",
        "NodeName=gpu-000",
        "NodeName=gpu-001",
        "NodeName=gpu-002",
    ]
    assert "set-address of 3 nodes refused" in caplog.text and caplog.text.count("failed: scontrol") == 1

    class Lost:  # a controller that lost its lease writes nothing more, Slurm's addresses included
        def keep(self):
            raise LeaseLost("head-2 holds the lease")

    calls.clear()
    with pytest.raises(LeaseLost):
        Executor(env.ec2, Lost(), env.s3, BUCKET, CLUSTER, [GPU], env.clock, calls.append).run(three, Snapshot(now=0))
    assert calls == []
