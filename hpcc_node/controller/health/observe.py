"""What the health rules read from Slurm besides node states: jobs (for requeue) and reservations (spares), from
`scontrol show jobs --oneliner` and `scontrol show reservation --oneliner` (scontrol(1): one record a line,
`Key=value` fields; node lists in Slurm's hostlist form `gpu-[000-003,007]`; times in the controller host's local
time as `YYYY-MM-DDTHH:MM:SS`, or `Unknown`/`None` while a job runs). Parsing is pure; the reads are injected.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import replace
from typing import Callable, Dict, FrozenSet, List, Tuple

from ..model import SlurmJob, Snapshot

_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z:/]*)=")
JOBS = ["scontrol", "show", "jobs", "--oneliner"]
RESERVATIONS = ["scontrol", "show", "reservation", "--oneliner"]


def fields(line: str) -> Dict[str, str]:
    marks = list(_FIELD.finditer(line))
    return {
        m.group(1): line[m.end() : (marks[k + 1].start() if k + 1 < len(marks) else len(line))].strip()
        for k, m in enumerate(marks)
    }


def hostnames(hostlist: str) -> FrozenSet[str]:
    """`gpu-[000-002,007],cpu-001` -> each name; zero padding kept as written (Slurm's own hostlist rule)."""
    out: List[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", hostlist or ""):
        m = re.fullmatch(r"(.*)\[([^\]]*)\](.*)", part)
        if not m:
            if part and part != "(null)":
                out.append(part)
            continue
        for rng in m.group(2).split(","):
            lo, _, hi = rng.partition("-")
            for i in range(int(lo), int(hi or lo) + 1):
                out.append(f"{m.group(1)}{i:0{len(lo)}d}{m.group(3)}")
    return frozenset(out)


def _when(value: str, parse: Callable[[str], float]) -> float:
    try:
        return parse(value)
    except ValueError:
        return 0.0  # Unknown, None: not ended


def local_time(value: str) -> float:
    return time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%S"))


def jobs(text: str, parse_time: Callable[[str], float] = local_time) -> Tuple[SlurmJob, ...]:
    out = []
    for line in text.splitlines():
        f = fields(line)
        if "JobId" not in f:
            continue
        restarts = f.get("Restarts", "0")
        out.append(
            SlurmJob(
                f["JobId"].split()[0],
                f.get("JobState", "").split()[0] if f.get("JobState") else "",
                hostnames(f.get("NodeList", "")),
                int(restarts) if restarts.isdigit() else 0,
                _when(f.get("EndTime", ""), parse_time),
                f.get("Requeue", "1") == "1",
                f.get("Reason", ""),
                _when(f.get("EligibleTime", ""), parse_time),
                f.get("JobName", ""),
            )
        )
    return tuple(out)


def reservations(text: str) -> Dict[str, FrozenSet[str]]:
    out = {}
    for line in text.splitlines():
        f = fields(line)
        if "ReservationName" in f:
            out[f["ReservationName"].split()[0]] = hostnames(f.get("Nodes", ""))
    return out


def report_fields(doc: dict) -> dict:
    """A status body's health fields for model.Report (the node agent writes them: hpcc_node/health/service.py)."""
    deep = doc.get("deepChecked", 0)
    return {
        **{k: str(doc.get(k, ""))[:40] for k in ("check", "action", "remedy")},
        "deep_checked": float(deep) if isinstance(deep, (int, float)) and not isinstance(deep, bool) else 0.0,
    }


def with_slurm_extras(
    snap: Snapshot, read: Callable[[List[str]], str], parse_time: Callable[[str], float] = local_time
) -> Snapshot:
    """The snapshot with Slurm's jobs and reservations, where the cluster runs Slurm."""
    if snap.slurm is None:
        return snap
    return replace(snap, jobs=jobs(read(JOBS), parse_time), reservations=reservations(read(RESERVATIONS)))


def scontrol_read(argv: List[str]) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60).stdout
