"""The systemic guard bounded (issue 37, fault 1 and fault 3): a burst is held, then one node goes as a canary, then
the rest in batches once the canary is back; a machine neither Slurm nor S3 hears from is its own failure, replaced
and never listed as a ready member; the hard signal wins over the soft one."""

from __future__ import annotations

from dataclasses import replace

from hpcc_node import hosts
from hpcc_node.controller import model as m
from hpcc_node.controller.model import ALERT, DOWN, DRAIN, PUBLISH, REPLACE, Event, Group
from hpcc_node.controller.timers import DEFAULT
from tests.node.controller_cases import GPU, NOW, by_kind, cluster, kinds, merge, run, with_slot, with_slurm
from tests.node.test_controller_health import XID79, with_verdict

HOLD = DEFAULT.systemic_hold_seconds
BEAT = DEFAULT.heartbeat_timeout_seconds
SLURMD = "health:slurmd not responding"
KEY = f"systemic:{SLURMD}"
A = Group("a", "c6i.xlarge", 3, launch_template="lt-a", subnet_id="subnet-1")
B = Group("b", "c6i.xlarge", 1, launch_template="lt-b", subnet_id="subnet-1")


def _dead(s, *names, silent_for=0.0):
    """Slurm hears nothing from these nodes; `silent_for`: their status unwritten for that long."""
    for name in names:
        s = with_slurm(s, name, {"IDLE", "NOT_RESPONDING"})
        if silent_for:
            s = replace(s, reports={**s.reports, name: replace(s.reports[name], heard=NOW - silent_for)})
    return s


def _held(s, since):
    """The burst's alert raised at `since` (the ledger keeps when)."""
    return replace(s, alerts={**s.alerts, KEY: since})


def _acted(s, name, at, sig=SLURMD):
    return replace(s, events=s.events + (Event(at, REPLACE, name, "health", sig),))


def _published(actions):
    return {n["name"]: n for n in by_kind(actions, PUBLISH)[0].data["body"]["nodes"]}


def test_two_dead_machines_in_a_cluster_of_four_are_replaced_not_held_as_one_systemic_fault():
    """The box's fault 1: a group of 3 and a group of 1, two namespaces killed together. Once their statuses are
    unwritten past the heartbeat timeout as well, and the other two still answer, each is its machine's failure."""
    s = _dead(merge((A, B)), "a-000", "a-001", silent_for=BEAT + 5)
    actions = run(s, (A, B))
    assert kinds(actions, "a-000") == [DOWN, REPLACE] and kinds(actions, "a-001") == [DOWN, REPLACE]
    assert not [a for a in by_kind(actions, ALERT) if a.why.failure == "systemic"]
    assert "unreachable" in by_kind(actions, REPLACE)[0].why.evidence
    # their heartbeat still fresh: one shared cause is possible (slurmd's config, the head's network): held
    fresh = run(_dead(merge((A, B)), "a-000", "a-001"), (A, B))
    assert kinds(fresh) == [ALERT, PUBLISH] and by_kind(fresh, ALERT)[0].data["key"] == KEY


def test_a_node_neither_slurm_nor_s3_hears_from_is_never_published_as_a_ready_member():
    """Every node unreachable (the head's own network, say): the guard holds them all, yet the membership marks each
    out, so no hostfile lists a dead node as a ready member."""
    s = _dead(merge((A, B)), "a-000", "a-001", "a-002", "b-000", silent_for=BEAT + 5)
    actions = run(s, (A, B))
    assert REPLACE not in kinds(actions) and by_kind(actions, ALERT)[0].data["key"] == KEY
    nodes = _published(actions)
    assert all(nodes[n]["out"].startswith("unreachable") for n in ("a-000", "a-001", "a-002", "b-000"))
    body = by_kind(actions, PUBLISH)[0].data["body"]
    assert hosts.listed(body) == []  # what the hostfiles are written from
    # a node only Slurm does not hear from (its agent writes on) stays listed
    assert "out" not in _published(run(_dead(merge((A, B)), "a-000", "a-001"), (A, B)))["a-000"]


def test_the_hard_signal_wins_over_the_soft_one_after_a_long_outage():
    """Fault 3: both "no heartbeat" (soft: drain first) and slurmd not responding (hard) are true after a long
    controller outage; the node goes DOWN and is replaced in the first loop, not drained for a loop first."""
    s = _dead(cluster(), "gpu-001", silent_for=BEAT * 3)
    actions = run(s)
    assert kinds(actions, "gpu-001") == [DOWN, REPLACE] and DRAIN not in kinds(actions)
    draining = with_slot(s, "gpu-001", state=m.DRAINING, reason="health: no heartbeat: ...")
    assert kinds(run(draining), "gpu-001") == [DOWN, REPLACE]
    # only silent (slurmd answers): still the soft path
    assert kinds(run(replace(cluster(), reports={**s.reports})), "gpu-001") == [DRAIN]


def test_a_held_burst_sends_one_canary_after_the_hold_and_nothing_before():
    s = _dead(cluster(), "gpu-000", "gpu-001")
    assert REPLACE not in kinds(run(_held(s, NOW - HOLD + 30)))
    actions = run(_held(s, NOW - HOLD - 1))
    assert kinds(actions).count(REPLACE) == 1 and kinds(actions, "gpu-000") == [DOWN, REPLACE]
    canary = [a for a in by_kind(actions, ALERT) if ":canary:" in a.data["key"]]
    assert len(canary) == 1 and "gpu-000 is acted on as a canary" in canary[0].why.evidence


def test_while_the_canary_is_on_its_way_the_rest_wait_and_once_it_is_back_they_follow_in_batches():
    big = replace(GPU, count=16)
    dead = [f"gpu-{i:03d}" for i in range(1, 13)]  # 12 of 16, held; gpu-000 was the canary
    s = _acted(_held(_dead(cluster(big), *dead), NOW - HOLD - 300), "gpu-000", NOW - 200)
    on_its_way = with_slot(s, "gpu-000", state=m.BOOTING, since=NOW - 100)
    assert REPLACE not in kinds(run(on_its_way, (big,)))
    back = with_slot(s, "gpu-000", state=m.READY, since=NOW - 10)
    actions = run(back, (big,))
    assert kinds(actions).count(REPLACE) == DEFAULT.systemic_batch_size
    assert [a.data["key"] for a in by_kind(actions, ALERT)] == [f"{KEY}:go"]
    # a batch in flight counts against the next
    flying = _dead(cluster(big), *dead[3:])
    flying = _acted(_held(flying, NOW - HOLD - 300), "gpu-000", NOW - 200)
    flying = with_slot(flying, "gpu-000", state=m.READY, since=NOW - 10)
    for name in dead[:3]:
        flying = with_slot(_acted(flying, name, NOW - 50), name, state=m.BOOTING, since=NOW - 40)
    assert kinds(run(flying, (big,))).count(REPLACE) == DEFAULT.systemic_batch_size - 3


def test_a_canary_that_fails_again_holds_the_rest_for_another_hold():
    s = _acted(_held(_dead(cluster(), "gpu-000", "gpu-001"), NOW - HOLD - 400), "gpu-000", NOW - 300)
    again = with_slot(s, "gpu-000", state=m.READY, since=NOW - 200)  # its replacement came up, then failed the same way
    assert REPLACE not in kinds(run(again))
    later = run(again, now=NOW + HOLD)
    assert kinds(later).count(REPLACE) == 1  # the next canary, a hold after the last


def test_a_systemic_health_burst_is_bounded_the_same_way():
    """Xid 79 on every node: held, then one node taken out as a canary; the rest stay in service."""
    s = cluster()
    for name in s.slots:
        s = with_verdict(s, name, XID79)
    first = run(s)
    key = by_kind(first, ALERT)[0].data["key"]
    assert [a for a in first if a.node] == []
    after = run(replace(s, alerts={key: NOW - HOLD - 1}))
    touched = {a.node for a in after if a.node and a.kind != PUBLISH}
    assert touched == {"gpu-000"} and DOWN in kinds(after, "gpu-000")
