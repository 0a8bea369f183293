"""The controller's series (hpcc_node/controller/series.py): fed each loop from its snapshot, decide()'s actions and
the executor's slots, written by loop.forever after every loop to node_exporter's textfile directory on the head."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

from hpcc_contract import metrics
from hpcc_node.controller.ledger import Ledger
from hpcc_node.controller.loop import build_step, forever
from hpcc_node.controller.membership import Published
from hpcc_node.controller.model import (
    ALERT,
    BOOTING,
    FAILED,
    LAUNCH,
    READY,
    REPLACE,
    REPLACING,
    SPARES,
    Action,
    Slot,
    Snapshot,
    Why,
)
from hpcc_node.controller.series import KINDS, REASONS, SLOT_STATES, ControllerSeries
from tests.node.metrics_support import named, parse, promtool_check, value
from tests.node.test_controller_restart import BUCKET, CLUSTER, GPU, TABLE, fresh_env

LOG = logging.getLogger("hpcc.controller")


def slots(*specs: tuple[str, str]) -> dict[str, Slot]:
    return {name: Slot(name, name.rsplit("-", 1)[0], int(name[-3:]), f"i-{name}", state) for name, state in specs}


SNAP = Snapshot(
    now=1000.0,
    slots=slots(
        ("gpu-000", READY), ("gpu-001", REPLACING), ("gpu-002", READY), ("gpu-003", BOOTING), ("cpu-000", FAILED)
    ),
    reservations={"hpcc-spares-gpu": frozenset({"gpu-002"})},
    alerts={"systemic:gpu": 900.0},
    membership_generation=7,
)
ACTIONS = [
    Action(REPLACE, "gpu", "gpu-000", why=Why("health", "xid: Xid 79")),
    Action(REPLACE, "gpu", "gpu-001", why=Why("", "finishing the recorded replacement"), data={"counted": False}),
    Action(REPLACE, "gpu", "gpu-002", why=Why("", "requested by hpcc replace"), data={"requested": True}),
    Action(REPLACE, "gpu", "gpu-003", why=Why("", "rolling to launch template version 3"), data={"counted": False}),
    Action(SPARES, "gpu", data={"reservation": "hpcc-spares-gpu", "nodes": ["gpu-002", "gpu-003"]}),
    Action(ALERT, why=Why("systemic", "many nodes"), data={"key": "systemic:gpu"}),
    Action(LAUNCH, "gpu", data={"count": 1, "token": "t"}),
]


def read(directory: Path) -> dict:
    return parse((directory / metrics.TEXTFILE_CONTROLLER).read_text())


def test_a_loop_with_known_actions_is_counted_by_kind_reason_group_and_state(tmp_path):
    series = ControllerSeries(str(tmp_path))
    series.looped(SNAP, ACTIONS, SNAP.slots, None, ["gpu", "cpu"])
    series.finished(2.5, LOG)
    text = (tmp_path / metrics.TEXTFILE_CONTROLLER).read_text()
    got = parse(text)
    assert value(got, "hpcc_controller_loop_seconds") == 2.5 and value(got, "hpcc_controller_loops_total") == 1
    kinds = Counter(a.kind for a in ACTIONS)
    assert {dict(k)["kind"]: v for k, v in named(got, "hpcc_controller_actions_total").items()} == {
        k: kinds.get(k, 0) for k in KINDS
    }  # every kind from 0, so rate() sees a kind's first action
    # gpu-001 was replacing already: that replacement was counted when it started
    replaced = {("gpu", "health"): 1, ("gpu", "requested"): 1, ("gpu", "roll"): 1}
    assert {
        (dict(k)["group"], dict(k)["reason"]): v for k, v in named(got, "hpcc_controller_replacements_total").items()
    } == {(g, r): replaced.get((g, r), 0) for g in ("gpu", "cpu") for r in REASONS}
    states = Counter((s.group, s.state) for s in SNAP.slots.values())
    assert {(dict(k)["group"], dict(k)["state"]): v for k, v in named(got, "hpcc_controller_nodes").items()} == {
        (g, s): states.get((g, s), 0) for g in ("cpu", "gpu") for s in SLOT_STATES
    }
    assert value(got, "hpcc_controller_spares", group="gpu") == 2  # as this loop's SPARES set them
    assert value(got, "hpcc_controller_spares", group="cpu") == 0
    assert value(got, "hpcc_controller_membership_generation") == 7
    assert value(got, "hpcc_controller_alerts_total") == 0  # raised before this process: not counted
    out = promtool_check(text)
    assert (out.returncode, out.stdout + out.stderr) == (0, ""), out.stdout + out.stderr


def test_counters_add_up_over_loops_and_an_alert_counts_when_a_loop_first_reads_it(tmp_path):
    series = ControllerSeries(str(tmp_path))
    series.looped(SNAP, ACTIONS, SNAP.slots, None, ["gpu"])
    later = Snapshot(
        now=1060.0,
        slots=SNAP.slots,
        alerts={"systemic:gpu": 900.0, "launch:gpu:InvalidParameter": 1030.0},  # a failed launch's, from act
    )
    series.looped(later, ACTIONS[:1], later.slots, Published(8, "etag", {}), ["gpu"])
    series.looped(Snapshot(now=1120.0, alerts={"systemic:gpu": 1100.0}), [], {}, Published(8, "etag", {}), ["gpu"])
    series.finished(0.4, LOG)
    got = read(tmp_path)
    assert value(got, "hpcc_controller_loops_total") == 3
    assert value(got, "hpcc_controller_alerts_total") == 2  # the launch's, then systemic:gpu raised again
    assert value(got, "hpcc_controller_actions_total", kind=REPLACE) == 5
    assert value(got, "hpcc_controller_replacements_total", group="gpu", reason="health") == 2
    assert value(got, "hpcc_controller_membership_generation") == 8  # the one published
    assert value(got, "hpcc_controller_nodes", group="gpu", state=READY) == 0  # the last loop's slots


def test_a_built_controller_writes_its_file_after_every_loop_from_what_the_loops_did(tmp_path):
    with fresh_env() as env:
        step = build_step(
            env.ec2,
            env.ddb,
            env.s3,
            CLUSTER,
            TABLE,
            BUCKET,
            lambda: [GPU],
            "head-1",
            env.clock,
            metrics_dir=str(tmp_path),
        )
        results: list[dict] = []

        def one_loop():
            results.append(step())
            return results[-1]

        one_loop.series = step.series
        ran = forever(
            one_loop, env.clock, lambda s: env.now.__setitem__(0, env.now[0] + s), stop=lambda: len(results) >= 2
        )
        ledger = Ledger(env.ddb, TABLE, "reader", env.clock).load()
    got = read(tmp_path)
    assert value(got, "hpcc_controller_loops_total") == ran == 2
    done = Counter(line.split(" ", 1)[0] for r in results for line in r["lines"])
    assert done[LAUNCH] >= 1  # the first loop launched the group
    assert {k: v for k, v in done.items()} == {
        dict(k)["kind"]: v for k, v in named(got, "hpcc_controller_actions_total").items() if v
    }
    by_state = Counter(s.state for s in ledger.slots.values())
    for state in SLOT_STATES:
        assert value(got, "hpcc_controller_nodes", group="gpu", state=state) == by_state.get(state, 0), state
    assert value(got, "hpcc_controller_membership_generation") == ledger.membership.get("generation", 0)


def test_a_controller_standing_by_writes_its_loop_time_and_a_failed_write_stops_no_loop(tmp_path, caplog):
    now, calls = [0.0], []

    def step():
        calls.append(now[0])
        now[0] += 3
        return {"lease": False, "holder": "head-2", "until": 99}

    step.series = ControllerSeries(str(tmp_path))
    forever(step, lambda: now[0], lambda s: now.__setitem__(0, now[0] + s), stop=lambda: len(calls) >= 1)
    got = read(tmp_path)
    assert value(got, "hpcc_controller_loop_seconds") == 3 and value(got, "hpcc_controller_loops_total") == 0
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    step.series = ControllerSeries(str(blocked))
    caplog.set_level(logging.WARNING, logger="hpcc.controller")
    forever(step, lambda: now[0], lambda s: now.__setitem__(0, now[0] + s), stop=lambda: len(calls) >= 3)
    assert len(calls) == 3 and caplog.text.count(f"the controller's series not written to {blocked}") == 2


def test_slurms_nodes_jobs_and_each_running_jobs_nodes_come_from_the_loops_snapshot_and_pass_promtool(tmp_path):
    from hpcc_node.controller.model import SlurmJob, SlurmNode
    from hpcc_node.controller.series import SLURM_JOB_STATES, SLURM_NODE_STATES

    slurm = {
        "gpu-000": SlurmNode("gpu-000", frozenset({"ALLOCATED"})),
        "gpu-001": SlurmNode("gpu-001", frozenset({"IDLE", "DRAIN"})),
        "gpu-002": SlurmNode("gpu-002", frozenset({"IDLE", "NOT_RESPONDING"})),
        "gpu-003": SlurmNode("gpu-003", frozenset({"MIXED"})),
        "cpu-000": SlurmNode("cpu-000", frozenset({"IDLE"})),
        "head": SlurmNode("head", frozenset({"FUTURE"})),
    }
    jobs = (
        # a user's name and job name are their text: data in a label value, never syntax
        SlurmJob("41", "RUNNING", frozenset({"gpu-000", "gpu-003"}), user="ana", name='llama "70b"\nrun'),
        SlurmJob("42", "PENDING", user="bo"),
        SlurmJob("43", "COMPLETING", frozenset({"cpu-000"})),
        SlurmJob("44", "NODE_FAIL", frozenset({"gpu-002"})),
        SlurmJob("45", "SPECIAL_EXIT"),
    )
    snap = Snapshot(now=1000.0, slots=SNAP.slots, slurm=slurm, jobs=jobs)
    series = ControllerSeries(str(tmp_path))
    series.looped(snap, [], snap.slots, None, ["gpu", "cpu"])
    series.finished(0.1, LOG)
    text = (tmp_path / metrics.TEXTFILE_CONTROLLER).read_text()
    got = parse(text)
    nodes = {(dict(k)["group"], dict(k)["state"]): v for k, v in named(got, "hpcc_slurm_nodes").items()}
    expected = {("gpu", "allocated"): 1, ("gpu", "drain"): 1, ("gpu", "down"): 1, ("gpu", "mixed"): 1}
    expected |= {("cpu", "idle"): 1, ("", "other"): 1}
    assert nodes == {**{(g, s): 0 for g in ("gpu", "cpu") for s in SLURM_NODE_STATES}, **expected}
    by_state = {dict(k)["state"]: v for k, v in named(got, "hpcc_slurm_jobs").items()}
    assert by_state == {
        **{s: 0 for s in SLURM_JOB_STATES},
        "running": 1,
        "pending": 1,
        "completing": 1,
        "node_fail": 1,
        "other": 1,
    }
    running = {
        (dict(k)["job_id"], dict(k)["slurm_node"], dict(k)["user"], dict(k)["job_name"]): v
        for k, v in named(got, "hpcc_slurm_job_node_info").items()
    }
    assert running == {("41", n, "ana", 'llama "70b"\nrun'): 1 for n in ("gpu-000", "gpu-003")}
    out = promtool_check(text)
    assert (out.returncode, out.stdout + out.stderr) == (0, ""), out.stdout + out.stderr


def test_a_cluster_without_slurm_writes_no_slurm_series(tmp_path):
    series = ControllerSeries(str(tmp_path))
    series.looped(SNAP, [], SNAP.slots, None, ["gpu"])
    series.finished(0.1, LOG)
    names = {name for name, _ in read(tmp_path)}
    assert "hpcc_controller_loops_total" in names and not {n for n in names if n.startswith("hpcc_slurm")}
