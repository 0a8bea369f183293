"""The metrics step's dcgm-exporter on a GPU node (templates/steps/metrics.sh.j2 metrics_dcgm), run for real in a
private mount namespace without systemd: the stand-in exporter the box names (HPCC_DCGM_EXPORTER) started once with
hpcc's counters file, the host engine, the node's address and the job map, NODE_NAME its node; a DCGM hpcc has no
verified exporter for installs nothing and says so; a CPU node runs none."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hpcc_contract import dcgm, metrics
from tests.render.bootstrap_fixtures import tool
from tests.render.test_bootstrap_metrics import run_step, stand_ins, starts, stop_stand_ins, wait_starts  # noqa: F401
from tests.render.test_bootstrap_steps import ctx_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a private mount namespace needs root")
ROOT = Path(__file__).resolve().parent.parent.parent


def bundle(tmp_path: Path) -> None:
    """The bundle's Python beside the metrics files (the step asks hpcc_node.dcgm)."""
    current = tmp_path / "current"
    current.mkdir(exist_ok=True)
    for package in ("hpcc_contract", "hpcc_node"):
        (current / package).symlink_to(ROOT / package)


def exporter_stand_in(tmp_path: Path, bin_dir: Path) -> Path:
    tool(
        bin_dir,
        "fake-dcgm-exporter",
        f'echo "NODE_NAME=$NODE_NAME $*" >>{tmp_path}/dcgm-exporter.starts\n'
        f"echo $$ >>{tmp_path}/pids\nexec sleep 600\n",
    )
    return bin_dir / "fake-dcgm-exporter"


def test_a_gpu_node_runs_the_exporter_once_with_hpccs_counters_and_the_job_map(fake, stop_stand_ins):  # noqa: F811
    tmp_path, bin_dir, env = fake
    stand_ins(tmp_path, bin_dir)
    bundle(tmp_path)
    env = {**env, "HPCC_DCGM_EXPORTER": str(exporter_stand_in(tmp_path, bin_dir))}
    script = (
        f"step_metrics; step_metrics; cp {dcgm.COUNTERS_PATH} {tmp_path}/csv; "
        f"[ -d {dcgm.JOB_MAP_DIR} ] && touch {tmp_path}/map-dir; sleep 1\n"
    )
    out = run_step(tmp_path, env, ctx_for(tmp_path, metrics=True), script)
    assert out.returncode == 0, out.stdout + out.stderr
    seen = wait_starts(tmp_path, "dcgm-exporter", 1)
    assert seen == [
        f"NODE_NAME=compute-001 -f {dcgm.COUNTERS_PATH} -r {dcgm.HOSTENGINE} -a 10.0.0.6:{metrics.DCGM_EXPORTER_PORT} "
        f"--hpc-job-mapping-dir {dcgm.JOB_MAP_DIR}"
    ]
    assert (tmp_path / "csv").read_text() == dcgm.COUNTERS_CSV
    assert (tmp_path / "map-dir").exists()


def test_a_dcgm_without_a_verified_exporter_installs_nothing_and_says_so(fake, stop_stand_ins):  # noqa: F811
    tmp_path, bin_dir, env = fake
    stand_ins(tmp_path, bin_dir)
    bundle(tmp_path)
    tool(bin_dir, "dpkg-query", "printf '%s' '1:4.8.0-1'\n")
    tool(bin_dir, "apt-get", f'echo "$*" >>{tmp_path}/apt\n')
    out = run_step(tmp_path, env, ctx_for(tmp_path, metrics=True), "step_metrics\n")
    assert out.returncode == 0, out.stdout + out.stderr
    log = out.stdout + out.stderr
    assert "DCGM '1:4.8.0-1' has no dcgm-exporter hpcc verified" in log, log
    assert not (tmp_path / "apt").exists() and not starts(tmp_path, "dcgm-exporter")


def test_a_paired_dcgm_gets_its_exporter_release_installed_and_held(fake, stop_stand_ins):  # noqa: F811
    tmp_path, bin_dir, env = fake
    stand_ins(tmp_path, bin_dir)
    bundle(tmp_path)
    tool(bin_dir, "dpkg-query", 'case "$*" in *4-core*) printf 1:4.6.0-1 ;; *) exit 1 ;; esac\n')
    tool(bin_dir, "apt-get", f'echo "$*" >>{tmp_path}/apt\n')
    tool(bin_dir, "apt-mark", f'echo "$*" >>{tmp_path}/apt\n')
    out = run_step(tmp_path, env, ctx_for(tmp_path, metrics=True), "step_metrics\n")
    assert out.returncode == 0, out.stdout + out.stderr
    apt = (tmp_path / "apt").read_text()
    assert "--allow-change-held-packages datacenter-gpu-manager-exporter=4.8.3*" in apt, apt
    assert apt.splitlines()[-1] == "hold datacenter-gpu-manager-exporter"
    assert "dcgm-exporter 4.8.3 for DCGM 1:4.6.0-1" in out.stdout + out.stderr


def test_a_cpu_node_runs_no_exporter(fake, stop_stand_ins):  # noqa: F811
    tmp_path, bin_dir, env = fake
    stand_ins(tmp_path, bin_dir)
    bundle(tmp_path)
    env = {**env, "HPCC_DCGM_EXPORTER": str(exporter_stand_in(tmp_path, bin_dir)), "HPCC_HEALTH_GPUS": "0"}
    out = run_step(tmp_path, env, ctx_for(tmp_path, metrics=True), "step_metrics; sleep 1\n")
    assert out.returncode == 0, out.stdout + out.stderr
    assert not starts(tmp_path, "dcgm-exporter")
