"""The box's stand-ins (tests/box/standins/) print the real tools' formats: their outputs, switched per node by a
state directory, go through the real runner and parsers with the real check specs (hpcc_node/health/checks.py)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from hpcc_node.health import checks, verdict, xid
from hpcc_node.health.runner import Runner
from hpcc_node.health.verdict import BOOT_CHECKS, DCGM_DIAG, GPU_COUNT, GPU_MEMORY, GPU_RECOVERY, PROLOG_CHECKS

STANDINS = Path(__file__).resolve().parents[1] / "box" / "standins"
P5 = checks.NodeFacts(host="compute-000", gpus=8, dcgm_level=2, disk_min_free_gib=0)


class Node:
    """One node's stand-in state directory and the environment its checks run in."""

    def __init__(self, root: Path, name: str):
        self.state = root / name
        self.state.mkdir()
        self.env = {"PATH": f"{STANDINS}:{os.environ['PATH']}", "HPCC_STANDIN_STATE": str(self.state)}

    def set(self, **facts):
        for key, value in facts.items():
            (self.state / key).write_text(f"{value}\n")

    def run(self, names, facts=P5, timeout_s=None):
        results = Runner(env=self.env).run(checks.specs(names, facts, timeout_s))
        return {r.check: r for r in results}


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path, "compute-000")


def test_a_healthy_stand_in_node_passes_its_boot_checks(node):
    results = node.run(BOOT_CHECKS)
    assert set(results) == {GPU_COUNT, GPU_MEMORY, GPU_RECOVERY, DCGM_DIAG, verdict.DISK_FREE}  # no EFA, Neuron, mount
    assert all(r.status == "ok" for r in results.values()), results


def test_each_node_reads_its_own_state(tmp_path):
    a, b = Node(tmp_path, "compute-000"), Node(tmp_path, "compute-001")
    b.set(gpus=7)
    assert a.run(PROLOG_CHECKS)[GPU_COUNT].status == "ok"
    short = b.run(PROLOG_CHECKS)[GPU_COUNT]
    assert short.status == "fail" and "7 GPU(s) visible, the instance type has 8" in short.evidence


@pytest.mark.parametrize(
    "state, remedy, words",
    [
        ({"ecc": "2:1"}, "reset", "GPU 2 (00000000:55:00.0): 1 uncorrected ECC"),
        ({"remap_pending": "3"}, "reset", "GPU 3 (00000000:56:00.0): row remapping pending"),
        ({"remap_failed": "1"}, "replace", "GPU 1 (00000000:54:00.0): row remapping failed"),
    ],
)
def test_gpu_memory_faults_from_the_stand_in(node, state, remedy, words):
    node.set(**state)
    result = node.run([GPU_MEMORY])[GPU_MEMORY]
    assert (result.status, result.remedy) == ("fail", remedy) and words in result.evidence


def test_a_recovery_action_from_the_stand_in_drains_the_node(node):
    node.set(recovery="5:Drain and Reset")
    result = node.run(PROLOG_CHECKS)[GPU_RECOVERY]
    assert (result.status, result.action, result.remedy) == ("fail", "drain", "reset")
    assert "GPU 5 (00000000:58:00.0): recovery action Drain and Reset" in result.evidence


def test_a_gpu_off_the_bus_fails_every_nvidia_smi_check(node):
    node.set(off_bus=4)
    results = node.run(PROLOG_CHECKS)
    assert all(r.status == "fail" for r in results.values())
    assert "exit 15" in results[GPU_COUNT].evidence and "GPU is lost" in results[GPU_COUNT].evidence


@pytest.mark.parametrize(
    "state, status, words", [("fail:memory:3", "fail", "memory: GPU 3"), ("warn:pcie", "warn", "pcie")]
)
def test_dcgm_diagnostic_results_from_the_stand_in(node, state, status, words):
    node.set(dcgm=state)
    result = node.run([DCGM_DIAG])[DCGM_DIAG]
    assert result.status == status and words in result.evidence


def test_a_hung_tool_is_a_failure_within_the_timeout(node):
    node.set(hang="nvidia-smi")
    start = time.monotonic()
    results = node.run(PROLOG_CHECKS, timeout_s=0.5)
    assert time.monotonic() - start < 0.5 + 2.0
    assert all(r.status == "fail" and "no answer within 0.5 s" in r.evidence for r in results.values())


def test_an_injected_xid_is_read_from_the_kernel_log_source_and_takes_the_node_down(node):
    log = str(node.state / "kern.log")
    lines, offset = xid.new_lines(log, 0)
    assert lines == []
    subprocess.run([str(STANDINS / "inject-xid"), "79", "2"], env={**os.environ, **node.env}, check=True)
    lines, offset = xid.new_lines(log, offset)
    result = xid.check(lines, xid.load_catalog())
    assert (result.status, result.action) == ("fail", "down") and "Xid 79 on PCI:0000:55:00" in result.evidence
    assert xid.new_lines(log, offset)[0] == []  # read once


def test_the_stand_in_refuses_what_the_real_tool_refuses(node):
    out = subprocess.run(
        [str(STANDINS / "nvidia-smi"), "--query-gpu=index,bogus", "--format=csv"],
        env={**os.environ, **node.env},
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and 'Field "bogus" is not a valid field to query.' in out.stdout


def test_a_node_without_the_tools_fails_its_gpu_checks_saying_so(node):
    results = Runner(env={"PATH": "/usr/bin:/bin"}).run(checks.specs(PROLOG_CHECKS, P5))
    assert [r.evidence for r in results] == ["nvidia-smi missing on a GPU node"] * len(PROLOG_CHECKS)


def test_checks_a_node_does_not_have_are_not_run_and_unknown_names_are_refused():
    cpu = checks.NodeFacts(host="c", gpus=0, disk_min_free_gib=0)
    assert [s.name for s in checks.specs(BOOT_CHECKS, cpu)] == [verdict.DISK_FREE]
    with pytest.raises(ValueError, match="no check named"):
        checks.specs(["gpu_cuont"], cpu)
