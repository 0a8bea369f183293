"""The bootstrap's health step (templates/steps/health.sh.j2) run in bash against the box's stand-ins: the node's
facts written for the checks, a healthy node passes, a node short of a GPU fails with class health and the check's
reason in its status."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.render.bootstrap_shell import context, run
from tests.render.test_bootstrap_steps import COMMON, bodies, preamble

ROOT = Path(__file__).resolve().parents[2]
STANDINS = ROOT / "tests" / "box" / "standins"


def _run(tmp_path, env, **state):
    standin = tmp_path / "standin"
    standin.mkdir(exist_ok=True)
    for key, value in state.items():
        (standin / key).write_text(f"{value}\n")
    (tmp_path / "answers").write_text("0|\n")
    env = {
        **env,
        "PATH": f"{STANDINS}:{env['PATH']}",
        "HPCC_STANDIN_STATE": str(standin),
        "HPCC_HEALTH_ENV": str(tmp_path / "health.env"),
        "HPCC_HEALTH_VERDICT": str(tmp_path / "verdict"),
        "HPCC_HEALTH_STATE": str(tmp_path / "state"),
        "HPCC_CURRENT": str(ROOT),
        "HPCC_XID_STANDIN": str(standin / "kern.log"),
        "HPCC_HEALTH_DISK_MIN_FREE_GIB": "0",
    }
    ctx = context(log_path=str(tmp_path / "bootstrap.log"), efa_enabled=False)
    script = (
        preamble(tmp_path)
        + "HPCC_MOUNT_POINT=/nonexistent\nuse_step health\nstep_health\nflush_log\ntouch "
        + str(tmp_path / "passed")
        + "\n"
    )
    return run(COMMON + ["health"], script, ctx, env=env, timeout=120)


def test_a_healthy_node_passes_and_its_facts_are_written(fake):
    tmp_path, _, env = fake
    out = _run(tmp_path, env)
    assert out.returncode == 0 and (tmp_path / "passed").exists(), (tmp_path / "bootstrap.log").read_text()
    assert (tmp_path / "health.env").read_text() == (
        f"GPUS=8\nEFA_DEVICES=0\nDCGM_LEVEL=2\nDISK_MIN_FREE_GIB=0\nXID_STANDIN={tmp_path}/standin/kern.log\n"
        "SHARED_MOUNT=\n"
    )
    assert "[health] dcgm_diag: ok" in (tmp_path / "bootstrap.log").read_text()


def test_without_the_tests_override_the_facts_go_to_etc_hpcc_and_the_checks_read_them_there(fake):
    """The box's nodes set no HPCC_HEALTH_ENV: the default must reach the checks too (set -u)."""
    tmp_path, bin_dir, env = fake
    (bin_dir / "python3").write_text(f'#!/bin/sh\necho "checks read $HPCC_HEALTH_ENV" >>{tmp_path}/checked\n')
    (bin_dir / "python3").chmod(0o755)
    ctx = context(log_path=str(tmp_path / "bootstrap.log"), efa_enabled=False)
    script = (
        preamble(tmp_path) + f'write_file() {{ cat >"{tmp_path}/facts"; echo "$1" >"{tmp_path}/facts-path"; }}\n'
        "unset HPCC_HEALTH_ENV\nHPCC_MOUNT_POINT=/nonexistent\nuse_step health\nstep_health\n"
    )
    out = run(COMMON + ["health"], script, ctx, env={k: v for k, v in env.items() if k != "HPCC_HEALTH_ENV"})
    assert out.returncode == 0, out.stderr + (tmp_path / "bootstrap.log").read_text()
    assert (tmp_path / "facts-path").read_text() == "/etc/hpcc/health.env\n"
    assert (tmp_path / "checked").read_text() == "checks read /etc/hpcc/health.env\n"


def test_a_node_short_of_a_gpu_fails_with_class_health(fake):
    tmp_path, _, env = fake
    out = _run(tmp_path, env, gpus=7)
    assert out.returncode == 1 and not (tmp_path / "passed").exists()
    status = json.loads(bodies(tmp_path)[-1])  # its status object (status/<instance-arn>.json)
    assert (status["phase"], status["step"], status["class"], status["ok"]) == ("failed", "health", "health", False)
    assert status["message"] == "hpcc: gpu_count: 7 GPU(s) visible, the instance type has 8"


def test_the_heads_slurm_conf_carries_the_health_lines_and_nodes_get_the_scripts(tmp_path):
    from tests.render.test_bootstrap_slurm import P5, groups_json, head_conf, head_ctx

    lines = head_conf(tmp_path, groups_json(("gpu", "p5.48xlarge", 2, 0, P5)))
    assert {
        "HealthCheckProgram=/usr/local/sbin/hpcc-healthcheck",
        "HealthCheckNodeState=ANY,CYCLE",
        "Prolog=/usr/local/sbin/hpcc-prolog",
        "Epilog=/usr/local/sbin/hpcc-epilog",
        "PrologFlags=Alloc",
        "RebootProgram=/usr/local/sbin/hpcc-reboot",
        "SchedulerParameters=nohold_on_prolog_fail",
    } <= set(lines)
    first_node = next(i for i, line in enumerate(lines) if line.startswith("NodeName="))
    assert lines.index("Prolog=/usr/local/sbin/hpcc-prolog") < first_node  # beside the settings, before the ranges
    body = 'write_file() { cat >"$TMP/${1##*/}"; }\nimds() { return 1; }\nslurm_health_scripts'
    out = run(COMMON + ["health"], body, head_ctx(tmp_path), env={**os.environ, "TMP": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    prolog = (tmp_path / "hpcc-prolog").read_text()
    assert "exec python3 -m hpcc_node.health prolog" in prolog
    from hpcc_node.controller.health.act import DEEP_CHECK_PROGRAM  # the batch script of the spares' deep check

    assert "exec python3 -m hpcc_node.health deep" in (tmp_path / DEEP_CHECK_PROGRAM.rsplit("/", 1)[1]).read_text()
    # Slurm gives these no PATH: the script sets one that holds the DLAMI's and the EFA installer's tools
    got = (
        subprocess.run(
            ["env", "-i", "/bin/sh", "-c", prolog.replace("exec python3", "echo $PATH #")],
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .split(":")
    )
    assert {"/usr/bin", "/usr/local/bin", "/opt/amazon/efa/bin", "/opt/aws/neuron/bin"} <= set(got), got
    # outside EC2 (no IMDS, as in the box) the reboot program refuses: a namespace node never reboots its host
    assert "systemctl" not in (tmp_path / "hpcc-reboot").read_text()
    on_ec2 = run(
        COMMON + ["health"],
        body.replace("return 1", "echo i-0abc"),
        head_ctx(tmp_path),
        env={**os.environ, "TMP": str(tmp_path)},
    )
    assert on_ec2.returncode == 0 and "exec systemctl reboot" in (tmp_path / "hpcc-reboot").read_text()


def test_hpcc_torchrun_elastic_uses_the_rendezvous_so_a_spare_can_join(fake):
    from tests.render.bootstrap_fixtures import tool
    from tests.render.test_bootstrap_steps import helper

    tmp_path, bin_dir, env = fake
    tool(bin_dir, "ssh", f'echo "$*" >>{tmp_path}/ssh\n')
    (tmp_path / "hostfile").write_text("10.0.0.5 slots=8\n10.0.0.6 slots=8\n10.0.0.7 slots=8\n")
    script = helper(tmp_path, "hpcc-torchrun")
    env = {**env, "TORCHRUN": "torchrun"}
    ok = subprocess.run(
        [str(script), "--elastic", "2:3", "--max-restarts", "3", "train.py"], capture_output=True, text=True, env=env
    )
    assert ok.returncode == 0, ok.stderr
    runs = (tmp_path / "ssh").read_text().splitlines()
    assert len(runs) == 3 and len({r.split("--rdzv-id ")[1].split()[0] for r in runs}) == 1  # one rendezvous
    assert all(
        "exec torchrun --nnodes 2:3 --rdzv-backend c10d --rdzv-endpoint $MASTER_ADDR:$MASTER_PORT" in r
        and "--node-rank" not in r
        and r.endswith("--max-restarts 3 train.py ")
        for r in runs
    )
    for bad in ("3:2", "x", ""):
        out = subprocess.run([str(script), "--elastic", bad, "train.py"], capture_output=True, text=True, env=env)
        assert out.returncode == 2 and "--elastic takes MIN:MAX" in out.stderr


def test_boot_diag_level_is_checked_and_reaches_the_settings_only_when_not_the_default():
    from infra.render.node_settings import settings_value
    from tests.config.test_rules import problems
    from tests.facts.instance_data import MOTO_ACCOUNT, offline_facts
    from tests.render.bootstrap_cases import configs

    assert any(path.endswith("health.bootDiagLevel") for path, _ in problems(health__bootDiagLevel=5))
    stem, cfg = next(iter(configs()))
    assert "HEALTH_DIAG_LEVEL" not in settings_value(cfg.cluster, cfg.region, offline_facts(), MOTO_ACCOUNT)
    deep = cfg.cluster.model_copy(update={"health": cfg.cluster.health.model_copy(update={"boot_diag_level": 4})})
    assert "HEALTH_DIAG_LEVEL=4\n" in settings_value(deep, cfg.region, offline_facts(), MOTO_ACCOUNT)
