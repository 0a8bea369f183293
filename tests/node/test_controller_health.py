"""decide()'s health rules (hpcc_node/controller/health/decide.py) with plain values: a table of verdicts and Slurm
states -> actions, then requeue, the reboot-once-per-instance remedy, systemic bursts, boot failures and spares."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hpcc_node import hosts
from hpcc_node.controller import model as m
from hpcc_node.controller.health.decide import health_signature
from hpcc_node.controller.health.spares import spare_reservation
from hpcc_node.controller.model import (
    ALERT,
    DOWN,
    DRAIN,
    MARK,
    PROTECT,
    REBOOT,
    REPLACE,
    REQUEUE,
    RESUME,
    SPARES,
    Event,
    Group,
    GroupState,
    Report,
    SlurmJob,
)
from tests.node.controller_cases import NOW, by_kind, cluster, kinds, run, with_slot, with_slurm

N1 = "gpu-001"
XID79 = (
    "xid",
    "Xid 79 on PCI:0000:53:00: GPU has fallen off the bus (catalog RESTART_BM): GPU has fallen off the bus.",
    "down",
    "reboot",
)
ROWS = (
    "gpu_memory",
    "GPU 3 (00000000:53:00.0): row remapping pending (a GPU reset applies the remapping)",
    "drain",
    "reset",
)
SUPPORT = ("xid", "Xid 119 on PCI:0000:53:00: GSP RPC timeout (catalog CONTACT_SUPPORT): ...", "down", "replace")
DISK = ("disk_free", "/ has 3.1 GiB free, under 20 GiB", "drain", "none")
OUT = "hpcc: xid: Xid 79 on PCI:0000:53:00: GPU has fallen off the bus"


def with_verdict(snap, name, fault, at=NOW - 30, ok=False):  # past the settle time
    check, evidence, action, remedy = fault
    rep = Report(
        name,
        snap.slots[name].instance_id,
        ok,
        "" if ok else "health",
        evidence,
        at,
        check,
        "none" if ok else action,
        "none" if ok else remedy,
    )
    return replace(snap, reports={**snap.reports, name: rep})


def rebooted(snap, name, at):
    iid = snap.slots[name].instance_id
    return replace(snap, events=snap.events + (Event(at, REBOOT, name, "health", f"reboot:{iid}"),))


def on_node(actions, node=N1):
    return [a for a in actions if a.node == node]


# (case, fault, Slurm states of the node and its reason (None: as it is, idle), the actions on the node)
TABLE = [
    ("fatal Xid while a job runs: DOWN, Slurm requeues it", XID79, ({"MIXED"}, ""), [DOWN]),
    ("fatal Xid, node down and idle: the catalog's reboot", XID79, ({"DOWN"}, OUT), [REBOOT]),
    ("pending row remapping while a job runs: drain, the job finishes", ROWS, ({"MIXED"}, ""), [DRAIN]),
    (
        "pending row remapping, still running on the draining node: wait",
        ROWS,
        ({"MIXED", "DRAIN"}, "hpcc: gpu_memory: ..."),
        [],
    ),
    ("pending row remapping, drained: reset by a reboot", ROWS, ({"IDLE", "DRAIN"}, "hpcc: gpu_memory: ..."), [REBOOT]),
    ("contact support: DOWN", SUPPORT, ({"ALLOCATED"}, ""), [DOWN]),
    ("contact support, down: replaced", SUPPORT, ({"DOWN"}, "hpcc: xid: ..."), [REPLACE]),
    ("a full disk: drained", DISK, ({"IDLE"}, ""), [DRAIN]),
    ("a full disk, drained: left until its verdict clears", DISK, ({"IDLE", "DRAIN"}, "hpcc: disk_free: ..."), []),
]


@pytest.mark.parametrize("case,fault,slurm,expected", TABLE, ids=[t[0] for t in TABLE])
def test_each_verdict_gets_its_action(case, fault, slurm, expected):
    snap = with_slurm(with_verdict(cluster(), N1, fault), N1, *slurm)
    actions = run(snap)
    assert kinds(on_node(actions)) == expected
    for a in on_node(actions):
        if a.kind in (DOWN, DRAIN):
            assert a.data["reason"].startswith(f"hpcc: {fault[0]}: ") and len(a.data["reason"]) <= 200
    assert [a for a in actions if a.node not in (N1, "") and a.kind != m.PUBLISH] == []


def test_the_down_reason_names_the_check_and_the_xid():
    down = by_kind(run(with_slurm(with_verdict(cluster(), N1, XID79), N1, {"ALLOCATED"})), DOWN)[0]
    assert down.data["reason"].startswith("hpcc: xid: Xid 79 on PCI:0000:53:00: GPU has fallen off the bus")


def test_a_warning_or_an_unknown_verdict_touches_nothing():
    snap = with_verdict(cluster(), N1, ("xid", "Xid 13 ...", "none", "none"), ok=True)
    assert on_node(run(snap)) == []


def test_a_rebooted_node_waits_for_its_next_verdict_then_resumes_or_is_replaced():
    down = with_slurm(with_verdict(cluster(), N1, XID79, at=NOW - 120), N1, {"DOWN"}, OUT)
    waiting = rebooted(down, N1, NOW - 100)
    assert kinds(on_node(run(waiting))) == []  # the stale verdict predates the reboot
    again = with_verdict(waiting, N1, XID79, at=NOW - 25)
    assert kinds(on_node(run(again))) == [REPLACE]  # the same instance failed again: per instance, not per name
    silent = rebooted(with_verdict(down, N1, XID79, at=NOW - 1400), N1, NOW - 1300)
    replaced = by_kind(run(silent), REPLACE)
    assert [a.node for a in replaced] == [N1] and "no verdict within 1200 s" in replaced[0].why.evidence
    healthy = replace(
        waiting, reports={**waiting.reports, N1: Report(N1, waiting.slots[N1].instance_id, True, at=NOW - 5)}
    )
    assert kinds(on_node(run(healthy))) == [RESUME]


def test_a_reboot_of_the_previous_instance_does_not_count_for_its_replacement():
    down = with_slurm(with_verdict(cluster(), N1, XID79), N1, {"DOWN"}, OUT)
    old = replace(down, events=(Event(NOW - 3000, REBOOT, N1, "health", "reboot:i-older"),))
    assert kinds(on_node(run(old))) == [REBOOT]


def test_without_slurm_the_remedy_is_an_ec2_reboot():
    snap = with_verdict(cluster(slurm=False), N1, XID79)
    reboot = by_kind(run(snap), REBOOT)
    assert [(a.node, a.data["via"]) for a in reboot] == [(N1, "ec2")]


def listed(actions):
    """The node names the loop's published membership lists in the hostfiles."""
    return [n["name"] for n in hosts.listed(by_kind(actions, m.PUBLISH)[0].data["body"])]


def test_without_slurm_a_node_out_of_service_leaves_the_hostfiles_until_its_checks_pass():
    snap = with_verdict(cluster(slurm=False), N1, DISK)
    actions = run(snap)
    drain = by_kind(actions, DRAIN)
    assert [(a.node, a.data["via"]) for a in drain] == [(N1, "hostfiles")] and N1 not in listed(actions)
    assert len(listed(actions)) == 3
    recorded = replace(snap, events=(Event(NOW - 10, DRAIN, N1, "health", drain[0].data["signature"]),))
    actions = run(recorded)  # level-triggered: still out, the DRAIN recorded once per verdict
    assert by_kind(actions, DRAIN) == [] and N1 not in listed(actions)
    healthy = with_verdict(recorded, N1, DISK, ok=True, at=NOW - 5)
    actions = run(healthy)
    assert kinds(on_node(actions)) == [RESUME] and N1 in listed(actions)
    assert on_node(run(replace(healthy, events=healthy.events + (Event(NOW - 2, RESUME, N1),)))) == []
    fatal = run(with_verdict(cluster(slurm=False), N1, XID79))  # out of the hostfiles and the catalog's reboot
    assert kinds(on_node(fatal)) == [DOWN, REBOOT] and N1 not in listed(fatal)


def test_without_slurm_a_systemic_burst_takes_no_node_out_of_the_hostfiles():
    snap = cluster(slurm=False)
    for name in snap.slots:
        snap = with_verdict(snap, name, XID79)
    actions = run(snap)
    assert len(by_kind(actions, ALERT)) == 1 and len(listed(actions)) == len(snap.slots)


def job(job_id, state="FAILED", restarts=0, end=NOW - 5, requeue=True, nodes=("gpu-000", N1)):
    return SlurmJob(job_id, state, frozenset(nodes), restarts, end, requeue)


@pytest.mark.parametrize(
    "the_job,requeued",
    [
        (job("41"), True),
        (job("42", state="NODE_FAIL"), True),
        (job("43", restarts=5), False),  # MaxBatchRequeue reached: left for a person
        (job("44", requeue=False), False),  # --no-requeue
        (job("45", end=NOW - 900), False),  # failed long before the fault: not with it
        (job("46", nodes=("gpu-002",)), False),  # not on the node
        (job("47", state="COMPLETED"), False),
        (job("48", state="RUNNING", end=0), False),  # Slurm requeues it itself when the node goes DOWN
    ],
    ids=["failed", "node-fail", "max-requeue", "no-requeue", "earlier", "elsewhere", "completed", "running"],
)
def test_a_job_that_failed_with_the_node_is_requeued_within_the_bound(the_job, requeued):
    snap = replace(with_slurm(with_verdict(cluster(), N1, XID79), N1, {"DOWN"}, OUT), jobs=(the_job,))
    got = by_kind(run(snap), REQUEUE)
    assert [a.data["job"] for a in got] == ([the_job.job_id] if requeued else [])
    assert not requeued or not by_kind(run(snap), REBOOT)  # the reboot waits for the next loop


def test_xid_79_on_every_node_at_once_is_one_alert_and_no_node_touched():
    snap = cluster()
    for name in snap.slots:
        snap = with_verdict(snap, name, XID79)
    actions = run(snap)
    alerts = by_kind(actions, ALERT)
    assert len(alerts) == 1 and alerts[0].why.failure == "systemic" and "xid" in alerts[0].why.evidence
    assert [a for a in actions if a.node] == []
    again = replace(snap, alerts={alerts[0].data["key"]: NOW})
    assert [a for a in run(again) if a.kind != m.PUBLISH] == []


def test_a_fresh_verdict_settles_first_so_a_burst_arriving_over_a_health_period_is_seen_whole():
    """The first node's Xid 79 reaches the controller a loop before the others': acting on it at once would take
    one healthy node out of a systemic fault. It waits health_settle_seconds; the burst then shows."""
    from hpcc_node.controller.timers import DEFAULT

    settle = DEFAULT.health_settle_seconds
    first = with_verdict(cluster(), N1, XID79, at=NOW - settle + 5)
    assert on_node(run(first)) == []  # not yet
    assert kinds(on_node(run(with_verdict(cluster(), N1, XID79, at=NOW - settle)))) == [DOWN]  # settled: acted on
    burst = first
    for name in sorted(set(first.slots) - {N1}):
        burst = with_verdict(burst, name, XID79, at=NOW - 2)
    actions = run(burst)
    assert len(by_kind(actions, ALERT)) == 1 and [a for a in actions if a.node] == []


def test_two_faults_on_two_nodes_of_a_large_cluster_are_not_systemic():
    big = Group("gpu", "p5.48xlarge", 20, launch_template="lt-gpu", subnet_id="subnet-1")
    snap = with_verdict(with_verdict(cluster(big), N1, XID79), "gpu-007", SUPPORT)
    actions = run(snap, groups=(big,))
    assert by_kind(actions, ALERT) == [] and sorted(a.node for a in by_kind(actions, DOWN)) == [N1, "gpu-007"]


def test_the_signature_keeps_the_xid_and_drops_the_gpu_address():
    a = health_signature("xid", "Xid 79 on PCI:0000:53:00: GPU has fallen off the bus")
    b = health_signature("xid", "Xid 79 on PCI:0000:a9:00: GPU has fallen off the bus")
    c = health_signature("xid", "Xid 48 on PCI:0000:53:00: DBE")
    assert a == b != c


def test_a_failed_boot_check_is_a_failed_boot_and_protects_the_group_when_it_repeats():
    booting = with_slot(cluster(), N1, state=m.BOOTING, since=NOW - 60)
    rep = Report(
        N1, booting.slots[N1].instance_id, False, "health", "gpu_count: 7 GPU(s) visible, the instance type has 8", NOW
    )
    snap = replace(booting, reports={**booting.reports, N1: rep})
    assert kinds(on_node(run(snap))) == [DOWN, REPLACE]
    assert "health check at boot" in by_kind(run(snap), REPLACE)[0].why.evidence
    ninth = replace(snap, group_states={"gpu": GroupState("gpu", consecutive_failures=9)})
    actions = run(ninth)
    assert kinds(actions).count(PROTECT) == 1 and REPLACE not in kinds(actions)
    assert by_kind(actions, MARK)[0].data["state"] == m.FAILED


SPARE = Group("gpu", "p5.48xlarge", 4, launch_template="lt-gpu", subnet_id="subnet-1", spares=1)
RES = spare_reservation("gpu")


def test_spares_are_held_released_on_a_failure_and_taken_again():
    ready = cluster(SPARE)
    held = by_kind(run(ready, groups=(SPARE,)), SPARES)
    assert [(a.data["reservation"], a.data["nodes"]) for a in held] == [(RES, ["gpu-003"])]
    holding = replace(ready, reservations={RES: frozenset({"gpu-003"})})
    assert by_kind(run(holding, groups=(SPARE,)), SPARES) == []
    failing = with_slurm(with_verdict(holding, N1, XID79), N1, {"DOWN"}, OUT)
    release = by_kind(run(failing, groups=(SPARE,)), SPARES)
    assert [a.data["nodes"] for a in release] == [[]] and "released gpu-003" in release[0].why.evidence
    released = replace(failing, reservations={})
    assert by_kind(run(released, groups=(SPARE,)), SPARES) == []  # the requeued job may take it
    back = replace(
        ready, slurm={**ready.slurm, "gpu-003": replace(ready.slurm["gpu-003"], states=frozenset({"ALLOCATED"}))}
    )
    again = by_kind(run(back, groups=(SPARE,)), SPARES)
    assert [a.data["nodes"] for a in again] == [["gpu-002"]]  # the busy old spare stays busy; an idle one is held


def test_a_groups_spares_set_to_0_delete_its_reservation_and_cancel_a_held_spares_check():
    ready = cluster(SPARE)
    holding = replace(ready, reservations={RES: frozenset({"gpu-003"})})
    none = replace(SPARE, spares=0)
    deleted = by_kind(run(holding, groups=(none,)), SPARES)
    assert [(a.data["reservation"], a.data["nodes"], a.data["exists"]) for a in deleted] == [(RES, [], True)]
    assert "released gpu-003" in deleted[0].why.evidence
    assert by_kind(run(ready, groups=(none,)), SPARES) == []  # nothing held, nothing to delete
    # the spare's running deep check is cancelled; a user's job of the same name is the user's (issue 33)
    # running, its end as squeue reports a running job's: its start plus its time limit
    ours = SlurmJob("77", "RUNNING", frozenset({"gpu-003"}), end=NOW + 190, name="hpcc-deep-check", user="root")
    users = SlurmJob("78", "RUNNING", frozenset({"gpu-003"}), name="hpcc-deep-check", user="alice")
    checking = replace(holding, jobs=(ours, users))
    assert [a.data["cancel"] for a in by_kind(run(checking, groups=(none,)), SPARES)] == [["77"]]


def test_the_health_rules_stay_linear_at_4096_nodes():
    import time

    big = Group("gpu", "p5.48xlarge", 4096, launch_template="lt-gpu", subnet_id="subnet-1", spares=8)
    snap = with_verdict(cluster(big), N1, XID79)
    started = time.perf_counter()
    actions = run(snap, groups=(big,))
    assert time.perf_counter() - started < 10.0  # 0.02 s alone; a quadratic pass over the slots takes minutes
    assert [a.data["nodes"] for a in by_kind(actions, SPARES)] == [[f"gpu-{i}" for i in range(4089, 4096)]]


def test_a_job_requeued_off_a_node_hpcc_took_out_is_made_eligible_now_and_no_other():
    """Slurm holds a requeued batch job until its EligibleTime (Reason=BeginTime, minutes on); one requeued off a
    node the controller set DOWN starts now. A job a user set to begin later, or no DOWN of ours, is left alone."""
    requeued = replace(job("43", "PENDING", restarts=1), reason="BeginTime", eligible=NOW + 110)
    users = replace(job("44", "PENDING", restarts=1), reason="BeginTime", eligible=NOW + 3600)
    fresh = replace(job("45", "PENDING"), reason="BeginTime", eligible=NOW + 60)  # never requeued: a user's --begin
    ours = (Event(NOW - 20, DOWN, N1, "health", "health:xid: Xid_79", "start", "hpcc: xid: Xid 79"),)
    snap = replace(cluster(), jobs=(requeued, users, fresh), events=ours)
    started = by_kind(run(snap), m.START_NOW)
    assert [a.data["job"] for a in started] == ["43"] and N1 in started[0].why.evidence
    assert by_kind(run(replace(snap, events=())), m.START_NOW) == []
    eligible = replace(snap, jobs=(replace(requeued, eligible=NOW - 1, reason="Resources"),))
    assert by_kind(run(eligible), m.START_NOW) == []  # already eligible: nothing to do


def test_a_held_spare_is_deep_checked_on_its_timer_once_and_a_released_ones_check_is_cancelled():
    """Every Timers.spare_check_seconds, counted from the node's last deep check (its report's, or the last asked,
    else when it became ready), as a job in the spares' reservation; never twice at once, never on a busy, drained
    or failing node."""
    DEEP = m.DEEP_CHECK
    holding = replace(cluster(SPARE), reservations={RES: frozenset({"gpu-003"})})  # ready an hour ago
    due = by_kind(run(holding, groups=(SPARE,), spare_check_seconds=1800), DEEP)
    assert [(a.node, a.data["reservation"], a.data["partition"]) for a in due] == [("gpu-003", RES, "gpu")]
    assert "3600 s ago" in due[0].why.evidence
    assert by_kind(run(holding, groups=(SPARE,), spare_check_seconds=7200), DEEP) == []  # not yet
    assert by_kind(run(holding, groups=(SPARE,), spare_check_seconds=0), DEEP) == []  # turned off
    reported = replace(
        holding, reports={**holding.reports, "gpu-003": replace(holding.reports["gpu-003"], deep_checked=NOW - 600)}
    )
    assert by_kind(run(reported, groups=(SPARE,), spare_check_seconds=1800), DEEP) == []  # its report's time counts
    check = SlurmJob("77", "RUNNING", frozenset({"gpu-003"}), end=NOW + 190, name="hpcc-deep-check", user="root")
    running = with_slurm(replace(holding, jobs=(check,)), "gpu-003", {"ALLOCATED"})
    assert by_kind(run(running, groups=(SPARE,), spare_check_seconds=1800), DEEP) == []  # one at a time
    pending = replace(holding, jobs=(replace(check, state="PENDING"),))  # submitted, not started: the node idle
    assert by_kind(run(pending, groups=(SPARE,), spare_check_seconds=1800), DEEP) == []
    # a check asked 10 min ago that never reported (a node without the batch script): asked again on the timer only
    asked = replace(
        holding,
        events=(m.Event(NOW - 600, DEEP, "gpu-003", "", "", "start", "held spare"),),
        jobs=(replace(check, state="FAILED", end=NOW - 599),),
    )
    assert by_kind(run(asked, groups=(SPARE,), spare_check_seconds=1800), DEEP) == []
    assert [a.node for a in by_kind(run(asked, groups=(SPARE,), spare_check_seconds=500), DEEP)] == ["gpu-003"]
    drained = with_slurm(holding, "gpu-003", {"IDLE", "DRAIN"}, "alice: looking")
    assert by_kind(run(drained, groups=(SPARE,), spare_check_seconds=1800), DEEP) == []
    # a failure elsewhere in the group releases the spare: its running check is cancelled, no new one starts
    failing = with_slurm(with_verdict(running, N1, XID79), N1, {"DOWN"}, OUT)
    actions = run(failing, groups=(SPARE,), spare_check_seconds=1800)
    release = by_kind(actions, SPARES)
    assert [(a.data["nodes"], a.data["cancel"]) for a in release] == [([], ["77"])]
    assert by_kind(actions, DEEP) == []
    # a user's job of the same name is the user's (issue 33): neither a deep check that holds off the next one nor
    # one to cancel
    users = SlurmJob("78", "RUNNING", frozenset({"gpu-003"}), name="hpcc-deep-check", user="alice")
    mimic = with_slurm(replace(holding, jobs=(users,)), "gpu-003", {"ALLOCATED"})
    assert (
        by_kind(
            run(
                replace(
                    mimic, slurm={**mimic.slurm, "gpu-003": replace(mimic.slurm["gpu-003"], states=frozenset({"IDLE"}))}
                ),
                groups=(SPARE,),
                spare_check_seconds=1800,
            ),
            DEEP,
        )
        != []
    )
    failing = with_slurm(with_verdict(mimic, N1, XID79), N1, {"DOWN"}, OUT)
    assert [a.data["cancel"] for a in by_kind(run(failing, groups=(SPARE,), spare_check_seconds=1800), SPARES)] == [[]]
