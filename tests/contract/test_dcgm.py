"""hpcc_contract/dcgm.py: the DCGM -> dcgm-exporter pairing, hpcc's counters file, and that only the head's recording
rules read DCGM's names, each quantity under its 4.8.x name (one that file makes the exporter serve) and its DCGM 4.7
one."""

from __future__ import annotations

import csv
import io
import re

import pytest

from hpcc_contract import dcgm, formats, metrics
from infra.ops import top
from infra.render import dashboards, prometheus


@pytest.mark.parametrize(
    ("installed", "exporter"),
    [
        ("1:4.5.3-1", "4.8.2"),
        ("1:4.6.0-1", "4.8.3"),
        ("4.6.0-1", "4.8.3"),
        ("4.6.1", "4.8.4"),
        ("1:4.6.1-2", "4.8.4"),
        (" 1:4.6.0-1\n", "4.8.3"),
        ("1:4.7.0-2", "4.9.0"),
        ("4.7.0-1", "4.9.0"),
        ("1:4.7.1-1", "4.9.0"),
    ],
)
def test_a_paired_dcgm_names_its_exporter_whatever_dpkg_adds_to_the_version(installed, exporter):
    assert dcgm.exporter_for(installed) == exporter


UNPAIRED = ["1:4.8.0-1", "4.7.2-1", "4.4.2-1", "1:3.3.9-1", "", "4.6", "x:4.6.0-1", "4.6.0;rm"]


@pytest.mark.parametrize("installed", UNPAIRED)
def test_a_dcgm_hpcc_has_no_verified_exporter_for_or_no_version_at_all_gets_none(installed):
    assert dcgm.exporter_for(installed) is None


def test_the_pairing_is_nvidias_tags():
    assert dcgm.PAIRED == {"4.5.3": "4.8.2", "4.6.0": "4.8.3", "4.6.1": "4.8.4", "4.7.0": "4.9.0", "4.7.1": "4.9.0"}
    assert all(re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", v) for v in [*dcgm.PAIRED, *dcgm.PAIRED.values()])


def _rows(text: str) -> list[list[str]]:
    """The file as dcgm-exporter's ReadCSVFile reads it: encoding/csv with '#' comments, each field trimmed."""
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [[field.strip() for field in row] for row in csv.reader(io.StringIO("\n".join(lines)))]


def test_the_counters_file_is_three_fields_a_row_of_known_types_stamped_with_its_format():
    rows = _rows(dcgm.COUNTERS_CSV)
    assert all(len(r) == 3 for r in rows), [r for r in rows if len(r) != 3]
    assert {kind for _, kind, _ in rows} <= {"gauge", "counter", "label"}
    assert all(metrics.valid_metric_name(name) and name.startswith("DCGM_FI_") for name, _, _ in rows)
    assert len({name for name, _, _ in rows}) == len(rows)
    assert dcgm.COUNTERS_CSV.splitlines()[0].startswith(f"# hpcc dcgm counters, format {formats.DCGM_COUNTERS} ")


def test_the_counters_are_the_4_8_defaults_plus_the_two_violation_counters_in_ns():
    rows = _rows(dcgm.COUNTERS_CSV)
    assert len(dcgm.DEFAULT_ROWS) == 26 and [r[0] for r in rows if r[1] == "label"] == ["DCGM_FI_DRIVER_VERSION"]
    assert len([r for r in dcgm.DEFAULT_ROWS if r[1] != "label"]) == 25
    assert rows[-2:] == [
        [dcgm.POWER_VIOLATION, "counter", "Throttling duration due to power constraints (in ns)."],
        [dcgm.THERMAL_VIOLATION, "counter", "Throttling duration due to thermal constraints (in ns)."],
    ]
    assert len(dcgm.SERIES) == 27 and dcgm.LABEL_ROWS == ("DCGM_FI_DRIVER_VERSION",)


def _dcgm_names(text: str) -> set[str]:
    return set(re.findall(r"\bDCGM_FI_[A-Z0-9_]+", text))


def test_only_the_recording_rules_read_dcgm_names_each_quantity_under_both_of_its_names():
    """Alerts, `hpcc top` and the dashboards read what the rules record; a record reads its quantity's 4.8.x name,
    which hpcc's counters file makes the exporter serve, and its DCGM 4.7 name, which no 4.8.x row has."""
    elsewhere = [a.expr for a in prometheus.alerts()] + list(top.QUERIES.values())
    elsewhere += [expr for _, _, expr in dashboards.panel_queries("gpu-000", "41")]
    assert not _dcgm_names(" ".join(elsewhere))
    for q in dcgm.RECORDED:
        assert _dcgm_names(prometheus.gpu_record(q)["expr"]) == {q.legacy, q.renamed}, q
        assert q.legacy in dcgm.SERIES and q.renamed not in dcgm.SERIES and q.renamed.startswith("DCGM_FI_DEV_")
    legacy = {q.legacy for q in dcgm.RECORDED}
    assert legacy >= {dcgm.POWER_VIOLATION, dcgm.THERMAL_VIOLATION, dcgm.GPU_UTIL, dcgm.FB_USED, dcgm.POWER_USAGE}
    records = [q.record for q in dcgm.RECORDED]
    assert len(set(records)) == len(records) and all(re.fullmatch(r"gpu:[a-z_]+:[a-z_]+", r) for r in records)


def test_the_node_side_names_are_paths_and_labels():
    assert dcgm.JOB_MAP_DIR.startswith("/run/") and dcgm.COUNTERS_PATH.startswith("/etc/dcgm-exporter/")
    assert metrics.valid_label_name(dcgm.JOB_LABEL) and dcgm.EXPORTER_UNIT == "nvidia-dcgm-exporter"
