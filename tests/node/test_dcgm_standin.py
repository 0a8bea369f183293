"""The box's stand-in dcgm-exporter (tests/box/standins/dcgm-exporter) with hpcc's counters file: an exposition the
real promtool accepts, every row of the file a family, dcgm-exporter 4.8.2's labels in its order, the hpc_job label
there while the job map names a job and gone after the Epilog's unmapping, the state knobs the box's tests turn (a
GPU's utilisation, violation counters that rise)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from hpcc_contract import dcgm as contract
from hpcc_node import dcgm

STANDIN = Path(__file__).resolve().parents[1] / "box" / "standins" / "dcgm-exporter"
LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def exporter(tmp_path):
    csv = tmp_path / "hpcc-counters.csv"
    csv.write_text(contract.COUNTERS_CSV)
    state, jobs = tmp_path / "state", tmp_path / "map"
    state.mkdir()
    (state / "gpus").write_text("2\n")
    port = free_port()
    args = ["-f", str(csv), "-r", contract.HOSTENGINE, "-a", f"127.0.0.1:{port}", "--hpc-job-mapping-dir", str(jobs)]
    env = {**os.environ, "HPCC_STANDIN_STATE": str(state), "NODE_NAME": "gpu-001"}
    proc = subprocess.Popen([sys.executable, str(STANDIN), *args], env=env, stdout=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/metrics"

    def scrape() -> str:
        deadline = time.time() + 10
        while True:
            try:
                return urllib.request.urlopen(url, timeout=5).read().decode()
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.1)

    yield scrape, state, jobs
    proc.kill()
    proc.wait()


def series(text: str, name: str) -> list[tuple[list[tuple[str, str]], str]]:
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{"):
            body, value = line[len(name) + 1 :].rsplit("} ", 1)
            out.append((re.findall(r'([A-Za-z_]+)="([^"]*)"', body), value))
    return out


def test_the_exposition_passes_promtool_with_every_row_a_family_and_4_8_2s_labels(exporter):
    scrape, _, _ = exporter
    text = scrape()
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    # promtool's lint (style, not syntax) asks counters to end in _total, names not to say `counter` and labels in
    # snake_case, which the real exporter's field names and modelName do not: only those are allowed
    style = (
        'counter metrics should have "_total" suffix',
        "metric name should not include type 'counter'",
        "label names should be written in 'snake_case'",
    )
    problems = [line for line in (check.stdout + check.stderr).splitlines() if line.strip()]
    assert problems and all(any(s in line for s in style) for line in problems), problems
    assert "error" not in check.stdout + check.stderr
    assert set(re.findall(r"^# TYPE (\S+) ", text, re.M)) == set(contract.SERIES)
    for name, (kind, help_text) in contract.SERIES.items():
        assert f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n" in text
        found = series(text, name)
        assert [dict(labels)["gpu"] for labels, _ in found] == ["0", "1"], name
        assert [k for k, _ in found[0][0]] == LABELS
    assert dict(series(text, contract.GPU_UTIL)[0][0])["Hostname"] == "gpu-001"


def test_a_mapped_gpu_carries_each_jobs_id_until_the_epilog_unmaps_it(exporter):
    scrape, _, jobs = exporter
    dcgm.map_job(str(jobs), "41", [1])
    dcgm.map_job(str(jobs), "42", [1])
    found = series(scrape(), contract.GPU_UTIL)
    by_gpu = [(dict(labels)["gpu"], dict(labels).get(contract.JOB_LABEL)) for labels, _ in found]
    assert by_gpu == [("0", None), ("1", "41"), ("1", "42")]
    assert [k for k, _ in found[1][0]] == [*LABELS, contract.JOB_LABEL]
    dcgm.unmap_job(str(jobs), "41")
    dcgm.unmap_job(str(jobs), "42")
    assert contract.JOB_LABEL not in scrape()


def test_the_state_makes_a_gpu_busy_and_its_violation_counters_rise(exporter):
    scrape, state, _ = exporter
    (state / "gpu_util").write_text("1:97\n")
    (state / "thermal_violation").write_text("1:0.5\n")
    first = scrape()
    assert [v for _, v in series(first, contract.GPU_UTIL)] == ["0", "97"]
    time.sleep(1.0)
    second = scrape()
    before = [int(v) for _, v in series(first, contract.THERMAL_VIOLATION)]
    after = [int(v) for _, v in series(second, contract.THERMAL_VIOLATION)]
    assert after[0] == before[0] == 0 and after[1] - before[1] >= 0.4e9
    assert all(v == "0" for _, v in series(second, contract.POWER_VIOLATION))


def test_on_dcgm_4_7_names_it_serves_each_recorded_quantity_renamed_in_its_new_unit(exporter):
    """The box's 4.9 node: the names and units hpcc's recording rules read (hpcc_contract/dcgm.py RECORDED)."""
    scrape, state, _ = exporter
    (state / "gpu_util").write_text("1:50\n")
    legacy = scrape()
    (state / "dcgm_names").write_text("4.9\n")
    renamed = scrape()
    for q in contract.RECORDED:
        assert not series(renamed, q.legacy) and len(series(renamed, q.renamed)) == 2, q
    gauges = (contract.UTILIZATION, contract.MEMORY_USED, contract.POWER, contract.TEMPERATURE, contract.SM_CLOCK)
    for q in gauges:
        old = [q.in_base_units(float(v)) for _, v in series(legacy, q.legacy)]
        assert [float(v) for _, v in series(renamed, q.renamed)] == pytest.approx(old), q
    labels = dict(series(renamed, contract.UTILIZATION.renamed)[0][0])
    assert "DCGM_FI_SYSTEM_DRIVER_VERSION" in labels and "DCGM_FI_DRIVER_VERSION" not in labels
