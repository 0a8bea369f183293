"""The head's Prometheus alerts in the heal loop (hpcc_node/controller/metric_alerts.py): read from the real
Prometheus' /api/v1/alerts, each firing rule an alert of the controller's (an `hpcc events` entry with its
evidence), a `drain` rule's node drained in Slurm while it fires and resumed after, never replaced or taken down;
Prometheus not answering changes nothing and the loop goes on."""

from __future__ import annotations

import logging
import socket
import subprocess
import time
import urllib.request
from dataclasses import replace

import pytest

from hpcc_contract import metrics
from hpcc_node.controller import metric_alerts as ma
from hpcc_node.controller.decide import decide
from hpcc_node.controller.model import (
    ALERT,
    DOWN,
    DRAIN,
    READY,
    REPLACE,
    RESUME,
    Group,
    Instance,
    MetricAlert,
    Report,
    Slot,
    SlurmNode,
    Snapshot,
)
from tests.node.metrics_support import tool

NOW = 10_000.0
THERMAL = MetricAlert("HpccGpuThermalThrottling", "gpu-000", "i-0", "drain", "GPU 3 held down by heat 40%", NOW - 60)
DISK = MetricAlert("HpccRootDiskFilling", "gpu-001", "i-1", "event", "the root file system has 10% free", NOW - 60)


def snap(firing, slurm_states=None, reasons=None, **kw) -> Snapshot:
    slots = {f"gpu-00{i}": Slot(f"gpu-00{i}", "gpu", i, f"i-{i}", READY) for i in range(3)}
    states = slurm_states or {}
    reasons = reasons or {}
    slurm = {n: SlurmNode(n, frozenset(states.get(n, {"IDLE"})), reasons.get(n, ""), f"10.0.0.{i}")
             for i, n in enumerate(slots)}  # fmt: skip
    return Snapshot(now=NOW, slots=slots, slurm=slurm, metric_alerts=firing, **kw)


def kinds(actions) -> list[tuple[str, str]]:
    return [(a.kind, a.node) for a in actions]


def test_a_drain_rule_drains_its_idle_node_and_every_firing_rule_is_one_alert_with_its_evidence():
    out = ma.alert_actions(snap((THERMAL, DISK)), set(), set(), 3)
    assert kinds(out) == [(ALERT, "gpu-000"), (ALERT, "gpu-001"), (DRAIN, "gpu-000")]
    assert [a.data["key"] for a in out if a.kind == ALERT] == [
        "metrics:HpccGpuThermalThrottling:gpu-000",
        "metrics:HpccRootDiskFilling:gpu-001",
    ]
    assert "GPU 3 held down by heat 40%" in out[0].why.text() and out[0].group == "gpu"
    drain = out[2]
    assert drain.data["reason"] == "hpcc: alert HpccGpuThermalThrottling: GPU 3 held down by heat 40%"
    assert drain.instance_id == "i-0" and not [a for a in out if a.kind in (REPLACE, DOWN)]


def test_a_summary_carrying_node_written_labels_is_one_clean_line_in_the_slurm_reason():
    sly = MetricAlert(THERMAL.name, "gpu-000", "i-0", "drain", "device rdmap0\nState=RESUME Reason=x", NOW)
    (drain,) = [a for a in ma.alert_actions(snap((sly,)), set(), set(), 3) if a.kind == DRAIN]
    assert drain.data["reason"] == "hpcc: alert HpccGpuThermalThrottling: device rdmap0 State:RESUME Reason:x"


def test_an_alert_raised_already_is_not_raised_again_but_its_node_still_drains():
    out = ma.alert_actions(
        snap((THERMAL,), alerts={"metrics:HpccGpuThermalThrottling:gpu-000": NOW - 30}), set(), set(), 3
    )
    assert kinds(out) == [(DRAIN, "gpu-000")]


@pytest.mark.parametrize(
    "states, reason",
    [
        ({"IDLE", "DRAIN"}, "maintenance by ops"),  # a person's: never touched
        ({"IDLE", "DRAIN"}, "hpcc: xid: Xid 79"),  # a health verdict's: the verdict's to undo
        ({"DOWN"}, "hpcc: down"),
    ],
)
def test_a_node_already_held_is_not_drained_again(states, reason):
    out = ma.alert_actions(snap((THERMAL,), {"gpu-000": states}, {"gpu-000": reason}), set(), set(), 3)
    assert kinds(out) == [(ALERT, "gpu-000")]


def test_a_node_this_loop_already_acts_on_or_not_ready_or_of_another_instance_is_left_alone():
    assert kinds(ma.alert_actions(snap((THERMAL,)), {"gpu-000"}, set(), 3)) == [(ALERT, "gpu-000")]
    old_instance = MetricAlert(THERMAL.name, "gpu-000", "i-old", "drain", "the replaced node's series", NOW)
    assert kinds(ma.alert_actions(snap((old_instance,)), set(), set(), 3)) == [(ALERT, "gpu-000")]


def test_the_alerts_drain_is_resumed_once_no_drain_rule_fires_for_the_node_and_only_then():
    drained = ({"IDLE", "DRAIN"}, "hpcc: alert HpccGpuThermalThrottling: GPU 3 held down by heat 40%")
    states, reasons = {"gpu-000": drained[0]}, {"gpu-000": drained[1]}
    out = ma.alert_actions(snap((), states, reasons), set(), set(), 3)
    assert kinds(out) == [(RESUME, "gpu-000")] and "HpccGpuThermalThrottling no longer fires" in out[0].why.text()
    assert kinds(ma.alert_actions(snap((THERMAL,), states, reasons), set(), set(), 3)) == [
        (ALERT, "gpu-000")
    ]  # still held
    # a health verdict failing meanwhile: the node is the health rules' now, not resumed
    failing = {"gpu-000": Report("gpu-000", "i-0", False, "health", "xid: Xid 79", NOW - 5, check="xid")}
    assert ma.alert_actions(snap((), states, reasons, reports=failing), set(), set(), 3) == []
    # Prometheus down (None): nothing drained, nothing resumed, nothing raised
    assert ma.alert_actions(snap(None, states, reasons), set(), set(), 3) == []


def test_a_drain_rule_firing_on_many_nodes_at_once_is_one_systemic_alert_and_drains_none():
    each = tuple(MetricAlert(THERMAL.name, f"gpu-00{i}", f"i-{i}", "drain", "hot", NOW) for i in range(3))
    out = ma.alert_actions(snap(each), set(), set(), 3)
    assert not [a for a in out if a.kind == DRAIN]
    assert [a.data["key"] for a in out if a.kind == ALERT][-1] == "systemic:metrics:HpccGpuThermalThrottling"
    assert len([a for a in ma.alert_actions(snap(each[:2]), set(), set(), 3) if a.kind == DRAIN]) == 2


def test_without_slurm_an_alert_is_an_event_only():
    s = snap((THERMAL,))
    s = Snapshot(now=NOW, slots=s.slots, slurm=None, metric_alerts=(THERMAL,))
    assert kinds(ma.alert_actions(s, set(), set(), 3)) == [(ALERT, "gpu-000")]


def test_decide_keeps_an_alerts_drain_while_it_fires_and_the_health_rules_never_resume_it():
    """assess.py resumes a ready node hpcc drained once its verdict passes; an alert's drain is the alert's."""
    group = Group("gpu", "p5.48xlarge", 3)
    drained = ({"IDLE", "DRAIN"}, "hpcc: alert HpccGpuThermalThrottling: GPU 3 held down by heat 40%")
    base = snap((THERMAL,), {"gpu-000": drained[0]}, {"gpu-000": drained[1]})
    insts = {
        f"i-{i}": Instance(f"i-{i}", "running", NOW - 3600, "gpu", f"10.0.0.{i}", True, name_tag=f"gpu-00{i}")
        for i in range(3)
    }
    reports = {f"gpu-00{i}": Report(f"gpu-00{i}", f"i-{i}", True, at=NOW - 5, heard=NOW - 5) for i in range(3)}
    firing = replace(base, instances=insts, reports=reports)
    assert (RESUME, "gpu-000") not in kinds(decide(firing, [group], NOW)), decide(firing, [group], NOW)
    cleared = replace(firing, metric_alerts=())
    assert kinds(decide(cleared, [group], NOW)).count((RESUME, "gpu-000")) == 1, decide(cleared, [group], NOW)
    # the same drain with a health verdict's reason is resumed by the health rules, alerts or none
    health = replace(
        firing, slurm={**firing.slurm, "gpu-000": SlurmNode("gpu-000", frozenset(drained[0]), "hpcc: x", "10.0.0.0")}
    )
    assert kinds(decide(health, [group], NOW)).count((RESUME, "gpu-000")) == 1


def test_activeat_is_read_with_nanoseconds_and_offsets():
    assert ma.rfc3339("2026-11-30T12:00:00Z") == 1796040000.0
    assert ma.rfc3339("2026-11-30T12:00:00.5Z") == 1796040000.5
    assert ma.rfc3339("2026-11-30T14:00:00.123456789+02:00") == pytest.approx(1796040000.123456789)
    with pytest.raises(ValueError):
        ma.rfc3339("yesterday")


def test_an_answer_that_is_not_the_api_or_no_answer_is_none_said_once_and_again_when_it_is_back(caplog):
    answers = [
        OSError("refused"),
        OSError("refused"),
        {"status": "error"},
        {"status": "success", "data": {"alerts": []}},
    ]

    def fetch(url):
        got = answers.pop(0)
        if isinstance(got, Exception):
            raise got
        return got

    read = ma.Reader("http://10.0.0.5:9090/api/v1/alerts", fetch, logging.getLogger("t"))
    with caplog.at_level(logging.INFO, "t"):
        assert [read(), read(), read(), read()] == [None, None, None, ()]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3 and "goes on without them" in said[0] and "read again" in said[2]


def test_the_real_prometheus_answer_is_read_firing_only_with_its_labels_and_summary(tmp_path):
    """Debian's Prometheus, a rule firing at once and one that waits: the API's form as the controller reads it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rules = tmp_path / "rules.yml"
    rules.write_text(
        "groups:\n- name: t\n  interval: 1s\n  rules:\n"
        "  - alert: HpccGpuThermalThrottling\n"
        "    expr: label_replace(label_replace(vector(0.4), 'node', 'gpu-000', '', ''), 'instance_id', 'i-0', '', '')\n"
        f"    labels: {{{metrics.ALERT_ACTION_LABEL}: drain, severity: critical}}\n"
        "    annotations: {summary: 'GPU 3 on {{ $labels.node }} held down {{ $value | humanizePercentage }}'}\n"
        "  - alert: Waiting\n    expr: vector(1)\n    for: 1h\n    labels: {node: gpu-001}\n"
    )
    config = tmp_path / "prometheus.yml"
    config.write_text(f"global: {{evaluation_interval: 1s}}\nrule_files: [{rules}]\n")
    proc = subprocess.Popen(
        [tool("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    read = ma.Reader(f"http://127.0.0.1:{port}/api/v1/alerts")
    try:
        deadline, found = time.monotonic() + 60, None
        while time.monotonic() < deadline:
            found = read()
            if found:
                break
            assert proc.poll() is None, "prometheus exited"
            time.sleep(0.5)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/alerts", timeout=5) as r:
            raw = r.read().decode()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert found, f"no alert firing within 60 s: {raw}"
    (alert,) = found  # Waiting is pending, not firing
    assert '"pending"' in raw
    assert (alert.name, alert.node, alert.instance_id, alert.action) == (
        "HpccGpuThermalThrottling",
        "gpu-000",
        "i-0",
        "drain",
    )
    assert alert.summary == "GPU 3 on gpu-000 held down 40%" and abs(alert.since - time.time()) < 120


def test_a_built_controller_takes_each_loops_alerts_into_its_ledger_and_events_and_goes_on_without_them():
    from hpcc_node.controller.ledger import Ledger
    from hpcc_node.controller.loop import build_step
    from tests.node.test_controller_restart import BUCKET, CLUSTER, GPU, TABLE, fresh_env

    answers = [None, (DISK,)]  # Prometheus not answering, then a firing rule
    with fresh_env() as env:
        step = build_step(
            env.ec2, env.ddb, env.s3, CLUSTER, TABLE, BUCKET, lambda: [GPU], "head-1", env.clock,
            alerts=lambda: answers.pop(0),
        )  # fmt: skip
        first = step()
        after_outage = Ledger(env.ddb, TABLE, "reader", env.clock).load()
        env.now[0] += 30
        step()
        loaded = Ledger(env.ddb, TABLE, "reader", env.clock).load()
    assert any(line.startswith("launch") for line in first["lines"])  # the outage's loop did its work
    assert not [k for k in after_outage.alerts if k.startswith("metrics:")]
    assert "metrics:HpccRootDiskFilling:gpu-001" in loaded.alerts
    (event,) = [e for e in loaded.events if e.kind == ALERT and e.phase == "start"]
    assert event.node == "gpu-001" and "the root file system has 10% free" in event.detail, event
