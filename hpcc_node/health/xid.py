"""GPU faults from the kernel log: `NVRM: Xid (PCI:0000:53:00): 79, pid=..., GPU has fallen off the bus.`

Each Xid is classified by NVIDIA's Xid catalog (xid_catalog.json, transcribed from
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), by its "Resolution Bucket (Immediate
Action)": RESTART_APP, RESET_GPU, RESTART_BM (reboot), CONTACT_SUPPORT, ... The rules below are per bucket,
not per Xid, so a new catalog row is classified without a code change; the few Xids whose bucket is a
workflow or says less than hpcc must do are listed with why. A Xid missing from the catalog, a bucket without
a rule, or an NVRM Xid line this parser cannot read is `unknown`: a warning, never a pass, never a drain.

Reading the log is the caller's (a path, `dmesg`, `journalctl -k`, /dev/kmsg): functions here take lines.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from typing import Dict, Iterable, List, NamedTuple, Optional, Tuple

from hpcc_node.health.verdict import XID, CheckResult, fail, ok, unknown, warn, worst

CATALOG_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "xid_catalog.json")

# The NVIDIA driver's line, after whatever the log source put in front (syslog host and tag, dmesg's
# `[ 966.503025]`, kmsg's `6,1234,5678,-;`). Older drivers print the bus without `PCI:`.
_XID_LINE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\): "
    r"(?P<xid>\d+),\s*(?P<text>.*?)\s*$"
)
_NVRM_XID = re.compile(r"NVRM: Xid\b")


class Rule(NamedTuple):
    status: str  # warn or fail
    action: str  # none, drain, down
    remedy: str  # none, reset, reboot, replace
    why: str


# Immediate-action buckets of the catalog -> what hpcc does. A fault that stops the running job sets the node
# DOWN (Slurm requeues the job); one that leaves it running drains.
BUCKET_RULES: Dict[str, Rule] = {
    "RESTART_APP": Rule("warn", "none", "none", "the application's fault; the GPU stays usable"),
    "CHECK_APP/CUDA": Rule("warn", "none", "none", "the application's fault; the GPU stays usable"),
    "IGNORE": Rule("warn", "none", "none", "the catalog says no action; recorded for the morning's status"),
    "WORKFLOW_XID_45": Rule("warn", "none", "none", "preemptive cleanup after another fault: the other Xid decides"),
    "RESET_GPU": Rule("fail", "down", "reset", "the GPU stopped serving the job; a reset may bring it back"),
    "RESTART_BM": Rule("fail", "down", "reboot", "the GPU is gone until the machine restarts"),
    "RESTART_VM": Rule("fail", "down", "reboot", "the GPU is gone until the machine restarts"),
    "WORKFLOW_XID_48": Rule(
        "fail", "down", "reset", "an uncorrectable ECC error killed the job; the row is remapped at the next GPU reset"
    ),
    "CONTACT_SUPPORT": Rule("fail", "down", "replace", "nothing on the node fixes it: a new instance does"),
    "CHECK_MECHANICALS": Rule("fail", "drain", "replace", "a hardware fault on the host: a new instance avoids it"),
}

# Xids whose catalog bucket says less than a cluster must do, each with why.
XID_RULES: Dict[int, Rule] = {
    63: Rule(
        "fail",
        "drain",
        "reset",
        "a row was marked for remapping, effective only after a GPU reset "
        "(NVIDIA, A100 GPU memory error management: the pending flag); the running job continues",
    ),
    64: Rule(
        "fail",
        "drain",
        "reset",
        "a row remapping failed (catalog: RESET_GPU, then CONTACT_SUPPORT); the "
        "running job continues, a recurrence after the reset replaces the node",
    ),
}


class XidEvent(NamedTuple):
    pci: str
    xid: int
    text: str


def load_catalog(path: str = CATALOG_PATH) -> Dict[int, dict]:
    with open(path) as f:
        data = json.load(f)
    return {int(k): v for k, v in data["xids"].items()}


def parse_line(line: str) -> Tuple[Optional[XidEvent], bool]:
    """(the event, whether the line is an NVRM Xid line at all). (None, True): a Xid line we cannot read."""
    if not _NVRM_XID.search(line):
        return None, False
    m = _XID_LINE.search(line)
    if not m:
        return None, True
    return XidEvent(m.group("pci"), int(m.group("xid")), m.group("text")), True


def classify(event: XidEvent, catalog: Dict[int, dict]) -> CheckResult:
    row = catalog.get(event.xid)
    where = f"Xid {event.xid} on PCI:{event.pci}"
    if row is None:
        return unknown(XID, f"{where} is not in NVIDIA's Xid catalog: {event.text}")
    bucket = row.get("immediate", "")
    rule = XID_RULES.get(event.xid) or BUCKET_RULES.get(bucket)
    name = row["description"] if row["description"] != "Unused" else row["mnemonic"]
    if rule is None:
        return unknown(XID, f"{where}: {name} (catalog {bucket or 'none'}, no hpcc rule): {event.text}")
    evidence = f"{where}: {name} (catalog {bucket or 'none'}): {event.text}"
    if rule.status == "warn":
        return warn(XID, evidence)
    return fail(XID, evidence, rule.action, rule.remedy)


def scan(lines: Iterable[str], catalog: Dict[int, dict]) -> List[CheckResult]:
    """One result per Xid line, in log order; unreadable NVRM Xid lines are `unknown`."""
    out = []
    for line in lines:
        event, is_xid = parse_line(line)
        if event is not None:
            out.append(classify(event, catalog))
        elif is_xid:
            out.append(unknown(XID, f"unreadable NVRM Xid line: {line.strip()[:160]}"))
    return out


def check(lines: Iterable[str], catalog: Dict[int, dict]) -> CheckResult:
    """The xid check's one result: the worst Xid seen in these lines (the caller passes the new lines only)."""
    found = scan(lines, catalog)
    if not found:
        return ok(XID, "no Xid in the kernel log")
    top = worst(found)
    more = len(found) - 1
    return replace(top, evidence=f"{top.evidence} (+{more} more Xid line(s))") if more else top


def new_lines(path: str, offset: int) -> Tuple[List[str], int]:
    """Lines appended to a log file since `offset` (bytes), and the new offset; a shorter file (rotated or
    truncated) is read from the start. The kernel-log source the agent and the box's stand-in share."""
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return [], 0
    if size < offset:
        offset = 0
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1  # a line still being written is read next time
    return data[:end].decode("utf-8", "replace").splitlines(), offset + end
