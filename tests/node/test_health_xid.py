"""The Xid check: kernel-log lines parsed in every form the driver and the log sources print, and classified by
NVIDIA's Xid catalog as shipped (hpcc_node/health/xid_catalog.json), read here as data, not copied."""

from __future__ import annotations

import json

import pytest

from hpcc_node.health import xid
from hpcc_node.health.verdict import XID

CATALOG = xid.load_catalog()


def line(n: int, text: str = "pid=1234, name=python, stand-in text", bus: str = "PCI:0000:53:00") -> str:
    return f"Nov 24 03:12:09 compute-007 kernel: [ 8123.456789] NVRM: Xid ({bus}): {n}, {text}"


def test_the_catalog_names_its_source_and_date_and_holds_the_rows_hpcc_relies_on():
    data = json.load(open(xid.CATALOG_PATH))
    assert data["source"] == "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
    assert data["read"] and data["transcription"]
    assert CATALOG[79]["immediate"] == "RESTART_BM" and CATALOG[13]["immediate"] == "RESTART_APP"
    assert all(set(row) == {"mnemonic", "description", "immediate", "investigatory"} for row in CATALOG.values())
    # every bucket the catalog uses either has a rule or is knowingly left `unknown`
    used = {row["immediate"] for row in CATALOG.values()}
    assert {"RESTART_APP", "RESET_GPU", "RESTART_BM", "CONTACT_SUPPORT"} <= used & set(xid.BUCKET_RULES)


@pytest.mark.parametrize(
    "text",
    [
        "Sep 09 15:53:19 saturn kernel: NVRM: Xid (PCI:0000:10:00): 79, pid=0, GPU has fallen off the bus.",
        "[ 966.503025] NVRM: Xid (0000:10:00): 79, GPU has fallen off the bus.",  # older drivers: no PCI:
        "6,1234,5678901,-;NVRM: Xid (PCI:0000:10:00.0): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the "
        "bus.",
        "NVRM: Xid (PCI:0000:10:00): 79,GPU has fallen off the bus.",
    ],
)
def test_a_xid_line_is_read_from_any_log_source(text):
    event, is_xid = xid.parse_line(text)
    assert is_xid and event.xid == 79 and event.pci.startswith("0000:10:00") and "fallen off the bus" in event.text


def test_lines_that_are_not_xids_are_not_findings():
    lines = ["kernel: NVRM: GPU at PCI:0000:10:00: GPU-072931a9", "kernel: EXT4-fs (nvme0n1p1): mounted", ""]
    assert xid.scan(lines, CATALOG) == [] and xid.check(lines, CATALOG).status == "ok"


def test_an_unreadable_nvrm_xid_line_is_unknown_never_a_pass_never_a_drain():
    result = xid.check(["kernel: NVRM: Xid (43, pid: 5678): ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR"], CATALOG)
    assert (result.status, result.action) == ("unknown", "none") and "unreadable" in result.evidence


def test_a_xid_missing_from_the_catalog_is_unknown():
    missing = max(CATALOG) + 1
    result = xid.check([line(missing)], CATALOG)
    assert (result.status, result.action) == ("unknown", "none") and f"Xid {missing}" in result.evidence


@pytest.mark.parametrize("n", [13, 31, 43, 45])
def test_application_class_xids_warn(n):
    result = xid.check([line(n)], CATALOG)
    assert (result.status, result.action, result.remedy) == ("warn", "none", "none")


@pytest.mark.parametrize("n, remedy", [(79, "reboot"), (48, "reset")])
def test_xid_79_and_48_take_the_node_down_with_the_xid_in_the_evidence(n, remedy):
    result = xid.check([line(n)], CATALOG)
    assert (result.status, result.action, result.remedy) == ("fail", "down", remedy)
    assert f"Xid {n} on PCI:0000:53:00" in result.evidence and result.failure_class == "health"


@pytest.mark.parametrize("n", [63, 64])
def test_row_remapping_xids_drain_and_reset_when_idle(n):
    result = xid.check([line(n)], CATALOG)
    assert (result.status, result.action, result.remedy) == ("fail", "drain", "reset")


def test_every_catalog_row_is_classified_by_its_bucket_rule():
    """Against the shipped data: a row follows its Xid rule, else its bucket's rule, else it is unknown."""
    for n, row in CATALOG.items():
        result = xid.classify(xid.XidEvent("0000:53:00", n, "t"), CATALOG)
        rule = xid.XID_RULES.get(n) or xid.BUCKET_RULES.get(row["immediate"])
        if rule is None:
            assert (result.status, result.action) == ("unknown", "none"), n
        else:
            assert (result.status, result.action, result.remedy) == (rule.status, rule.action, rule.remedy), n
        assert result.check == XID


def test_a_new_catalog_row_is_classified_without_a_code_change():
    catalog = dict(CATALOG)
    catalog[999] = {"mnemonic": "NEW_FAULT", "description": "New fault", "immediate": "RESTART_BM", "investigatory": ""}
    assert xid.check([line(999)], catalog).action == "down"


def test_the_worst_xid_decides_and_the_others_are_counted():
    result = xid.check([line(13), line(79), line(31)], CATALOG)
    assert result.action == "down" and "Xid 79" in result.evidence and "+2 more" in result.evidence


def test_new_lines_reads_only_what_was_appended_and_starts_over_after_a_rotation(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text(line(13) + "\n")
    first, offset = xid.new_lines(str(log), 0)
    with open(log, "a") as f:
        f.write(line(79) + "\n" + "partial line without newline")
    second, offset2 = xid.new_lines(str(log), offset)
    assert len(first) == 1 and len(second) == 1 and "79," in second[0]
    log.write_text(line(48) + "\n")  # rotated: shorter than the offset
    third, _ = xid.new_lines(str(log), offset2)
    assert len(third) == 1 and "48," in third[0]
    assert xid.new_lines(str(tmp_path / "missing"), 5) == ([], 0)
