"""The metrics step (templates/steps/metrics.sh.j2) run for real against stand-in exporters, in a private mount
namespace: node_exporter bound to the node's address with hpcc's textfile directory, Prometheus on the head with
the bundle's configuration and the flags infra/render/prometheus.py gives, each started once however often the
step runs, restarted when its arguments change, and nothing at all with observability off. Grafana, on a head
without systemd (the box), is skipped with a line in the log."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from hpcc_contract import metrics
from hpcc_contract.metrics import NODE_EXPORTER_FLAGS
from infra.render import prometheus
from tests.render.bootstrap_fixtures import tool
from tests.render.test_bootstrap_behaviour import STUB_FAIL, preamble, private_run
from tests.render.test_bootstrap_steps import COMMON, ctx_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a private mount namespace needs root")
WRITES = {"over": ["/run"], "overlay": ["/etc", "/var/lib", "/var/log"]}
ROOT = Path(__file__).resolve().parent.parent.parent


def stand_ins(tmp_path: Path, bin_dir: Path) -> None:
    """Each exporter records its arguments (one start a line) and its pid, then runs until killed."""
    for name in ("prometheus-node-exporter", "prometheus"):
        tool(bin_dir, name, f'echo "$*" >>{tmp_path}/{name}.starts\necho $$ >>{tmp_path}/pids\nexec sleep 600\n')


def starts(tmp_path: Path, name: str) -> list[str]:
    path = tmp_path / f"{name}.starts"
    return path.read_text().splitlines() if path.exists() else []


def wait_starts(tmp_path: Path, name: str, count: int, timeout: float = 20) -> list[str]:
    deadline = time.time() + timeout
    while len(starts(tmp_path, name)) < count and time.time() < deadline:
        time.sleep(0.2)
    return starts(tmp_path, name)


@pytest.fixture
def stop_stand_ins(tmp_path):
    yield
    path = tmp_path / "pids"
    for pid in path.read_text().split() if path.exists() else []:
        try:
            os.killpg(os.getpgid(int(pid)), signal.SIGKILL)  # the supervisor loop's session with it
        except ProcessLookupError:
            pass


def bundle_metrics(tmp_path, flags=("--storage.tsdb.retention.time=15d",), rules: str | None = None) -> Path:
    """The bundle's metrics/ files (infra/render/bundle.py metrics_files) under tmp_path/current."""
    current = tmp_path / "current" / "metrics"
    current.mkdir(parents=True, exist_ok=True)
    (current / "prometheus.yml").write_text(prometheus.prometheus_config())
    (current / "rules.yml").write_text(rules or prometheus.alert_rules())
    (current / "prometheus.args").write_text("".join(f"{f}\n" for f in flags))
    return current


def bundle_python(tmp_path) -> None:
    """The bundle's Python beside its metrics files, as every bundle has it (a GPU node's step asks hpcc_node.dcgm)."""
    current = tmp_path / "current"
    current.mkdir(exist_ok=True)
    for package in ("hpcc_contract", "hpcc_node"):
        if not (current / package).exists():
            (current / package).symlink_to(ROOT / package)


def run_step(tmp_path, env, ctx, script: str):
    if not (tmp_path / "current" / "metrics").exists():
        bundle_metrics(tmp_path)
    bundle_python(tmp_path)
    head = f"{preamble(tmp_path)}{STUB_FAIL}HPCC_CURRENT={tmp_path}/current\nHPCC_OS=ubuntu-22.04\n"
    return private_run([*COMMON, "metrics"], head + script, ctx, env, **WRITES)


def test_node_exporter_starts_once_on_the_nodes_address_and_restarts_when_its_arguments_change(fake, stop_stand_ins):
    tmp_path, bin_dir, env = fake
    stand_ins(tmp_path, bin_dir)
    ctx = ctx_for(tmp_path, metrics=True)
    script = "step_metrics; step_metrics; sleep 1; HPCC_IP=10.0.0.7; step_metrics; sleep 4\n"
    out = run_step(tmp_path, env, ctx, script)
    assert out.returncode == 0, out.stdout + out.stderr
    seen = wait_starts(tmp_path, "prometheus-node-exporter", 2)
    assert len(seen) == 2, seen  # once for the two runs with the same arguments, once more for the new address
    assert seen[0].split() == [f"--web.listen-address=10.0.0.6:{metrics.NODE_EXPORTER_PORT}", *NODE_EXPORTER_FLAGS]
    assert f"--collector.textfile.directory={metrics.TEXTFILE_DIR}" in seen[0].split()
    assert seen[1].split()[0] == f"--web.listen-address=10.0.0.7:{metrics.NODE_EXPORTER_PORT}"
    assert not starts(tmp_path, "prometheus")  # a compute node runs no Prometheus


def test_the_head_runs_prometheus_with_the_bundles_configuration_on_its_own_address(fake, stop_stand_ins):
    tmp_path, bin_dir, env = fake
    stand_ins(tmp_path, bin_dir)
    flags = tuple(prometheus.prometheus_flags("15d", "80GB"))
    bundle_metrics(tmp_path, flags)
    ctx = ctx_for(tmp_path, role="head", metrics=True)
    config = f"{prometheus.CONFIG_PATH}"
    script = f"step_metrics; step_metrics; cat {config} >{tmp_path}/config-copy\n"
    out = run_step(tmp_path, env, ctx, script)
    assert out.returncode == 0, out.stdout + out.stderr
    seen = wait_starts(tmp_path, "prometheus", 1)
    assert seen == [" ".join([*flags, prometheus.listen_flag("10.0.0.6")])]
    assert (tmp_path / "config-copy").read_text() == prometheus.prometheus_config()
    assert len(wait_starts(tmp_path, "prometheus-node-exporter", 1)) == 1
    assert "grafana: skipped (no systemd here)" in out.stdout + out.stderr  # the box: no systemd, no Grafana


def test_with_observability_off_the_step_starts_nothing(fake, stop_stand_ins):
    tmp_path, bin_dir, env = fake
    stand_ins(tmp_path, bin_dir)
    out = run_step(tmp_path, env, ctx_for(tmp_path, metrics=False), "step_metrics; sleep 1\n")
    assert out.returncode == 0, out.stdout + out.stderr
    assert not starts(tmp_path, "prometheus-node-exporter") and not starts(tmp_path, "prometheus")


def test_a_bundle_with_other_metrics_files_restarts_prometheus_with_them_and_the_same_ones_do_nothing(
    fake, stop_stand_ins
):
    """What the head's agent runs after a bundle brings other metrics files (hpcc_node/agent_metrics.py): the step
    again, from the new bundle's files. The same files leave Prometheus running; a new retention restarts it."""
    tmp_path, bin_dir, env = fake
    stand_ins(tmp_path, bin_dir)
    old = tuple(prometheus.prometheus_flags("15d", "80GB"))
    new = tuple(prometheus.prometheus_flags("30d", "80GB"))
    current = bundle_metrics(tmp_path, old)
    ctx = ctx_for(tmp_path, role="head", metrics=True)
    rules = prometheus.alert_rules().replace("for: 5m", "for: 7m")
    script = (
        "step_metrics; sleep 1; step_metrics; sleep 1\n"
        f"printf '%s\\n' {' '.join(new)} >{current}/prometheus.args\n"
        f"cat >{current}/rules.yml <<'RULES'\n{rules}RULES\n"
        f"step_metrics; sleep 3; cat {prometheus.RULES_PATH} >{tmp_path}/rules-copy\n"
    )
    out = run_step(tmp_path, env, ctx, script)
    assert out.returncode == 0, out.stdout + out.stderr
    seen = wait_starts(tmp_path, "prometheus", 2)
    assert seen == [
        " ".join([*old, prometheus.listen_flag("10.0.0.6")]),
        " ".join([*new, prometheus.listen_flag("10.0.0.6")]),
    ]
    assert (tmp_path / "rules-copy").read_text() == rules


def test_the_head_script_takes_apply_metrics_and_a_compute_script_does_not(tmp_path):
    from infra.render.userdata import render  # why: the whole role script, rendered as the bundle holds it

    head = render(ctx_for(tmp_path, role="head", metrics=True))
    compute = render(ctx_for(tmp_path, role="compute", metrics=True))
    assert "apply-metrics) apply_metrics ;;" in head and "apply_metrics()" in head
    assert "apply-metrics" not in compute
