"""The health agent's series (hpcc_contract/metrics.py SERIES, written to TEXTFILE_HEALTH): per check, whether it
passed and when it last ran; and the raw numbers the checks read and used to throw away after their verdict: Xids by
GPU and code (xid.py), uncorrected ECC errors and row remapping per GPU (nvidia-smi's query, gpu.py), EFA error and
byte counters per device (sysfs, devices.py). Read from what the checks already read; no verdict depends on it.

One writer: the agent's health thread (service.start), which holds the Xid counts in memory since it started (a
restarted agent starts them at 0 again: Prometheus' rate() and increase() take a counter's reset). The Slurm entry
points and the bootstrap's boot step run their own checks in other processes and write no series.

Label values: `gpu` is nvidia-smi's index where the GPU's PCI bus id is known from its last query, else the bus id
as the driver printed it; `device` is the EFA device's sysfs name; both are node-written text, escaped by
hpcc_node/metrics.py. Sizes on a p5 (8 GPUs, 32 EFA devices): 3 series a GPU, 8 an EFA device (6 error counters, rx
and tx bytes), 2 a check; a Xid adds one series per GPU and code seen (scripts/bench_series.py counts them).
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from hpcc_contract.metrics import TEXTFILE_HEALTH
from hpcc_node.health.verdict import CheckResult, parse_verdict, worst
from hpcc_node.health.xid import XidEvent
from hpcc_node.metrics import Sample, render, write_textfile

GpuRow = Tuple[str, str, Optional[int], Optional[bool], Optional[bool]]  # gpu.parse_query_rows: index, bus, ecc, ...
EfaCounters = Mapping[Tuple[str, str, str], int]  # devices.read_efa_counters: (device, port, counter) -> value
PASSED = ("ok", "warn")  # a warning leaves the node in service; unknown is never a pass (verdict.py)
ECC_KIND = "uncorrected_volatile"  # nvidia-smi's ecc.errors.uncorrected.volatile.total, the one the check reads
BYTE_DIRECTIONS = {"rx_bytes": "rx", "tx_bytes": "tx"}
_PCI = re.compile(r"^([0-9A-Fa-f]+):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.[0-7])?$")


def pci_key(bus_id: str) -> Optional[Tuple[int, int, int]]:
    """(domain, bus, device) of a PCI bus id, however it is spelled: nvidia-smi's `00000000:53:00.0`, the driver's
    Xid line `0000:53:00`."""
    m = _PCI.match(bus_id.strip())
    return (int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16)) if m else None


def per_device(counters: EfaCounters) -> Dict[Tuple[str, str], int]:
    """(device, counter) -> value summed over the device's ports (an EFA device has one: port 1)."""
    out: Dict[Tuple[str, str], int] = {}
    for (device, _port, name), value in counters.items():
        out[(device, name)] = out.get((device, name), 0) + value
    return out


class HealthSeries:
    """What the agent's checks saw since it started, as samples."""

    def __init__(self) -> None:
        self.checks: Dict[str, Tuple[bool, float]] = {}  # check -> (passed, when it last ran)
        self.xids: Dict[Tuple[str, int], int] = {}  # (PCI bus id as printed, Xid) -> events seen
        self.gpus: List[GpuRow] = []  # the last nvidia-smi query's rows
        self.efa_errors: Dict[Tuple[str, str], int] = {}
        self.efa_bytes: Dict[Tuple[str, str], int] = {}

    def saw_results(self, results: Sequence[CheckResult], at: float) -> None:
        by_check: Dict[str, List[CheckResult]] = {}
        for r in results:
            by_check.setdefault(r.check, []).append(r)
        for check, found in by_check.items():
            top = worst(found)
            self.checks[check] = (top is not None and top.status in PASSED, at)

    def seed(self, verdict_path: str) -> None:
        """Each check of the verdict file as of its time (no file, or a damaged one: nothing)."""
        try:
            with open(verdict_path) as f:
                v = parse_verdict(f.read())
        except (OSError, ValueError):
            return
        self.saw_results(v.results, v.written)

    def saw_xids(self, events: Iterable[XidEvent]) -> None:
        for e in events:
            self.xids[(e.pci, e.xid)] = self.xids.get((e.pci, e.xid), 0) + 1

    def saw_gpus(self, rows: Sequence[GpuRow]) -> None:
        if rows:
            self.gpus = list(rows)

    def saw_efa(self, errors: EfaCounters, moved: EfaCounters) -> None:
        self.efa_errors = per_device(errors)
        self.efa_bytes = per_device(moved)

    def gpu_label(self, bus_id: str) -> str:
        index = {pci_key(bus): i for i, bus, *_ in self.gpus}.get(pci_key(bus_id))
        return index if index is not None else bus_id

    def samples(self) -> List[Sample]:
        out = []
        for check, (passed, at) in self.checks.items():
            out.append(Sample("hpcc_health_check_ok", {"check": check}, 1 if passed else 0))
            out.append(Sample("hpcc_health_check_timestamp_seconds", {"check": check}, at))
        xids: Dict[Tuple[str, str], int] = {}
        for (bus, code), n in self.xids.items():  # two spellings of one GPU's bus id are one series
            key = (self.gpu_label(bus), str(code))
            xids[key] = xids.get(key, 0) + n
        out += [Sample("hpcc_gpu_xid_errors_total", {"gpu": g, "code": c}, n) for (g, c), n in xids.items()]
        for index, _bus, ecc, pending, failed in self.gpus:  # None: the GPU does not report it, no series
            if ecc is not None:
                out.append(Sample("hpcc_gpu_ecc_errors", {"gpu": index, "kind": ECC_KIND}, ecc))
            if pending is not None:
                out.append(Sample("hpcc_gpu_row_remap_pending", {"gpu": index}, int(pending)))
            if failed is not None:
                out.append(Sample("hpcc_gpu_row_remap_failed", {"gpu": index}, int(failed)))
        for (device, counter), value in self.efa_errors.items():
            out.append(Sample("hpcc_efa_errors_total", {"device": device, "counter": counter}, value))
        for (device, counter), value in self.efa_bytes.items():
            if counter in BYTE_DIRECTIONS:
                labels = {"device": device, "direction": BYTE_DIRECTIONS[counter]}
                out.append(Sample("hpcc_efa_bytes_total", labels, value))
        return out

    def write(self, directory: str) -> str:
        return write_textfile(directory, TEXTFILE_HEALTH, render(self.samples()))
