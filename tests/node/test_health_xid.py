"""The Xid check: kernel-log lines parsed in every form the driver and the log sources print, and classified by
NVIDIA's Xid catalog as shipped (hpcc_node/health/xid_catalog.json), read here as data, not copied."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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


# -- where Xids come from (issue 33, findings 3 and 8) ----------------------------------------------------------

XID79 = "NVRM: Xid (PCI:0000:53:00): 79, pid=0, GPU has fallen off the bus."


def record(priority: int, seq: int, message: str) -> bytes:
    """One /dev/kmsg record: `priority,sequence,microseconds,flags;message`, then its dictionary lines."""
    return f"{priority},{seq},{seq * 1000},-;{message}\n SUBSYSTEM=pci\n".encode()


def test_only_the_kernels_own_records_are_read_for_xids():
    """The kernel gives a record written to /dev/kmsg from user space the user facility (1) whatever priority it
    asks for; syslog's kernel facility (what rsyslog files in kern.log) reaches no kmsg record at all."""
    records = [
        record(4, 10, XID79),
        record(12, 11, XID79 + " (forged, user facility)"),
        record(8 + 2, 12, "NVRM: Xid (PCI:0000:54:00): 48, forged at a kernel level, user facility"),
        b"garbage without a header\n",
        record(6, 13, "usb 1-1: new device"),
    ]
    lines, last = xid.kernel_messages(records, -1)
    assert lines == [XID79, "usb 1-1: new device"] and last == 13
    assert xid.kernel_messages(records, 10) == (["usb 1-1: new device"], 13)  # read once


def test_the_kmsg_source_reads_each_boot_from_its_start_and_each_record_once():
    boot, buffer = ["boot-1"], [record(4, 1, "an old line")]
    source = xid.KmsgSource(lambda: boot[0], read=lambda path: list(buffer))
    start = source.end()
    assert start == "boot-1:1"
    buffer.append(record(4, 2, XID79))
    lines, at = source.since(start)
    assert lines == [XID79] and at == "boot-1:2" and source.since(at)[0] == []
    boot[0], buffer[:] = "boot-2", [record(4, 0, XID79)]  # rebooted: numbers start again, a Xid before the agent
    assert source.since(at)[0] == [XID79]


def test_a_missing_or_unreadable_source_is_unknown_never_ok(tmp_path):
    """Issue 33, finding 8: no kernel log is no evidence of health (Amazon Linux 2023 has no kern.log at all)."""
    missing = xid.KmsgSource(lambda: "b", path=str(tmp_path / "no-kmsg"))
    result, position = xid.source_check(missing, "b:5", CATALOG)
    assert (result.status, position) == ("unknown", "b:5") and "no kernel log" in result.evidence
    result, _ = xid.source_check(xid.StandinSource(str(tmp_path / "absent")), None, CATALOG)
    assert result.status == "unknown"


def test_a_stand_in_others_could_write_is_not_read(tmp_path):
    standin = tmp_path / "kern.log"
    standin.write_text(f"kernel: {XID79}\n")
    assert xid.source_check(xid.StandinSource(str(standin)), "0", CATALOG)[0].action == "down"
    standin.chmod(0o666)
    result, _ = xid.source_check(xid.StandinSource(str(standin)), "0", CATALOG)
    assert result.status == "unknown" and "writable by others than root" in result.evidence
    standin.chmod(0o644)
    link = tmp_path / "link"
    link.symlink_to(standin)
    assert "not a regular file" in xid.source_check(xid.StandinSource(str(link)), "0", CATALOG)[0].evidence


KMSG_WRITABLE = os.geteuid() == 0 and os.access(xid.KMSG, os.R_OK | os.W_OK)


@pytest.mark.skipif(not KMSG_WRITABLE, reason="needs root and this machine's /dev/kmsg")
def test_on_this_kernel_a_xid_written_from_user_space_is_not_a_kernel_record():
    """The real /dev/kmsg: root writes a Xid line asking for the kernel facility (`<0>`, `<4>`); the kernel files
    it under the user facility, and the check does not read it. A user other than root cannot write at all."""
    source = xid.KmsgSource(lambda: "this-boot")
    start = source.end()
    text = f"NVRM: Xid (PCI:0000:53:00): 79, pid=0, forged by hpcc's test (issue 33, {os.urandom(6).hex()})"
    fd = os.open(xid.KMSG, os.O_WRONLY)
    try:
        os.write(fd, f"<0>{text}\n".encode())
        os.write(fd, f"<4>{text}\n".encode())
    finally:
        os.close(fd)
    ours = [r for r in xid.read_kmsg() if text.encode() in r]
    assert len(ours) == 2 and all(xid.kmsg_record(r)[0] == 1 for r in ours)  # the user facility
    result, _ = xid.source_check(source, start, CATALOG)
    assert result.status == "ok", result
    nobody = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            sys.executable,
            "-c",
            f"import os; os.open({xid.KMSG!r}, os.O_WRONLY)",
        ],
        capture_output=True,
        text=True,
    )
    assert nobody.returncode != 0 and "PermissionError" in nobody.stderr
