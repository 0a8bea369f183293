"""Slurm on the nodes: the head's slurm.conf of fixed CLOUD ranges per node group (hpcc_node/slurm.py, rendered by
the slurm step's shell functions), which changes only with a group's size limit, never with the membership; the
real slurmctld of this machine (Debian 12: Slurm 22.05) reads it (the box runs the daemons: tests/box/)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from hpcc_contract import groups as groups_format
from hpcc_node import slurm
from infra.facts.slurm import SLURMD_TIMEOUT_SECONDS, SlurmNode
from tests.render.bootstrap_shell import context, run
from tests.render.test_bootstrap_steps import COMMON

ROOT = Path(__file__).resolve().parents[2]
NODE = "CPUs=96 Boards=1 SocketsPerBoard=2 CoresPerSocket=24 ThreadsPerCore=2 RealMemory=380000 Gres=gpu:8"
P5 = SlurmNode(cpus=192, sockets_per_board=1, cores_per_socket=96, threads_per_core=2, real_memory_mib=2000000, gpus=8)
C6I = SlurmNode(cpus=4, sockets_per_board=1, cores_per_socket=2, threads_per_core=2, real_memory_mib=7000, gpus=0)


def groups_json(*groups: tuple) -> str:
    return groups_format.dumps(
        [
            {"name": n, "instance_type": t, "count": c, "max_count": m, "slurm": s.group_fields() if s else None}
            for n, t, c, m, s in groups
        ]
    )


def head_ctx(tmp_path, **changes):
    return context(
        "p5-llm-head",
        log_path=str(tmp_path / "bootstrap.log"),
        scheduler="slurm",
        slurm_node=NODE,
        slurm_gpus=8,
        **changes,
    )


def head_conf(tmp_path, groups: str, extra: str = "") -> list[str]:
    (tmp_path / "groups.json").write_text(groups)
    script = (
        f"HPCC_PY_PATH={ROOT}\nHPCC_NAMES=(head gpu-000)\nHPCC_HOSTS=(10.0.0.5 10.0.0.6)\n"
        f"hostname() {{ echo ip-10-0-0-5; }}\n{extra}slurm_conf {tmp_path}/groups.json"
    )
    out = run(COMMON + ["identify", "health", "slurm"], script, head_ctx(tmp_path))
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_the_heads_slurm_conf_has_a_cloud_range_and_a_partition_per_group_the_gpu_one_the_default(tmp_path):
    lines = head_conf(
        tmp_path,
        groups_json(
            ("gpu", "p5.48xlarge", 4, 0, P5), ("cpu", "c6i.xlarge", 1100, 0, C6I), ("spare", "c6i.xlarge", 0, 0, C6I)
        ),
        "HPCC_SLURM_CGROUP=0\n",
    )
    assert "SlurmctldHost=ip-10-0-0-5(10.0.0.5)" in lines
    assert (
        "SlurmctldParameters=enable_configless,cloud_reg_addrs" in lines
        and "CommunicationParameters=NoAddrCache" in lines
    )
    assert [line for line in lines if line.startswith("NodeName=")] == [
        f"NodeName=gpu-[000-003] State=CLOUD Feature=gpu {P5.attributes()}",
        f"NodeName=cpu-[000-999],cpu-[1000-1099] State=CLOUD Feature=cpu {C6I.attributes()}",
    ]  # spare: 0 slots
    assert [line for line in lines if line.startswith("PartitionName=")] == [
        "PartitionName=gpu Nodes=gpu-[000-003] Default=YES MaxTime=INFINITE State=UP",
        "PartitionName=cpu Nodes=cpu-[000-999],cpu-[1000-1099] MaxTime=INFINITE State=UP",
        "PartitionName=all Nodes=ALL MaxTime=INFINITE State=UP",
    ]
    assert "SuspendExcNodes=gpu-[000-003],cpu-[000-999],cpu-[1000-1099]" in lines and "SuspendTime=INFINITE" in lines
    assert "GresTypes=gpu" in lines and "TreeWidth=65533" in lines and "ProctrackType=proctrack/linuxproc" in lines
    assert not any("NodeAddr" in line for line in lines)  # the controller and the registrations set addresses
    assert "ReturnToService=1" in lines  # a node set DOWN (by the controller or a person) stays down on registering
    # the health checks' lines (health.sh.j2), one SchedulerParameters (Slurm keeps the last of a repeated key)
    assert (
        "HealthCheckProgram=/usr/local/sbin/hpcc-healthcheck" in lines and "Prolog=/usr/local/sbin/hpcc-prolog" in lines
    )
    assert [line for line in lines if line.startswith("SchedulerParameters=")] == [
        "SchedulerParameters=nohold_on_prolog_fail"
    ]
    # a dead node is NOT_RESPONDING within a 40 s ping (SlurmdTimeout/3), not Slurm's default 100 s
    assert f"SlurmdTimeout={SLURMD_TIMEOUT_SECONDS}" in lines
    fast = head_conf(tmp_path, groups_json(("gpu", "p5.48xlarge", 4, 0, P5)), "HPCC_SLURMD_TIMEOUT=30\n")
    odd = head_conf(tmp_path, groups_json(("gpu", "p5.48xlarge", 4, 0, P5)), "HPCC_SLURMD_TIMEOUT='5; x'\n")
    assert "SlurmdTimeout=30" in fast and f"SlurmdTimeout={SLURMD_TIMEOUT_SECONDS}" in odd


def test_slurm_conf_follows_the_size_limits_only(tmp_path):
    """A count change within max_count, or any membership, leaves it as it is; a new limit changes it."""
    base = head_conf(tmp_path, groups_json(("gpu", "p5.48xlarge", 4, 8, P5)))
    assert (
        head_conf(
            tmp_path,
            groups_json(("gpu", "p5.48xlarge", 6, 8, P5)),
            "HPCC_NAMES=(head gpu-000 gpu-003)\nHPCC_HOSTS=(10.0.0.5 10.0.0.9 10.0.0.8)\n",
        )
        == base
    )
    assert head_conf(tmp_path, groups_json(("gpu", "p5.48xlarge", 9, 8, P5))) != base


def test_a_group_without_a_slurm_definition_takes_the_settings_and_gres_follows_each_gpu_group(tmp_path):
    groups = groups_json(("gpu", "p5.48xlarge", 2, 0, None), ("cpu", "c6i.xlarge", 2, 0, C6I))
    lines = head_conf(tmp_path, groups)
    assert f"NodeName=gpu-[000-001] State=CLOUD Feature=gpu {NODE}" in lines
    (tmp_path / "g.json").write_text(groups)
    out = run(
        COMMON + ["identify", "health", "slurm"],
        f"HPCC_PY_PATH={ROOT}\ngroup_lines gres {tmp_path}/g.json",
        head_ctx(tmp_path),
    )
    assert out.stdout.splitlines() == ["NodeName=gpu-[000-001] Name=gpu File=/dev/nvidia[0-7]"], out.stderr


@pytest.mark.parametrize(
    "version,lines",
    [
        (
            "slurm-wlm 21.08.5",
            ["SlurmctldParameters=enable_configless,cloud_reg_addrs", "CommunicationParameters=NoAddrCache"],
        ),
        (
            "slurm-wlm 22.05.8",
            ["SlurmctldParameters=enable_configless,cloud_reg_addrs", "CommunicationParameters=NoAddrCache"],
        ),
        ("slurm 23.11.4", ["SlurmctldParameters=enable_configless"]),  # both removed: Slurm's own behaviour now
        ("slurm 24.05.1", ["SlurmctldParameters=enable_configless"]),
        ("", ["SlurmctldParameters=enable_configless,cloud_reg_addrs", "CommunicationParameters=NoAddrCache"]),
    ],
)
def test_the_cloud_parameters_follow_the_slurm_version(version, lines):
    assert slurm.cloud_parameters(version) == lines


def test_the_groups_slurm_fields_render_back_to_the_programs_node_attributes():
    for node in (P5, C6I):
        assert slurm.node_attributes(node.group_fields()) == node.attributes()
    assert slurm.hostlist("gpu", 1) == "gpu-[000-000]" and slurm.hostlist("gpu", 1000) == "gpu-[000-999]"
    assert slurm.hostlist("gpu", 4096) == "gpu-[000-999],gpu-[1000-4095]"


def test_every_name_the_controller_gives_is_in_its_groups_range():
    from hpcc_contract.names import node_name

    def expand(hostlist: str) -> list[str]:
        out = []
        for part in re.findall(r"([a-z0-9]+)-\[(\d+)-(\d+)\]", hostlist):
            prefix, lo, hi = part
            out += [f"{prefix}-{i:0{len(lo)}d}" for i in range(int(lo), int(hi) + 1)]
        return out

    assert expand(slurm.hostlist("gpu", 1200)) == [node_name("gpu", i) for i in range(1200)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(
    not shutil.which("slurmctld") or os.geteuid() != 0, reason="needs this machine's slurmctld, as root"
)
def test_this_machines_slurmctld_reads_the_generated_slurm_conf(tmp_path):
    """Slurm 22.05 (Debian 12) takes every line: the CLOUD ranges, cloud_reg_addrs, NoAddrCache, PrivateData=cloud,
    SuspendExcNodes. It runs in the foreground from a private directory and is stopped after it reports ready."""
    lines = head_conf(
        tmp_path,
        groups_json(("gpu", "p5.48xlarge", 4, 0, P5), ("cpu", "c6i.xlarge", 1100, 0, C6I)),
        "HPCC_SLURM_CGROUP=0\n",
    )
    state = tmp_path / "state"
    state.mkdir()
    local = {
        "SlurmctldHost": f"{socket.gethostname()}(127.0.0.1)",
        "SlurmUser": "root",
        "StateSaveLocation": str(state),
        "SlurmctldPidFile": str(tmp_path / "ctld.pid"),
        "SlurmctldLogFile": str(tmp_path / "ctld.log"),
        "SlurmctldPort": str(free_port()),
        "AuthType": "auth/none" if Path("/usr/lib/x86_64-linux-gnu/slurm-wlm/auth_none.so").exists() else "auth/munge",
        "MpiDefault": "none",
    }
    conf = [f"{k}={local[k]}" if "=" in line and (k := line.split("=", 1)[0]) in local else line for line in lines]
    (tmp_path / "slurm.conf").write_text("\n".join(conf) + "\n")
    (tmp_path / "gres.conf").write_text("NodeName=gpu-[000-003] Name=gpu File=/dev/nvidia[0-7]\n")
    proc = subprocess.Popen(
        ["slurmctld", "-D", "-c", "-f", str(tmp_path / "slurm.conf")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "SLURM_CONF": str(tmp_path / "slurm.conf")},
    )
    try:
        deadline = time.time() + 30
        log = ""
        while time.time() < deadline and proc.poll() is None:
            time.sleep(0.5)
            log = (tmp_path / "ctld.log").read_text() if (tmp_path / "ctld.log").exists() else ""
            if "Running as primary controller" in log or "fatal" in log:
                break
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0]
    log = (tmp_path / "ctld.log").read_text() if (tmp_path / "ctld.log").exists() else out
    assert "Running as primary controller" in log and "fatal" not in log.lower(), log[-3000:]
    errors = [
        line
        for line in log.splitlines()
        if re.search(r"error: .*(slurm\.conf|Parse|invalid|unrecognized)", line, re.I) and "MailProg" not in line
    ]  # this machine has no mail program
    assert not errors and "preparing for 3 partitions" in log, log[-3000:]


def test_a_gpu_job_without_a_partition_lands_on_gpu_nodes_never_on_cpu_ones():
    """The default partition (issue 32): the first group with GPUs, wherever it is listed; `all` on a cluster
    without GPUs (all of its nodes are CPU nodes) or whose groups are all GPU nodes of one type, and never a mixed
    default."""
    conf_lines, default_partition = slurm.conf_lines, slurm.default_partition

    def groups(*gs):
        return groups_format.loads(groups_json(*gs))

    def defaults(*gs):
        return [line.split()[0] for line in conf_lines(groups(*gs)) if " Default=YES" in line]

    cpu_first = (("cpu", "c6i.xlarge", 8, 0, C6I), ("gpu", "p5.48xlarge", 4, 0, P5), ("gpu2", "p5.48xlarge", 2, 0, P5))
    assert defaults(*cpu_first) == ["PartitionName=gpu"]
    assert defaults(("cpu", "c6i.xlarge", 8, 0, C6I), ("cpu2", "c6i.xlarge", 2, 0, C6I)) == ["PartitionName=all"]
    # an empty GPU group has no partition: the next GPU group is the default, never the CPU one
    assert defaults(
        ("cpu", "c6i.xlarge", 8, 0, C6I), ("gpu", "p5.48xlarge", 0, 0, P5), ("big", "p5.48xlarge", 1, 0, P5)
    ) == ["PartitionName=big"]
    # a group without its own Slurm definition takes the settings' node line, GPUs included
    assert (
        default_partition(
            groups(("cpu", "c6i.xlarge", 2, 0, C6I), ("gpu", "p5.48xlarge", 2, 0, None)),
            default_node="CPUs=192 RealMemory=2000000 Gres=gpu:8",
        )
        == "gpu"
    )
    assert default_partition(groups(("cpu", "c6i.xlarge", 0, 0, C6I))) is None
    # GPU groups of one type are one pool (a Capacity Block group beside an On-Demand one): `all`; of two types, the
    # first; one group alone is its own partition
    assert defaults(("cb", "p5.48xlarge", 4, 0, P5), ("od", "p5.48xlarge", 2, 0, P5)) == ["PartitionName=all"]
    assert defaults(("p5", "p5.48xlarge", 4, 0, P5), ("p4", "p4d.24xlarge", 2, 0, P5)) == ["PartitionName=p5"]
    assert defaults(("gpu", "p5.48xlarge", 4, 0, P5)) == ["PartitionName=gpu"]


def test_a_membership_apply_reads_no_munge_key_the_node_already_has(tmp_path):
    """The key is read at boot; an apply (HPCC_AGENT=1) on a node that has it reads no secret (issue 38: one
    Secrets Manager call per node per membership change), and one without it still reads it."""
    from tests.render.test_bootstrap_steps import STUB_FAIL, ctx_for, preamble

    key, reads = tmp_path / "munge.key", tmp_path / "reads"
    key.write_text("k" * 1024)
    script = (
        preamble(tmp_path) + STUB_FAIL + f'from_head() {{ echo "$1" >>{reads}; return 1; }}\n'
        f"HPCC_MUNGE_KEY={key}\nHPCC_AGENT=1\nmunge_key; echo \"rc=$?\"\n"
    )
    ctx = ctx_for(tmp_path, scheduler="slurm")
    out = run(COMMON + ["identify", "health", "slurm"], script, ctx)
    assert out.returncode == 0 and "rc=0" in out.stdout and not reads.exists(), out.stdout + out.stderr
    key.unlink()
    out = run(COMMON + ["identify", "health", "slurm"], script, ctx)
    assert "FAIL: could not read" in out.stdout and reads.read_text().split() == ["hpcc/llm/munge-key"]
