"""decide() with plain values: each row of the failure taxonomy, protected mode, the attempt cap, the circuit
breaker, systemic bursts, a person's drain, Capacity Blocks, orphans, names, grow and shrink."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hpcc_node.controller import model as m
from hpcc_node.controller.model import (
    ALERT,
    DOWN,
    DRAIN,
    FORGET,
    LAUNCH,
    MARK,
    NAME,
    PROTECT,
    PUBLISH,
    REMOVE,
    REPLACE,
    RESUME,
    SET_ADDR,
    TERMINATE_ORPHAN,
    WAIT_CAPACITY_BLOCK,
    CapacityBlock,
    Event,
    GroupState,
    Instance,
    LaunchRecord,
    Slot,
)
from tests.node.controller_cases import (
    GPU,
    NOW,
    by_kind,
    cluster,
    ip,
    kinds,
    merge,
    run,
    with_instance,
    with_launched,
    with_report,
    with_slot,
    with_slurm,
)

N1 = "gpu-001"


def test_a_healthy_cluster_needs_nothing_but_its_first_membership():
    actions = run(cluster())
    assert kinds(actions) == [PUBLISH]
    published = by_kind(actions, PUBLISH)[0]
    again = run(replace(cluster(), membership_digest=published.data["digest"]))
    assert again == []


def test_the_membership_carries_the_controllers_head_and_a_new_head_is_published():
    head = {"name": "head", "ip": "10.0.0.4", "instance": "i-0ead"}
    published = by_kind(run(replace(cluster(), head=head)), PUBLISH)[0]
    assert published.data["body"]["head"] == head
    moved = replace(
        cluster(), head={**head, "ip": "10.0.0.9", "instance": "i-0ead2"}, membership_digest=published.data["digest"]
    )  # a replaced head adopts the cluster
    assert by_kind(run(moved), PUBLISH)[0].data["body"]["head"]["ip"] == "10.0.0.9"


# The taxonomy, one row at a time: (what breaks, the actions on the node, replaced?)
TAXONOMY = [
    (
        "bootstrap: a step failed",
        lambda s: with_report(
            with_slot(s, N1, state=m.BOOTING, since=NOW - 60), N1, False, "bootstrap", "step efa failed"
        ),
        [DOWN, REPLACE],
    ),
    (
        "bootstrap: no ready report in the boot grace",
        lambda s: with_slot(
            replace(s, reports={k: v for k, v in s.reports.items() if k != N1}), N1, state=m.BOOTING, since=NOW - 1801
        ),
        [DOWN, REPLACE],
    ),
    (
        "bootstrap: slurmd never registered",
        lambda s: with_slurm(with_slot(s, N1, state=m.BOOTING, since=NOW - 1801), N1, {"IDLE", "NOT_RESPONDING"}),
        [DOWN, REPLACE],
    ),
    ("bundle refused: reported only", lambda s: with_report(s, N1, False, "bundle", "bundle sha256 mismatch"), [MARK]),
    ("hook failed: reported only", lambda s: with_report(s, N1, False, "hook", "hook prepare.sh exited 3"), [MARK]),
    ("instance: status check failed (hard)", lambda s: with_instance(s, N1, status_ok=False), [DOWN, REPLACE]),
    ("instance: terminated by EC2 (hard)", lambda s: with_instance(s, N1, state="terminated"), [DOWN, REPLACE]),
    ("instance: stopped (hard)", lambda s: with_instance(s, N1, state="stopped"), [DOWN, REPLACE]),
    (
        "instance: scheduled retirement (soft: drain first)",
        lambda s: with_instance(s, N1, events=("instance-retirement",)),
        [DRAIN],
    ),
]


@pytest.mark.parametrize("case,breaks,expected", TAXONOMY, ids=[t[0] for t in TAXONOMY])
def test_each_failure_class_gets_its_action(case, breaks, expected):
    actions = run(breaks(cluster()))
    assert kinds(actions, N1) == expected
    if expected == [MARK]:  # reported: the slot kept failed, one alert, nothing replaced
        assert by_kind(actions, MARK)[0].data["state"] == m.FAILED and len(by_kind(actions, ALERT)) == 1
    for a in actions:
        if a.node == N1 and a.kind in (DOWN, REPLACE, DRAIN):
            assert a.why.failure and a.why.evidence and a.data.get("reason", "hpcc:").startswith("hpcc:")
    others = [a for a in actions if a.node not in (N1, "") and a.kind != PUBLISH]
    assert others == []


def test_a_node_silent_past_the_heartbeat_timeout_is_drained_then_replaced_and_one_just_within_is_left():
    """Its status object's LastModified (a change or the agent's heartbeat) is older than the timeout: its agent,
    and its health checks, stopped. With Slurm it drains first (a running job finishes); without, it is replaced."""
    from hpcc_node.controller.timers import DEFAULT

    timeout = DEFAULT.heartbeat_timeout_seconds

    def heard(s, ago):
        return replace(s, reports={**s.reports, N1: replace(s.reports[N1], heard=NOW - ago)})

    assert kinds(run(heard(cluster(), timeout - 5)), N1) == []
    silent = run(heard(cluster(), timeout + 5))
    assert kinds(silent, N1) == [DRAIN] and "no heartbeat" in by_kind(silent, DRAIN)[0].data["reason"]
    assert kinds(run(heard(cluster(slurm=False), timeout + 5)), N1) == [REPLACE]
    drained = with_slurm(
        with_slot(heard(cluster(), timeout + 5), N1, state=m.DRAINING),
        N1,
        {"IDLE", "DRAIN"},
        "hpcc: health: no heartbeat",
    )
    assert kinds(run(drained), N1) == [DOWN, REPLACE]
    unknown = replace(cluster(), reports={**cluster().reports, N1: replace(cluster().reports[N1], heard=0.0)})
    assert kinds(run(unknown), N1) == []  # no LastModified known (a report built elsewhere): no judgement


def test_a_soft_failure_is_replaced_once_slurm_has_drained_the_node():
    s = with_slot(with_instance(cluster(), N1, events=("system-reboot",)), N1, state=m.DRAINING)
    busy = with_slurm(s, N1, {"MIXED", "DRAIN"}, "hpcc: instance: scheduled system-reboot")
    assert kinds(run(busy), N1) == []
    drained = with_slurm(s, N1, {"IDLE", "DRAIN"}, "hpcc: instance: scheduled system-reboot")
    assert kinds(run(drained), N1) == [DOWN, REPLACE]


def test_a_launch_failure_backs_off_and_spends_no_budget():
    s = with_slot(with_instance(cluster(), N1, state="terminated"), N1, state=m.REPLACING, since=NOW - 600)
    waiting = replace(s, group_states={"gpu": GroupState("gpu", launch_failures=2, backoff_until=NOW + 60)})
    assert LAUNCH not in kinds(run(waiting))
    later = run(waiting, now=NOW + 61)
    assert [a.data["count"] for a in by_kind(later, LAUNCH)] == [1]
    assert all(a.kind != REPLACE for a in later)


def test_repeated_bootstrap_failures_put_the_group_in_protected_mode():
    failing = with_report(
        with_slot(cluster(), N1, state=m.BOOTING, since=NOW - 60), N1, False, "bootstrap", "step lustre failed"
    )
    almost = replace(failing, group_states={"gpu": GroupState("gpu", consecutive_failures=8)})
    assert REPLACE in kinds(run(almost), N1)
    tenth = replace(failing, group_states={"gpu": GroupState("gpu", consecutive_failures=9)})
    actions = run(tenth)
    assert kinds(actions)[:2] == [PROTECT, MARK] and REPLACE not in kinds(actions)
    assert "10 bootstrap failures in a row" in by_kind(actions, PROTECT)[0].data["reason"]


def test_a_protected_group_launches_nothing_and_replaces_nothing():
    s = with_slot(with_instance(cluster(), "gpu-002", state="terminated"), "gpu-002", state=m.REPLACING)
    s = with_instance(s, N1, status_ok=False)
    protected = replace(s, group_states={"gpu": GroupState("gpu", protected="10 bootstrap failures")})
    actions = run(protected)
    assert LAUNCH not in kinds(actions) and REPLACE not in kinds(actions)
    assert by_kind(actions, MARK)[0].node == N1 and "group protected" in by_kind(actions, MARK)[0].data["reason"]
    # unprotected: gpu-002's successor, and N1's in the loop that replaces it (named once N1's instance is gone)
    assert [a.data["count"] for a in by_kind(run(s), LAUNCH)] == [2]


def test_hpcc_replace_of_a_node_of_a_protected_group_lifts_the_protection_and_the_next_loop_launches():
    s = with_slot(cluster(), N1, state=m.FAILED, reason="step efa failed (group protected: 2 bootstrap failures)")
    protected = replace(s, group_states={"gpu": GroupState("gpu", consecutive_failures=2, protected="2 failures")})
    assert PROTECT not in kinds(run(protected))  # nobody asked: the protection holds
    asked = with_slot(protected, N1, replace_requested=True)
    actions = run(asked)
    (lift,) = by_kind(actions, PROTECT)
    assert lift.data["reason"] == "" and f"hpcc replace {N1}" in lift.why.evidence
    assert REPLACE in kinds(actions, N1)
    vacant = with_instance(with_slot(s, N1, state=m.REPLACING), N1, state="terminated")
    lifted = replace(vacant, group_states={"gpu": GroupState("gpu", consecutive_failures=2)})
    assert [a.data["count"] for a in by_kind(run(lifted), LAUNCH)] == [1]


def test_a_slot_that_reached_its_attempt_cap_is_left_failed():
    s = with_slot(with_instance(cluster(), N1, status_ok=False), N1, attempts=3)
    actions = run(s)
    assert kinds(actions, N1) == [MARK] and by_kind(actions, MARK)[0].data["state"] == m.FAILED
    assert any(a.data.get("key") == f"cap:{N1}" for a in by_kind(actions, ALERT))
    assert kinds(run(with_slot(s, N1, attempts=2)), N1) == [DOWN, REPLACE]


def _replaced(at: float, n: int):
    return tuple(Event(at, REPLACE, f"x-{i:03d}", "instance", f"instance:fault {chr(97 + i)}") for i in range(n))


def test_the_circuit_breaker_bounds_replacements_per_window():
    s = with_instance(cluster(), N1, status_ok=False)
    full = replace(s, events=_replaced(NOW - 100, 16))
    actions = run(full)
    assert REPLACE not in kinds(actions) and by_kind(actions, ALERT)[0].data["key"] == "breaker"
    old = replace(s, events=_replaced(NOW - 3700, 16))  # outside the window
    assert REPLACE in kinds(run(old))
    raised = replace(full, alerts={"breaker": NOW - 60})
    assert ALERT not in kinds(run(raised))  # one alert, not one a loop


def _not_responding(s, *names):
    for name in names:
        s = with_slurm(s, name, {"IDLE", "NOT_RESPONDING"})
    return s


SLURMD = "health:slurmd not responding"


def test_a_systemic_burst_alerts_once_and_touches_no_node():
    big = replace(GPU, count=16)
    s = _not_responding(cluster(big), *(f"gpu-{i:03d}" for i in range(5)))
    actions = run(s, (big,))
    assert kinds(actions) == [ALERT, PUBLISH]
    assert by_kind(actions, ALERT)[0].why.failure == "systemic"
    four = _not_responding(cluster(big), *(f"gpu-{i:03d}" for i in range(4)))
    assert kinds(run(four, (big,))).count(REPLACE) == 4
    # the window counts recent replacements of the same signature too, on distinct nodes
    recent = replace(four, events=(Event(NOW - 60, REPLACE, "gpu-007", "health", SLURMD),))
    assert REPLACE not in kinds(run(recent, (big,)))
    same_node = replace(four, events=(Event(NOW - 60, REPLACE, "gpu-000", "health", SLURMD),))
    assert kinds(run(same_node, (big,))).count(REPLACE) == 4


def test_failures_of_the_instance_itself_are_never_one_systemic_burst():
    """Five EC2 status checks failing in a cluster of 16 are five broken machines (issue 37, fault 1): each is
    replaced; the circuit breaker, not the systemic guard, bounds them."""
    big = replace(GPU, count=16)
    s = cluster(big)
    for i in range(5):
        s = with_instance(s, f"gpu-{i:03d}", status_ok=False)
    actions = run(s, (big,))
    assert kinds(actions).count(REPLACE) == 5 and ALERT not in kinds(actions)
    recent = replace(
        s,
        events=tuple(
            Event(NOW - 60, REPLACE, f"gpu-01{i}", "instance", "instance:EC2 status check failed") for i in range(5)
        ),
    )
    assert kinds(run(recent, (big,))).count(REPLACE) == 5


def test_in_a_small_cluster_half_its_nodes_failing_the_same_way_is_systemic():
    two = _not_responding(cluster(), "gpu-000", N1)
    assert kinds(run(two)) == [ALERT, PUBLISH]
    one = with_report(
        with_slot(cluster(), N1, state=m.BOOTING, since=NOW - 60, attempts=2), N1, False, "bootstrap", "step efa failed"
    )
    again = replace(
        one, events=tuple(Event(NOW - 120 * k, REPLACE, N1, "bootstrap", "bootstrap:step efa failed") for k in (1, 2))
    )
    assert kinds(run(again), N1) == [DOWN, REPLACE]  # one slot failing again is that slot's, not systemic


def test_a_persons_drain_is_never_undone():
    s = with_instance(cluster(), N1, status_ok=False)
    held = with_slurm(s, N1, {"IDLE", "DRAIN"}, "alice: checking the GPU")
    assert kinds(run(held), N1) == []
    down = with_slurm(cluster(), N1, {"DOWN"}, "maintenance")
    assert kinds(run(down), N1) == []
    ours = with_slurm(cluster(), N1, {"IDLE", "DRAIN"}, "hpcc: instance: EC2 status check failed")
    assert kinds(run(ours), N1) == [RESUME]
    slurm_drained = with_slurm(cluster(), N1, {"IDLE", "DRAIN"}, "Kill task failed")  # Slurm's, not ours to undo
    assert kinds(run(slurm_drained), N1) == []
    slurms = with_slurm(s, N1, {"DOWN", "NOT_RESPONDING"}, "Not responding")  # Slurm's own reason, not a person's
    assert REPLACE in kinds(run(slurms), N1)


def test_a_node_slurm_keeps_down_after_an_unexpected_reboot_is_resumed_once_its_agent_reports_healthy():
    """ReturnToService=1: Slurm keeps it DOWN (with 2 it came back by itself, and so did a node hpcc set DOWN)."""
    rebooted = with_slurm(cluster(), N1, {"DOWN"}, "Node unexpectedly rebooted [slurm@2026-11-25T01:02:03]")
    assert kinds(run(rebooted), N1) == [RESUME]
    failing = with_report(rebooted, N1, False, "health", "xid: Xid 79")
    assert RESUME not in kinds(run(failing), N1)
    persons = with_slurm(cluster(), N1, {"DOWN"}, "alice: rebooted it by hand, checking")
    assert kinds(run(persons), N1) == []


def test_hpcc_replace_is_done_without_spending_budget():
    s = with_slot(cluster(), N1, replace_requested=True)
    actions = run(s)
    assert kinds(actions, N1) == [DOWN, REPLACE] and by_kind(actions, REPLACE)[0].data["counted"] is False


def test_hpcc_replace_requests_count_against_a_budget_of_their_own():
    """Issue 33, finding 9: one ledger write can flag every slot; requests spend at most the breaker's size in its
    window (16 an hour here), the rest wait with their flag set, said once."""
    from hpcc_node.controller.decide_failures import REQUESTED

    s = cluster()
    for name in ("gpu-000", N1, "gpu-002"):
        s = with_slot(s, name, replace_requested=True)
    spent = tuple(m.Event(NOW - 600, REPLACE, f"gpu-9{k:02d}", "", REQUESTED) for k in range(15))
    actions = run(replace(s, events=spent))
    assert [a.node for a in by_kind(actions, REPLACE)] == ["gpu-000"]
    assert [a.node for a in by_kind(actions, DOWN)] == ["gpu-000"]
    [said] = by_kind(actions, m.ALERT)
    assert said.data["key"] == "replace-budget" and "gpu-001, gpu-002 wait" in said.why.evidence
    later = run(replace(s, events=tuple(replace(e, at=NOW - 3601) for e in spent)))
    assert [a.node for a in by_kind(later, REPLACE)] == ["gpu-000", N1, "gpu-002"]


def test_a_requested_replacement_is_recorded_as_one_for_the_budget():
    from hpcc_node.controller.act import Executor
    from hpcc_node.controller.decide_failures import REQUESTED

    recorded = []
    ex = Executor.__new__(Executor)
    ex.seq, ex.clock = 0, lambda: NOW
    ex.ledger = type("L", (), {"event": lambda self, e, seq: recorded.append(e)})()
    [_, rep] = run(with_slot(cluster(), N1, replace_requested=True))[:2]
    ex._record(rep, "start")
    assert (recorded[0].kind, recorded[0].signature, recorded[0].failure) == (REPLACE, REQUESTED, "")


def _block(start: float, end: float):
    return replace(GPU, market="capacity-block", capacity_block=CapacityBlock("cr-1", start, end))


def test_before_a_capacity_block_starts_nothing_is_launched_and_nodes_wait():
    g = _block(NOW + 3600, NOW + 86400)
    actions = run(m.Snapshot(now=NOW), (g,))
    assert LAUNCH not in kinds(actions)
    assert by_kind(actions, WAIT_CAPACITY_BLOCK)[0].data["status"] == "waiting for capacity block cr-1"
    waiting = m.Snapshot(now=NOW, group_states={"gpu": GroupState("gpu", status="waiting for capacity block cr-1")})
    assert WAIT_CAPACITY_BLOCK not in kinds(run(waiting, (g,)))
    started = run(waiting, (g,), now=NOW + 3601)
    assert [a.data["count"] for a in by_kind(started, LAUNCH)] == [4]


def test_at_a_capacity_blocks_end_nodes_drain_and_terminations_are_not_failures():
    ending = _block(NOW - 86400, NOW + 39 * 60)
    actions = run(cluster(), (ending,))
    assert kinds(actions).count(DRAIN) == 4 and REPLACE not in kinds(actions)
    assert all(a.data["reason"].startswith("hpcc:") for a in by_kind(actions, DRAIN))
    over = _block(NOW - 86400, NOW + 29 * 60)
    gone = with_instance(with_instance(cluster(), N1, state="terminated"), "gpu-002", state="shutting-down")
    actions = run(gone, (over,))
    assert sorted(a.node for a in by_kind(actions, MARK)) == [N1, "gpu-002"]
    assert {a.data["state"] for a in by_kind(actions, MARK)} == {m.ENDED}
    assert not set(kinds(actions)) & {REPLACE, DOWN, LAUNCH, ALERT}


def test_a_later_capacity_block_takes_the_ended_names_again():
    s = cluster()
    for name in list(s.slots):
        s = with_slot(with_instance(s, name, state="terminated"), name, state=m.ENDED)
    later = _block(NOW - 60, NOW + 86400)
    assert [a.data["count"] for a in by_kind(run(s, (later,)), LAUNCH)] == [4]
    fresh = [Instance(f"i-n{k}", "pending", NOW - 30 + k, "gpu", ip(10 + k)) for k in range(4)]
    names = [a.node for a in by_kind(run(with_launched(s, *fresh), (later,)), NAME)]
    assert names == ["gpu-000", "gpu-001", "gpu-002", "gpu-003"]


def test_a_replacement_inside_a_full_block_waits_without_budget():
    g = _block(NOW - 3600, NOW + 86400)
    s = with_slot(cluster(), N1, state=m.REPLACING, instance_id="i-gone", since=NOW - 600, attempts=1)
    full = replace(s, group_states={"gpu": GroupState("gpu", launch_failures=1, backoff_until=NOW + 60)})
    actions = run(full, (g,))
    assert not set(kinds(actions)) & {LAUNCH, REPLACE, MARK}


def test_orphans_are_terminated_after_the_timeout_and_not_before():
    young = Instance("i-orphan", "running", NOW - 200, "gpu", "10.9.9.9")
    old = replace(young, launch_time=NOW - 301)
    assert TERMINATE_ORPHAN not in kinds(run(with_launched(cluster(), young)))
    actions = run(with_launched(cluster(), old))
    assert [a.instance_id for a in by_kind(actions, TERMINATE_ORPHAN)] == ["i-orphan"]
    gone = replace(old, state="terminated")
    assert TERMINATE_ORPHAN not in kinds(run(with_launched(cluster(), gone)))


def test_an_instance_with_the_clusters_tags_that_no_launch_made_is_neither_named_nor_terminated():
    """Issue 33, finding 9: whoever can tag an instance hpcc:cluster=<c> must not get it terminated by the
    controller (a confused deputy) nor named into the cluster: only its own ledger's launches are its."""
    stranger = Instance("i-stranger", "running", NOW - 3600, "gpu", "10.9.9.9")
    s = with_slot(cluster(), N1, state=m.REPLACING, since=NOW - 10)
    s = with_instance(replace(s, instances={**s.instances, "i-stranger": stranger}), N1, state="shutting-down")
    actions = run(s)
    assert not [a for a in actions if a.instance_id == "i-stranger" and a.kind != m.ALERT]
    [said] = [a for a in by_kind(actions, m.ALERT) if "i-stranger" in a.why.evidence]
    assert said.data["key"] == "foreign:i-stranger" and "neither named nor terminated" in said.why.evidence
    assert [a.data["count"] for a in by_kind(actions, LAUNCH)] == [1]  # the name waits for a launch of its own
    assert not [a for a in run(replace(s, alerts={"foreign:i-stranger": NOW - 60})) if a.kind == m.ALERT]


def test_a_name_moves_only_once_its_predecessor_is_shutting_down():
    s = with_slot(cluster(), N1, state=m.REPLACING, since=NOW - 10)
    new = Instance("i-new", "running", NOW - 5, "gpu", "10.7.7.7")
    s = with_launched(s, new)
    actions = run(s)
    assert kinds(actions, N1) == [REPLACE] and NAME not in kinds(actions)  # the predecessor still runs
    shutting = with_instance(s, N1, state="shutting-down")
    actions = run(shutting)
    assert [(a.node, a.instance_id) for a in by_kind(actions, NAME)] == [(N1, "i-new")]
    assert LAUNCH not in kinds(actions)


def test_names_are_never_compacted_a_removed_node_leaves_a_hole():
    s = cluster(n=4)
    gone = s.slots["gpu-002"].instance_id
    s = replace(
        s,
        slots={k: v for k, v in s.slots.items() if k != "gpu-002"},
        instances={k: v for k, v in s.instances.items() if k != gone},
    )
    three = replace(GPU, count=3)
    assert kinds(run(s, (three,))) == [PUBLISH]  # 000, 001, 003: nothing renamed, nothing launched
    body = by_kind(run(s, (three,)), PUBLISH)[0].data["body"]
    assert [n["name"] for n in body["nodes"]] == ["gpu-000", "gpu-001", "gpu-003"]


def test_a_grown_group_launches_the_difference_and_names_new_nodes_in_holes_first():
    s = cluster(n=4)
    gone = s.slots["gpu-001"].instance_id
    s = replace(
        s,
        slots={k: v for k, v in s.slots.items() if k != "gpu-001"},
        instances={k: v for k, v in s.instances.items() if k != gone},
    )
    five = replace(GPU, count=5, max_count=8)
    assert [a.data["count"] for a in by_kind(run(s, (five,)), LAUNCH)] == [2]
    fresh = [Instance(f"i-n{k}", "pending", NOW - 30 + k, "gpu", ip(10 + k)) for k in range(2)]
    actions = run(with_launched(s, *fresh), (five,))
    assert [(a.node, a.instance_id) for a in by_kind(actions, NAME)] == [("gpu-001", "i-n0"), ("gpu-004", "i-n1")]
    assert LAUNCH not in kinds(actions)


def test_a_shrunk_group_drains_then_removes_the_nodes_it_chose():
    s = with_report(cluster(), "gpu-000", False, "hook", "hook x failed")
    s = with_slot(s, "gpu-000", state=m.FAILED)
    two = replace(GPU, count=2)
    actions = run(s, (two,))
    assert [(a.kind, a.node) for a in actions if a.kind in (DRAIN, REMOVE)] == [(REMOVE, "gpu-000"), (DRAIN, "gpu-003")]
    draining = with_slurm(
        with_slot(s, "gpu-003", state=m.DRAINING, reason="shrink: x"), "gpu-003", {"IDLE", "DRAIN"}, "hpcc: shrink"
    )
    removing = with_slot(draining, "gpu-000", state=m.REMOVING)
    actions = run(removing, (two,))
    assert [(a.kind, a.node) for a in actions if a.kind in (DRAIN, REMOVE)] == [
        (REMOVE, "gpu-003"),
        (REMOVE, "gpu-000"),
    ]
    forgotten = with_instance(removing, "gpu-000", state="terminated")
    assert (FORGET, "gpu-000") in [(a.kind, a.node) for a in run(forgotten, (two,))]


def test_a_group_removed_from_the_config_is_removed_then_forgotten():
    cpu = replace(GPU, name="cpu", count=2)
    s = merge([GPU, cpu])
    actions = run(s, (GPU,))
    assert [(a.kind, a.node) for a in actions if a.group == "cpu"] == [(REMOVE, "cpu-000"), (REMOVE, "cpu-001")]
    s = with_slot(with_slot(s, "cpu-000", state=m.REMOVING), "cpu-001", state=m.REMOVING)
    s = with_instance(s, "cpu-000", state="terminated")
    assert [(a.kind, a.node) for a in run(s, (GPU,)) if a.group == "cpu"] == [(FORGET, "cpu-000"), (REMOVE, "cpu-001")]


def test_launch_tokens_are_unique_per_cluster_and_fit_ec2s_limit():
    from hpcc_contract.names import fleet_client_token as client_token

    a, b = client_token("team-a", "gpu", NOW, 0), client_token("team-b", "gpu", NOW, 0)
    assert a != b and a == client_token("team-a", "gpu", NOW, 0) and a != client_token("team-a", "gpu", NOW, 1)
    assert len(client_token("c" * 60, "g" * 40, NOW, 99)) <= 64
    tokens = {a.data["token"] for a in by_kind(run(replace(m.Snapshot(now=NOW), cluster="team-a")), LAUNCH)}
    assert tokens == {a}


def test_large_groups_launch_in_batches_within_ec2s_launch_rate():
    big = replace(GPU, count=4096)
    sizes = [a.data["count"] for a in by_kind(run(m.Snapshot(now=NOW), (big,)), LAUNCH)]
    assert sizes == [500, 500]
    tokens = {a.data["token"] for a in by_kind(run(m.Snapshot(now=NOW), (big,)), LAUNCH)}
    assert len(tokens) == 2


def test_all_groups_together_launch_no_more_than_ec2s_launch_bucket_holds():
    """EC2's RunInstances bucket: 1,000 instances, 2 a second back. Two 4,096-node groups ask 500 + 500 in the
    first loop (not 2,000); a minute after a full bucket was drawn, 120 more; after 500 s it is full again."""
    from hpcc_node.controller.fleet import launch_tokens

    a, b = replace(GPU, count=4096), replace(GPU, name="cpu", count=4096)
    first = by_kind(run(m.Snapshot(now=NOW), (a, b)), LAUNCH)
    assert sum(x.data["count"] for x in first) == 1000 and {x.group for x in first} == {"gpu"}
    drawn = tuple(LaunchRecord(f"t{i}", "gpu", 500, NOW - 60, tuple(f"i-{i}-{k}" for k in range(500))) for i in (0, 1))
    later = by_kind(run(replace(m.Snapshot(now=NOW), launches=drawn), (a, b)), LAUNCH)
    assert sum(x.data["count"] for x in later) == 120
    assert launch_tokens(drawn, NOW + 440, 1000, 2.0) == 1000  # full again, never more
    assert launch_tokens(drawn[:1] + (LaunchRecord("t2", "gpu", 500, NOW - 60, ("i-x",)),), NOW - 60, 1000, 2.0) == 499


def test_a_launch_whose_result_was_lost_is_retried_with_the_same_token():
    s = replace(m.Snapshot(now=NOW), launches=(LaunchRecord("gpu-123-0", "gpu", 4, NOW - 30),))
    assert [(a.data["token"], a.data["count"], a.data["min"]) for a in by_kind(run(s), LAUNCH)] == [("gpu-123-0", 4, 4)]
    assert m.ADOPT not in kinds(run(s))
    # the tag counts only on the launch's own group's instances, created after the launch was recorded
    other = Instance("i-other", "running", NOW - 20, "cpu", launch_tag="gpu-123-0")
    older = Instance("i-older", "running", NOW - 3600, "gpu", launch_tag="gpu-123-0")
    s2 = replace(s, instances={"i-other": other, "i-older": older})
    assert [a.data["token"] for a in by_kind(run(s2), LAUNCH)] == ["gpu-123-0"] and m.ADOPT not in kinds(run(s2))
    assert not by_kind(run(s2), NAME)
    # a best-effort launch is retried best-effort: EC2 answers a ClientToken only for the same request
    s = replace(s, launches=(LaunchRecord("gpu-123-0", "gpu", 4, NOW - 30, minimum=1),))
    assert [a.data["min"] for a in by_kind(run(s), LAUNCH)] == [1]


def test_a_booting_node_becomes_ready_only_with_its_own_report_and_slurmd_registered():
    s = with_slot(cluster(), N1, state=m.BOOTING, since=NOW - 60)
    assert kinds(run(s), N1) == [MARK]
    stale = replace(s, reports={**s.reports, N1: replace(s.reports[N1], instance_id="i-predecessor")})
    assert kinds(run(stale), N1) == []
    moved = with_instance(s, N1, private_ip="10.8.8.8")
    assert kinds(run(moved), N1) == [SET_ADDR] and by_kind(run(moved), SET_ADDR)[0].data["addr"] == "10.8.8.8"
    no_slurm = with_slot(cluster(slurm=False), N1, state=m.BOOTING, since=NOW - 60)
    assert kinds(run(no_slurm), N1) == [MARK]


def test_two_groups_are_decided_apart():
    cpu = replace(GPU, name="cpu", instance_type="c7i.48xlarge", count=2)
    s = with_instance(merge([GPU, cpu]), "cpu-001", status_ok=False)
    actions = run(s, (GPU, cpu))
    assert [(a.kind, a.node) for a in actions if a.kind == REPLACE] == [(REPLACE, "cpu-001")]
    body = by_kind(actions, PUBLISH)[0].data["body"]
    assert body["groups"] == {"gpu": 4, "cpu": 2} and len(body["nodes"]) == 5


def test_tags_follow_the_ledger_never_lead_it():
    drifted = with_instance(cluster(), N1, name_tag="gpu-009")
    actions = run(drifted)
    assert [(a.kind, a.node) for a in actions if a.kind != PUBLISH] == [(m.TAG, N1)]
    body = by_kind(actions, PUBLISH)[0].data["body"]
    assert "gpu-009" not in [n["name"] for n in body["nodes"]]


def test_slot_defaults_are_what_a_new_name_needs():
    assert Slot("gpu-000", "gpu", 0).state == m.BOOTING


def test_a_node_drained_for_a_soft_failure_that_cleared_goes_back_to_service():
    """Drained for no heartbeat (an agent's long tick); its agent reports again before the drain ends in a
    replacement: the slot is ready again and Slurm resumes it. A shrink's drain and a person's stay."""
    drained = with_slurm(
        with_slot(cluster(), N1, state=m.DRAINING, reason="health: no heartbeat: ..."),
        N1,
        {"IDLE", "DRAIN"},
        "hpcc: health: no heartbeat: ...",
    )
    actions = run(drained)
    assert kinds(actions, N1) == [MARK, RESUME] and by_kind(actions, MARK)[0].data["state"] == m.READY
    assert "cleared while it drained" in by_kind(actions, MARK)[0].why.evidence
    still = with_instance(drained, N1, events=("instance-retirement",))  # the failure is still there
    assert kinds(run(still), N1) == [DOWN, REPLACE]
    shrinking = with_slot(drained, N1, state=m.DRAINING, reason="shrink: the group's count went down")
    assert kinds(run(shrinking), N1) == []
    person = with_slurm(drained, N1, {"IDLE", "DRAIN"}, "alice: looking at it")
    assert kinds(run(person), N1) == []


def _killed_mid_launch(count: int, found: int, minimum: int = 0, at: float = NOW - 30):
    """gpu-001 vacant (its instance gone), and a launch recorded without its answer, `found` of whose `count`
    instances EC2 lists with the launch's tag."""
    s = with_instance(with_slot(cluster(), N1, state=m.REPLACING, since=NOW - 60), N1, state="shutting-down")
    made = {
        f"i-new{k}": Instance(f"i-new{k}", "pending", at + 1, "gpu", f"10.7.7.{k}", launch_tag="t-killed")
        for k in range(found)
    }
    rec = LaunchRecord("t-killed", "gpu", count, at, None, minimum)
    return replace(s, instances={**s.instances, **made}, launches=(rec,))


def test_a_launch_whose_instances_carry_its_tag_is_recorded_from_them_not_launched_again():
    """Issue 37, fault 2: a controller killed between CreateFleet and recording its answer. The restart finds
    the launch's instances by their hpcc:launch tag, records them and names them; no second CreateFleet, whether
    or not EC2 would have honoured the ClientToken."""
    actions = run(_killed_mid_launch(1, 1))
    assert LAUNCH not in kinds(actions)
    [adopt] = by_kind(actions, m.ADOPT)
    assert adopt.data == {"token": "t-killed", "count": 1, "at": NOW - 30, "ids": ["i-new0"]}
    assert [(a.node, a.instance_id) for a in by_kind(actions, NAME)] == [(N1, "i-new0")]
    assert kinds(actions).index(m.ADOPT) < kinds(actions).index(NAME)  # recorded before it is named
    assert not by_kind(actions, m.ALERT)


def test_a_launch_with_none_of_its_instances_listed_is_retried_with_its_token():
    actions = run(_killed_mid_launch(1, 0, minimum=1))
    assert [(a.data["token"], a.data["count"], a.data["min"]) for a in by_kind(actions, LAUNCH)] == [("t-killed", 1, 1)]
    assert m.ADOPT not in kinds(actions) and not by_kind(actions, NAME)


def test_a_launch_with_some_of_its_instances_listed_waits_for_the_rest_then_keeps_what_it_found():
    """Describe is eventually consistent: two of a launch's three listed is not yet its answer. They are named
    meanwhile; nothing is launched for the third; past the describe lag (a best-effort launch may have given
    fewer) the two are its answer, and the third name gets a launch of its own."""
    s = _killed_mid_launch(3, 2, minimum=1)
    s = replace(s, slots={k: v for k, v in s.slots.items() if k not in ("gpu-002", "gpu-003")})  # three names
    actions = run(s)
    assert not set(kinds(actions)) & {LAUNCH, m.ADOPT}
    assert sorted(a.instance_id for a in by_kind(actions, NAME)) == ["i-new0", "i-new1"]
    later = run(s, now=NOW + 300)
    assert [a.data["ids"] for a in by_kind(later, m.ADOPT)] == [["i-new0", "i-new1"]]
    assert [(a.data["count"], a.data["min"]) for a in by_kind(later, LAUNCH)] == [(1, 1)]


def test_a_failed_nodes_successor_is_launched_best_effort_in_the_loop_that_replaces_it():
    """Issue 38: the loop that terminates a node launches its successor (named once the old instance is going),
    best-effort as every replacement; a restart killed in that launch finds it by its tag (the tests above)."""
    actions = run(with_instance(cluster(), N1, status_ok=False))
    assert kinds(actions, N1)[-1] == REPLACE
    [launch] = by_kind(actions, LAUNCH)
    assert (launch.data["count"], launch.data["min"]) == (1, 1) and not by_kind(actions, NAME)
    assert kinds(actions).index(REPLACE) < kinds(actions).index(LAUNCH)  # terminated first
    # the next loop, its successor listed and unnamed while the old instance still shuts down: nothing launched
    new = Instance("i-new", "pending", NOW, "gpu", "10.7.7.7")
    going = with_launched(with_slot(cluster(), N1, state=m.REPLACING, since=NOW - 5), new)
    assert not by_kind(run(with_instance(going, N1, status_ok=False)), LAUNCH)
    named = run(with_instance(going, N1, state="shutting-down"))
    assert [(a.node, a.instance_id) for a in by_kind(named, NAME)] == [(N1, "i-new")] and LAUNCH not in kinds(named)
