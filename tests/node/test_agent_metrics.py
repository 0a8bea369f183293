"""The head's agent keeps the head's Prometheus on the bundle's metrics files (hpcc_node/agent_metrics.py): the role
script's apply-metrics once per other set of files, never on a compute node, and a failed apply said with its
output and tried again later, not every tick."""

from pathlib import Path

from hpcc_node import agent_metrics
from tests.box import bundles
from tests.node.agent_support import SCRIPTS, SETTINGS, FakeAws, P, make_agent, running

METRICS = {
    "metrics/prometheus.yml": "global: {}\n",
    "metrics/rules.yml": "groups: []\n",
    "metrics/prometheus.args": "--a\n",
    "metrics/dashboards/cluster.json": "{}\n",
}
RETENTION_30D = {"metrics/prometheus.args": "--storage.tsdb.retention.time=30d\n"}
DASHBOARD_CHANGED = {"metrics/dashboards/cluster.json": "[]\n"}


def applies(agent) -> int:
    return sum(1 for argv in agent.run.calls if argv[-1] == "apply-metrics")


def booted(tmp_path, name="head", patches=METRICS, now=None):
    aws = FakeAws()
    aws.members("10.0.0.4\n10.0.0.5")
    aws.put(f"{P}/settings", SETTINGS)
    clock = (lambda: now[0]) if now else (lambda: 1000.0)
    ip = "10.0.0.4" if name == "head" else "10.0.0.5"
    agent, sha = make_agent(tmp_path, aws, name, clock=clock, ip=ip, patches=patches)
    return aws, agent


def test_the_head_applies_its_bundles_metrics_files_once(tmp_path):
    aws, head = booted(tmp_path)
    head.tick()
    head.tick()
    assert applies(head) == 1
    argv = next(a for a in head.run.calls if a[-1] == "apply-metrics")
    assert argv[:2] == ["bash", str(Path(head.current_dir()) / "roles" / "head.sh")]
    assert "runs bundle" in (tmp_path / "head/log").read_text()


def test_a_bundle_with_other_metrics_files_is_applied_and_one_with_the_same_is_not(tmp_path):
    aws, head = booted(tmp_path)
    head.tick()
    same, same_sha = bundles.build(SCRIPTS, {**METRICS, "hpcc_node/extra.py": "X = 1\n"})
    aws.publish(same, same_sha)
    head.tick()  # switches (the caller re-executes the agent: a fresh one reads what was applied)
    fresh = type(head)(head.c, aws, clock=head.clock, run=head.run, s3=aws.s3)
    fresh.tick()
    assert running(head.c) == same_sha and applies(head) == 1
    other, other_sha = bundles.build(SCRIPTS, {**METRICS, **RETENTION_30D})
    aws.publish(other, other_sha)
    fresh.tick()
    again = type(head)(head.c, aws, clock=head.clock, run=head.run, s3=aws.s3)
    again.tick()
    again.tick()
    assert running(head.c) == other_sha and applies(head) == 2
    board, board_sha = bundles.build(SCRIPTS, {**METRICS, **RETENTION_30D, **DASHBOARD_CHANGED})
    aws.publish(board, board_sha)
    again.tick()
    third = type(head)(head.c, aws, clock=head.clock, run=head.run, s3=aws.s3)
    third.tick()
    assert running(head.c) == board_sha and applies(head) == 3  # a dashboard changed: applied too


def test_a_failed_apply_is_said_with_its_output_and_tried_again_after_a_while(tmp_path):
    now = [1000.0]
    aws, head = booted(tmp_path, now=now)
    head.run.apply_metrics_rc = 1
    head.tick()
    head.tick()
    assert applies(head) == 1
    log = (tmp_path / "head/log").read_text()
    assert "apply-metrics of bundle" in log and "Unable to locate package prometheus" in log
    now[0] += agent_metrics.RETRY_S
    head.run.apply_metrics_rc = 0
    head.tick()
    head.tick()
    assert applies(head) == 2


def test_a_compute_node_and_a_bundle_without_metrics_files_never_apply(tmp_path):
    _, compute = booted(tmp_path, name="compute-001")
    compute.tick()
    assert applies(compute) == 0
    _, head = booted(tmp_path / "off", patches=None)
    head.tick()
    assert applies(head) == 0
