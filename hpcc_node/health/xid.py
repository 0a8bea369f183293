"""GPU faults from the kernel log: `NVRM: Xid (PCI:0000:53:00): 79, pid=..., GPU has fallen off the bus.`

Each Xid is classified by NVIDIA's Xid catalog (xid_catalog.json, transcribed from
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), by its "Resolution Bucket (Immediate
Action)": RESTART_APP, RESET_GPU, RESTART_BM (reboot), CONTACT_SUPPORT, ... The rules below are per bucket,
not per Xid, so a new catalog row is classified without a code change; the few Xids whose bucket is a
workflow or says less than hpcc must do are listed with why. A Xid missing from the catalog, a bucket without
a rule, or an NVRM Xid line this parser cannot read is `unknown`: a warning, never a pass, never a drain.

Where the lines come from (KmsgSource, StandinSource below): only from a source no unprivileged process can
write. /var/log/kern.log is not one: rsyslog files there any syslog datagram with the kernel facility, which any
local user can send (`logger -p kern.crit`), and Amazon Linux 2023 has no rsyslog at all. The kernel's own ring
buffer, /dev/kmsg, is: a record's facility is the kernel's (0) only when the kernel logged it, since a write to
/dev/kmsg (root's alone: mode 0644) is given the user facility unless it names another (kernel Documentation,
ABI/testing/dev-kmsg; printk's devkmsg_write). Every supported image (the Ubuntu DLAMIs, Amazon Linux 2023) has it.
A source that is missing or unreadable is `unknown`, never a pass.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import replace
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Tuple

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


def events(lines: Iterable[str]) -> List[XidEvent]:
    """The readable Xid events of these lines, in log order (the health series count them: series.py)."""
    return [e for e in (parse_line(line)[0] for line in lines) if e is not None]


def check(lines: Iterable[str], catalog: Dict[int, dict]) -> CheckResult:
    """The xid check's one result: the worst Xid seen in these lines (the caller passes the new lines only)."""
    found = scan(lines, catalog)
    if not found:
        return ok(XID, "no Xid in the kernel log")
    top = worst(found)
    more = len(found) - 1
    return replace(top, evidence=f"{top.evidence} (+{more} more Xid line(s))") if more else top


class SourceError(OSError):
    """The kernel-log source cannot be read (missing, unreadable, or a stand-in others could write)."""


KMSG = "/dev/kmsg"
KERNEL_FACILITY = 0  # LOG_KERN: syslog(3); a kmsg record's priority is facility * 8 + level


def kmsg_record(record: bytes) -> Optional[Tuple[int, int, str]]:
    """(facility, sequence number, message) of one /dev/kmsg record, `prio,seq,time,flags[,...];message` then
    continuation lines starting with a space (Documentation/ABI/testing/dev-kmsg); None when it is not one."""
    head, sep, rest = record.partition(b";")
    fields = head.split(b",")
    if not sep or len(fields) < 4 or not fields[0].isdigit() or not fields[1].isdigit():
        return None
    message = rest.split(b"\n", 1)[0].decode("utf-8", "replace")
    return int(fields[0]) >> 3, int(fields[1]), message


def kernel_messages(records: Iterable[bytes], after: int) -> Tuple[List[str], int]:
    """The kernel's own messages (facility 0) with a sequence number above `after`, and the highest number read."""
    lines, last = [], after
    for record in records:
        parsed = kmsg_record(record)
        if parsed is None:
            continue
        facility, seq, message = parsed
        if seq > after and facility == KERNEL_FACILITY:
            lines.append(message)
        last = max(last, seq)
    return lines, last


def read_kmsg(path: str = KMSG) -> List[bytes]:
    """Every record the ring buffer holds, oldest first: one read(2) a record, EAGAIN at the end, EPIPE where
    records were overwritten while reading (dev-kmsg)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise SourceError(f"{path}: {e.strerror or e}") from None
    out = []
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                return out
            except BrokenPipeError:
                continue
            except OSError as e:
                raise SourceError(f"{path}: {e.strerror or e}") from None
            if not record:
                return out
            out.append(record)
    finally:
        os.close(fd)


class KmsgSource:
    """The kernel's ring buffer. A position is `<boot id>:<sequence number>`: the numbers start again at each
    boot, so a position of another boot reads the new boot's buffer from its start (a Xid logged after a reboot,
    before the agent ran, is still read)."""

    def __init__(self, boot_id: Callable[[], str], path: str = KMSG, read: Callable[[str], List[bytes]] = read_kmsg):
        self.boot_id, self.path, self.read = boot_id, path, read

    def describe(self) -> str:
        return f"the kernel's ring buffer ({self.path}, kernel records only)"

    def _after(self, position: Optional[str]) -> int:
        boot, _, seq = (position or "").rpartition(":")
        return int(seq) if boot == self.boot_id() and seq.lstrip("-").isdigit() else -1

    def end(self) -> str:
        return f"{self.boot_id()}:{kernel_messages(self.read(self.path), -1)[1]}"

    def since(self, position: Optional[str]) -> Tuple[List[str], str]:
        lines, last = kernel_messages(self.read(self.path), self._after(position))
        return lines, f"{self.boot_id()}:{last}"


def standin_problem(path: str) -> str:
    """Why a stand-in kernel log may not be read ("" when it may): it is the Xid check's whole evidence, so it must
    be a regular file only root (or the checks' own user, in tests) can write."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"{path}: {e.strerror or e}"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
        return f"{path} is writable by others than root (owner uid {st.st_uid}, mode {st.st_mode & 0o777:o})"
    return ""


class StandinSource:
    """A test harness's stand-in for the kernel log (the box's `inject-xid` appends driver lines to it), named by
    health.env's XID_STANDIN, which only the bootstrap writes and only when its environment asks for one
    (HPCC_XID_STANDIN: the box sets it, nothing on EC2 does; the bootstrap creates it empty). A position is a byte
    offset. Missing, like /dev/kmsg missing, it is no evidence: `unknown`."""

    def __init__(self, path: str):
        self.path = path

    def describe(self) -> str:
        return f"the stand-in kernel log {self.path} (XID_STANDIN)"

    def end(self) -> str:
        problem = standin_problem(self.path)
        if problem:
            raise SourceError(problem)
        return str(os.path.getsize(self.path))

    def since(self, position: Optional[str]) -> Tuple[List[str], str]:
        problem = standin_problem(self.path)
        if problem:
            raise SourceError(problem)
        lines, offset = new_lines(self.path, int(position) if (position or "").isdigit() else 0)
        return lines, str(offset)


def source_check(
    source,
    position: Optional[str],
    catalog: Dict[int, dict],
    seen: Callable[[List[XidEvent]], None] = lambda found: None,
) -> Tuple[CheckResult, Optional[str]]:
    """The xid check over what the source logged since `position`, and the new position; `unknown` (the position
    kept) when the source cannot be read: no kernel log is no evidence of health. `seen` gets the Xid events read."""
    try:
        lines, new = source.since(position)
    except SourceError as e:
        return unknown(XID, f"no kernel log to read Xids from: {e}"), position
    seen(events(lines))
    return check(lines, catalog), new


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
