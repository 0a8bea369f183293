"""The health agent's series (hpcc_node/health/series.py, written by service.Monitor.run): after each run, node
_exporter's textfile holds what the fake devices reported (the box's nvidia-smi stand-in, a stand-in kernel log, an
EFA sysfs tree), each check's pass and time; no verdict changes for it, and a failed write stops no check."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from hpcc_contract import metrics
from hpcc_node.health import service
from hpcc_node.health.runner import Runner
from hpcc_node.health.verdict import PERIODIC_CHECKS, XID, node_verdict, ok, write_verdict
from tests.node.metrics_support import named, parse, promtool_check, value
from tests.node.test_health_service import STANDINS, Node

NOW = 1_700_000_000.0
EFA = ("rdmap16s27", "rdmap32s27")


def efa_sysfs(root: Path, values: dict[tuple[str, str], int]) -> None:
    """(device, counter) -> value, as the EFA driver serves them on port 1."""
    for (device, name), v in values.items():
        d = root / device / "ports" / "1" / "hw_counters"
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(f"{v}\n")


def counters(scale: int) -> dict[tuple[str, str], int]:
    names = ("rdma_read_wr_err", "rx_drops", "unresponsive_remote_events", "rx_bytes", "tx_bytes")
    return {(d, n): scale * (i + 1) * (j + 2) for i, d in enumerate(EFA) for j, n in enumerate(names)}


def inject(node: Node, xid: str, gpu: str) -> None:
    """The driver's Xid line for GPU `gpu` in the stand-in kernel log (its PCI bus: standin_state.bus_id)."""
    subprocess.run([str(STANDINS / "inject-xid"), xid, gpu], env=node.env, check=True)


class Agent:
    """The agent's monitor over `node` (GPUs from the stand-in, two EFA devices in a fake sysfs)."""

    def __init__(self, node: Node, metrics_dir: str | None, name: str = "a"):
        self.logged: list[str] = []
        self.efa = node.tmp / "sysfs"
        facts, standin = service.load_facts("gpu-001", node.env["HPCC_HEALTH_ENV"])
        self.monitor = service.Monitor(
            dataclasses.replace(facts, efa_devices=len(EFA)),
            standin,
            str(node.tmp / f"verdict-{name}"),
            str(node.tmp / f"state-{name}"),
            Runner(env=node.env),
            clock=lambda: NOW,
            efa_root=str(self.efa),
            boot_id_path=str(node.boot_id),
            metrics_dir=metrics_dir,
            log=self.logged.append,
        )


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path)
    efa_sysfs(tmp_path / "sysfs", counters(1))
    return n


def test_the_file_holds_what_the_devices_reported_and_each_checks_pass_and_time(node):
    (node.standin / "ecc").write_text("1:3,4:1\n")  # nvidia-smi's uncorrected ECC errors, by GPU index
    (node.standin / "remap_pending").write_text("2\n")
    (node.standin / "remap_failed").write_text("5\n")
    agent = Agent(node, str(node.tmp / "metrics"))
    agent.monitor.run(PERIODIC_CHECKS)  # the EFA counters' first read
    for xid, gpu in (("13", "3"), ("13", "3"), ("79", "0")):
        inject(node, xid, gpu)
    efa_sysfs(agent.efa, counters(1000))
    verdict = agent.monitor.run(PERIODIC_CHECKS)
    text = (node.tmp / "metrics" / metrics.TEXTFILE_HEALTH).read_text()
    got = parse(text)

    ecc = {"1": 3, "4": 1}
    for gpu in map(str, range(8)):
        assert value(got, "hpcc_gpu_ecc_errors", gpu=gpu, kind="uncorrected_volatile") == ecc.get(gpu, 0)
        assert value(got, "hpcc_gpu_row_remap_pending", gpu=gpu) == (gpu == "2")
        assert value(got, "hpcc_gpu_row_remap_failed", gpu=gpu) == (gpu == "5")
    # Xids by the GPU's index (the driver names its PCI bus, nvidia-smi's query maps it) and code
    assert {tuple(sorted(k)): v for k, v in named(got, "hpcc_gpu_xid_errors_total").items()} == {
        (("code", "13"), ("gpu", "3")): 2,
        (("code", "79"), ("gpu", "0")): 1,
    }
    for (device, name), v in counters(1000).items():
        if name.endswith("_bytes"):
            assert value(got, "hpcc_efa_bytes_total", device=device, direction=name[:2]) == v
        else:
            assert value(got, "hpcc_efa_errors_total", device=device, counter=name) == v
    by_check = {r.check: r.status for r in verdict.results}
    assert by_check["gpu_memory"] == "fail" and by_check["xid"] == "fail" and by_check["disk_free"] == "ok"
    for check, status in by_check.items():
        assert value(got, "hpcc_health_check_ok", check=check) == (status in ("ok", "warn")), check
        assert value(got, "hpcc_health_check_timestamp_seconds", check=check) == int(NOW)
    out = promtool_check(text)
    assert (out.returncode, out.stdout + out.stderr) == (0, ""), out.stdout + out.stderr


def test_xids_add_up_across_runs_and_a_gpu_no_query_lists_keeps_its_bus_id(node):
    agent = Agent(node, str(node.tmp / "metrics"))
    inject(node, "13", "3")
    agent.monitor.run(PERIODIC_CHECKS)
    inject(node, "13", "3")
    inject(node, "31", "9")  # past the 8 GPUs nvidia-smi lists: 0000:5c:00
    verdict = agent.monitor.run(PERIODIC_CHECKS)
    got = parse((node.tmp / "metrics" / metrics.TEXTFILE_HEALTH).read_text())
    assert {tuple(sorted(k)): v for k, v in named(got, "hpcc_gpu_xid_errors_total").items()} == {
        (("code", "13"), ("gpu", "3")): 2,
        (("code", "31"), ("gpu", "0000:5c:00")): 1,
    }
    # the application's Xids warn: the node stays in service, and the check counts as passed
    assert [r.status for r in verdict.results if r.check == XID] == ["warn"] and verdict.healthy
    assert value(got, "hpcc_health_check_ok", check=XID) == 1


def test_the_series_change_no_verdict(node):
    (node.standin / "remap_pending").write_text("2\n")
    written, silent = Agent(node, str(node.tmp / "metrics"), "a"), Agent(node, None, "b")
    inject(node, "48", "1")
    a, b = written.monitor.run(PERIODIC_CHECKS), silent.monitor.run(PERIODIC_CHECKS)
    assert a == b and not a.healthy
    assert Path(written.monitor.verdict_path).read_text() == Path(silent.monitor.verdict_path).read_text()
    assert list(node.tmp.rglob("*.prom")) == [node.tmp / "metrics" / metrics.TEXTFILE_HEALTH] and not silent.logged


def test_a_failed_write_is_logged_and_the_checks_go_on(node):
    blocked = node.tmp / "not-a-directory"
    blocked.write_text("")
    agent = Agent(node, str(blocked))
    node.inject("79")
    v = agent.monitor.run(PERIODIC_CHECKS)
    assert not v.healthy and "Xid 79" in Path(agent.monitor.verdict_path).read_text()
    assert len(agent.logged) == 1 and agent.logged[0].startswith(f"health series not written to {blocked}: ")
    assert agent.monitor.run(PERIODIC_CHECKS).status == "fail"  # and the next period runs as ever


def test_the_checks_of_the_last_verdict_are_kept_until_they_run_again(node):
    """The boot step's checks (the agent does not run them again this boot) stay in the file at their time."""
    verdict = node.tmp / "verdict-a"
    write_verdict(str(verdict), node_verdict([ok("gpu_count", "8 GPU(s)"), ok(XID)], 1000))
    agent = Agent(node, str(node.tmp / "metrics"))
    agent.monitor.run(PERIODIC_CHECKS)
    got = parse((node.tmp / "metrics" / metrics.TEXTFILE_HEALTH).read_text())
    assert value(got, "hpcc_health_check_ok", check="gpu_count") == 1
    assert value(got, "hpcc_health_check_timestamp_seconds", check="gpu_count") == 1000
    assert value(got, "hpcc_health_check_timestamp_seconds", check=XID) == int(NOW)  # ran since
