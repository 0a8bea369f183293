"""Rolling replacement (decide_rolling.py) through decide(): stale nodes drained then replaced once idle, the bound,
spares and failed nodes first, terminate, a new version that does not boot stops the roll, untagged instances left
alone, IMDS options applied in place."""

from __future__ import annotations

from dataclasses import replace

from hpcc_node.controller import model as m
from hpcc_node.controller.decide_rolling import ROLL, progress
from hpcc_node.controller.model import ALERT, DOWN, DRAIN, MARK, METADATA, REPLACE, RESUME, GroupState
from tests.node.controller_cases import GPU, NOW, by_kind, cluster, run, with_slot, with_slurm

OLD, NEW = "spec-old", "spec-new"
ROLLING = replace(GPU, count=6, lt_version=7, spec=NEW, update_strategy="rolling", max_unavailable=2)


def stale(group=ROLLING, spec=OLD, **snap):
    """Every node of the group launched with `spec`, its template-version tag 6."""
    s = cluster(group, **snap)
    insts = {k: replace(i, launch_spec=spec, template_version=6) for k, i in s.instances.items()}
    return replace(s, instances=insts)


def on_new(snap, *names):
    ids = {snap.slots[n].instance_id for n in names}
    return replace(
        snap,
        instances={
            k: replace(i, launch_spec=NEW, template_version=7) if k in ids else i for k, i in snap.instances.items()
        },
    )


def roll_nodes(actions, kind):
    return sorted(a.node for a in by_kind(actions, kind))


def test_stale_nodes_are_drained_never_more_than_max_unavailable_and_the_log_says_why():
    actions = run(stale(), [ROLLING])
    assert roll_nodes(actions, DRAIN) == ["gpu-000", "gpu-001"]  # 2 at a time, lowest index first
    assert not by_kind(actions, REPLACE) and not by_kind(actions, DOWN)  # their jobs finish first
    drain = by_kind(actions, DRAIN)[0]
    assert drain.data["slot_state"] == m.DRAINING and drain.data["slot_reason"].startswith(ROLL)
    assert drain.data["reason"].startswith("hpcc:")
    assert "rolling gpu to launch template version 7: 0 of 6 done, 2 at a time" in drain.line()


def test_the_bound_counts_draining_replacing_and_booting_nodes():
    snap = with_slot(stale(), "gpu-000", state=m.DRAINING, reason=f"{ROLL}: x")
    snap = with_slurm(snap, "gpu-000", {"DRAIN", "ALLOCATED"}, "hpcc: rolling")  # its job still runs
    assert roll_nodes(run(snap, [ROLLING]), DRAIN) == ["gpu-001"]
    busy = with_slot(with_slot(snap, "gpu-001", state=m.REPLACING), "gpu-002", state=m.BOOTING)
    actions = run(busy, [ROLLING])
    assert not [a for a in by_kind(actions, DRAIN) if a.node != "gpu-000"]
    assert not [a for a in by_kind(actions, REPLACE) if a.node not in ("gpu-001",)]


def test_a_drained_node_is_replaced_once_idle_without_spending_the_failure_budget():
    snap = with_slot(stale(), "gpu-000", state=m.DRAINING, reason=f"{ROLL}: x")
    running = with_slurm(snap, "gpu-000", {"DRAIN", "ALLOCATED"}, "hpcc: rolling")
    assert "gpu-000" not in roll_nodes(run(running, [ROLLING]), REPLACE)  # the job still runs
    assert not [a for a in run(running, [ROLLING]) if a.node == "gpu-000" and a.kind in (MARK, RESUME)]
    idle = with_slurm(snap, "gpu-000", {"DRAIN", "IDLE"}, "hpcc: rolling")
    actions = run(idle, [ROLLING])
    [rep] = [a for a in by_kind(actions, REPLACE) if a.node == "gpu-000"]
    assert rep.data["counted"] is False  # no failure budget, breaker or systemic count
    assert "gpu-000" in roll_nodes(actions, DOWN)


def test_a_node_that_dies_while_draining_for_the_roll_is_replaced_not_put_back():
    snap = with_slot(stale(), "gpu-000", state=m.DRAINING, reason=f"{ROLL}: x")
    snap = with_slurm(snap, "gpu-000", {"DRAIN", "ALLOCATED", "NOT_RESPONDING"}, "hpcc: rolling")
    iid = snap.slots["gpu-000"].instance_id
    dead = replace(snap, instances={**snap.instances, iid: replace(snap.instances[iid], state="terminated")})
    actions = [a for a in run(dead, [ROLLING]) if a.node == "gpu-000"]
    assert REPLACE in [a.kind for a in actions] and RESUME not in [a.kind for a in actions]


def test_held_spares_go_first_then_failed_nodes_then_by_index():
    snap = stale(reservations={"hpcc-spares-gpu": frozenset({"gpu-005"})})
    snap = with_slot(snap, "gpu-004", state=m.FAILED, reason="hook: onNodeReady failed")  # kept failed
    group = replace(ROLLING, spares=1)
    drained_or_replaced = {a.node for a in run(snap, [group]) if a.kind in (DRAIN, REPLACE)}
    assert drained_or_replaced == {"gpu-005", "gpu-004"}


def test_terminate_takes_nodes_down_at_once_within_the_bound():
    group = replace(ROLLING, update_strategy="terminate")
    snap = with_slurm(stale(group), "gpu-000", {"ALLOCATED"})
    actions = run(snap, [group])
    assert roll_nodes(actions, DOWN) == ["gpu-000", "gpu-001"] == roll_nodes(actions, REPLACE)
    assert not by_kind(actions, DRAIN)


def test_manual_and_untagged_instances_are_left_alone_and_reported_unknown():
    manual = replace(ROLLING, update_strategy="manual")
    assert not [a for a in run(stale(manual), [manual]) if a.kind in (DRAIN, DOWN, REPLACE)]
    untagged = stale(spec="")
    assert not [a for a in run(untagged, [ROLLING]) if a.kind in (DRAIN, DOWN, REPLACE)]
    prog = progress(ROLLING, list(untagged.slots.values()), untagged.instances)
    assert (prog.unknown, prog.stale) == (6, 0) and "6 version unknown" in prog.text()


def test_a_new_version_that_fails_to_boot_stops_the_roll_with_one_alert_and_resumes_the_drained():
    snap = with_slot(stale(), "gpu-000", state=m.DRAINING, reason=f"{ROLL}: x")
    snap = with_slurm(snap, "gpu-000", {"DRAIN", "ALLOCATED"}, "hpcc: rolling")
    failing = replace(snap, group_states={"gpu": GroupState("gpu", consecutive_failures=1)})
    actions = run(failing, [ROLLING])
    assert not by_kind(actions, DRAIN) and not by_kind(actions, REPLACE)
    [alert] = by_kind(actions, ALERT)
    assert "stopped: 1 replacement(s) in a row failed to boot" in alert.why.text()
    assert [a.kind for a in actions if a.node == "gpu-000"] == [MARK, RESUME]  # back in service
    protected = replace(snap, group_states={"gpu": GroupState("gpu", protected="bootstrap: 3 in a row")})
    assert "the group is protected" in by_kind(run(protected, [ROLLING]), ALERT)[0].why.text()
    said = replace(failing, alerts={alert.data["key"]: NOW - 60})
    assert not by_kind(run(said, [ROLLING]), ALERT)  # said once


def test_nodes_on_the_new_spec_count_as_done_and_a_finished_roll_does_nothing():
    snap = on_new(stale(), "gpu-000", "gpu-001", "gpu-002")
    prog = progress(ROLLING, list(snap.slots.values()), snap.instances)
    assert (prog.on, prog.stale) == (3, 3) and prog.text().startswith("rolling to version 7: 3 of 6 on it")
    assert roll_nodes(run(snap, [ROLLING]), DRAIN) == ["gpu-003", "gpu-004"]
    done = on_new(snap, *snap.slots)
    assert not [a for a in run(done, [ROLLING]) if a.kind in (DRAIN, DOWN, REPLACE)]


def test_imds_options_are_applied_in_place_not_by_replacement():
    group = replace(ROLLING, metadata_hop_limit=2)
    snap = on_new(stale(group), *cluster(group).slots)  # same spec: only the hop limit differs
    snap = replace(snap, instances={k: replace(i, hop_limit=1) for k, i in snap.instances.items()})
    actions = run(snap, [group])
    assert roll_nodes(actions, METADATA) == sorted(snap.slots)
    assert all(a.data["hop_limit"] == 2 for a in by_kind(actions, METADATA))
    assert not [a for a in actions if a.kind in (DRAIN, DOWN, REPLACE)]
    applied = replace(snap, instances={k: replace(i, hop_limit=2) for k, i in snap.instances.items()})
    assert not by_kind(run(applied, [group]), METADATA)
