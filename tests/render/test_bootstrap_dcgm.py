"""The metrics step's dcgm-exporter on a GPU node (templates/steps/metrics.sh.j2 metrics_dcgm), run for real in a
private mount namespace without systemd: the stand-in exporter the box names (HPCC_DCGM_EXPORTER) started once with
hpcc's counters file, the host engine, the node's address and the job map, NODE_NAME its node; a DCGM hpcc has no
verified exporter for installs nothing and says so; a CPU node runs none. And the role script's apply-dcgm, which a GPU
node's agent runs when a new bundle answers otherwise (hpcc_node/agent_dcgm.py): a node that booted on a DCGM its
bundle did not pair gets the exporter once a bundle pairs it, and a second run changes nothing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from hpcc_contract import dcgm, metrics
from hpcc_node.agent_dcgm import dcgm_due
from tests.render.bootstrap_fixtures import tool
from tests.render.test_bootstrap_behaviour import STUB_FAIL, preamble, private_run
from tests.render.test_bootstrap_metrics import (  # noqa: F401
    WRITES,
    bundle_metrics,
    run_step,
    stand_ins,
    starts,
    stop_stand_ins,
    wait_starts,
)
from tests.render.test_bootstrap_steps import COMMON, ctx_for

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


def unpaired_contract(tmp_path: Path) -> Path:
    """The contract of a bundle from before DCGM 4.7's pairing: PAIRED without 4.7.0 and 4.7.1."""
    old = tmp_path / "old-contract"
    shutil.copytree(ROOT / "hpcc_contract", old, ignore=shutil.ignore_patterns("__pycache__"))
    text = (old / "dcgm.py").read_text()
    pairs = '    "4.7.0": "4.9.0",\n    "4.7.1": "4.9.0",\n'
    assert pairs in text
    (old / "dcgm.py").write_text(text.replace(pairs, ""))
    return old


def test_apply_dcgm_installs_the_exporter_a_new_bundle_pairs_the_nodes_dcgm_with_and_a_rerun_changes_nothing(
    fake,
    stop_stand_ins,  # noqa: F811
):
    """The node boots on DCGM 4.7.0 under a bundle that pairs it with nothing: no exporter, and a record that says so.
    The new bundle pairs it with 4.9.0: the agent's decision (dcgm_due) on that record is to apply, and apply-dcgm
    installs 4.9.0, holds it and starts the exporter; after it the record is the new bundle's answer, and a second
    apply-dcgm installs, writes and restarts nothing."""
    tmp_path, bin_dir, env = fake
    stand_ins(tmp_path, bin_dir)
    bundle_metrics(tmp_path)
    current = tmp_path / "current"
    (current / "hpcc_node").symlink_to(ROOT / "hpcc_node")
    (current / "hpcc_contract").symlink_to(unpaired_contract(tmp_path))
    versions = f"*4-core*) printf 1:4.7.0-1 ;; *-exporter*) cat {tmp_path}/exporter-version ;; *) exit 1 ;;"
    tool(bin_dir, "dpkg-query", f'case "$*" in {versions} esac\n')
    stub = exporter_stand_in(tmp_path, bin_dir)  # what the package installs as /usr/bin/dcgm-exporter
    installs = f"printf 4.9.0-1 >{tmp_path}/exporter-version; install -m 0755 {stub} /usr/bin/dcgm-exporter"
    tool(bin_dir, "apt-get", f'echo "$*" >>{tmp_path}/apt\ncase "$*" in *" install "*) {installs} ;; esac\n')
    tool(bin_dir, "apt-mark", f'echo "$*" >>{tmp_path}/apt\n')
    node = "HPCC_NODE=compute-001 HPCC_INSTANCE_ID=i-0abc HPCC_IP=10.0.0.6 HOSTS_VERSION=7"
    record = dcgm.APPLIED_PATH
    script = (
        f"step_metrics; cp {record} {tmp_path}/record-boot\n"
        f"ln -sfn {ROOT}/hpcc_contract {current}/hpcc_contract\n"  # the new bundle
        f"printf '%s\\n' {node} >/etc/hpcc/node\n"
        f"(apply_dcgm); cp {record} {tmp_path}/record-applied; sleep 1\n"
        f"echo RERUN >>{tmp_path}/bootstrap.log; (apply_dcgm); cp {record} {tmp_path}/record-again; sleep 3\n"
    )
    head = f"{preamble(tmp_path)}{STUB_FAIL}HPCC_CURRENT={current}\nHPCC_OS=debian-12\n"
    ctx = ctx_for(tmp_path, metrics=True)
    writes = {**WRITES, "overlay": [*WRITES["overlay"], "/usr/bin"]}  # the package's /usr/bin/dcgm-exporter
    out = private_run([*COMMON, "identify", "os", "sync", "metrics"], head + script, ctx, env, **writes)
    log = (tmp_path / "bootstrap.log").read_text() if (tmp_path / "bootstrap.log").exists() else ""
    assert out.returncode == 0, out.stdout + out.stderr + log
    booted = (tmp_path / "record-boot").read_text()
    assert "exporter=none" in booted and "DCGM '1:4.7.0-1' has no dcgm-exporter hpcc verified" in out.stdout
    assert dcgm_due("compute", 8, True, booted) == (
        "this bundle pairs DCGM 1:4.7.0-1 with dcgm-exporter 4.9.0, the node applied none"
    )
    applied = (tmp_path / "record-applied").read_text()
    assert "dcgm=1:4.7.0-1 exporter=4.9.0 " in applied and dcgm_due("compute", 8, True, applied) is None
    apt = (tmp_path / "apt").read_text().splitlines()
    assert [line for line in apt if " install " in line] == [
        f"-o DPkg::Lock::Timeout=600 install -y -q --allow-change-held-packages {dcgm.EXPORTER_PACKAGE}=4.9.0*"
    ]
    assert apt.count(f"hold {dcgm.EXPORTER_PACKAGE}") == 2  # held by each apply
    seen = wait_starts(tmp_path, "dcgm-exporter", 1)
    assert seen == [
        f"NODE_NAME=compute-001 -f {dcgm.COUNTERS_PATH} -r {dcgm.HOSTENGINE} -a 10.0.0.6:{metrics.DCGM_EXPORTER_PORT} "
        f"--hpc-job-mapping-dir {dcgm.JOB_MAP_DIR}"
    ]
    assert (tmp_path / "record-again").read_text() == applied
    assert "dcgm-exporter 4.9.0 for DCGM 1:4.7.0-1" in log and "applied the dcgm-exporter part of bundle" in log
    rerun = log.split("RERUN", 1)[1]
    assert "wrote " not in rerun and "started dcgm-exporter" not in rerun, rerun  # the rerun changed nothing
    assert "applied the dcgm-exporter part of bundle" in rerun
