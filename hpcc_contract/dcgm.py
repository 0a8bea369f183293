"""dcgm-exporter on the GPU nodes (issue 34): which exporter release goes with the node's DCGM, the counters file hpcc
gives it, the unit-stable series hpcc records from either generation of its names, and where Slurm's Prolog tells it
which job runs on which GPU. Standard library only, like the rest of the contract: the program's recording and alert
rules, the dashboards and `hpcc top` take their DCGM names from here (infra/render/prometheus.py, dashboards.py,
infra/ops/top.py), the node side installs the exporter, writes COUNTERS_CSV and keeps the job map (hpcc_node/dcgm.py).

Pairing. "A DCGM Exporter release tag has the form `<dcgm-version>-<dcgm-exporter-version>`"
(https://docs.nvidia.com/datacenter/dcgm/latest/release-notes/index.html), and NVIDIA's install page says "Run DCGM
Exporter with the DCGM version paired with that exporter release"
(https://docs.nvidia.com/datacenter/dcgm/latest/installation/install-dcgm-exporter.html); the pairs below are NVIDIA's
tags and release notes (https://docs.nvidia.com/datacenter/dcgm/latest/release-notes/dcgm-exporter.html).

Two generations of names. Exporter 4.9.0 (DCGM 4.7, the DLAMIs' DCGM since September 2026) "renames the 23 default
and profiling-preset fields that DCGM 4.7 deprecates to their new DCGM 4.7 names", eleven of them with new units
(https://github.com/NVIDIA/dcgm-exporter/releases/tag/4.9.0), while DCGM keeps the old names "as deprecated aliases"
(https://docs.nvidia.com/datacenter/dcgm/latest/release-notes/changelog.html). hpcc's counters file keeps the names
of 4.8.x, which every paired DCGM resolves, and nothing downstream reads a DCGM name: recording rules turn each
quantity hpcc reads, under its old name or its DCGM 4.7 one, into one series in base units (RECORDED), so a cluster
whose nodes run both generations reads the same. A node whose DCGM is not in PAIRED runs no exporter and says so in
its log; its health checks and everything else are unaffected (README, "What cannot be checked here")."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from hpcc_contract import formats

# DCGM release -> the dcgm-exporter release paired with it (the package datacenter-gpu-manager-exporter's version:
# "RPM and Debian package versions identify the exporter version", the install page above).
PAIRED: Dict[str, str] = {
    "4.5.3": "4.8.2",
    "4.6.0": "4.8.3",
    "4.6.1": "4.8.4",
    # "tested with DCGM 4.7.0 and 4.7.1 and ships with DCGM 4.7.0" (4.9.0's release page). Its 4.7.1 caveat, a host
    # engine and a libdcgm of different 4.7 releases, cannot arise here: the exporter package uses the node's libdcgm,
    # from the same DCGM packages as its nv-hostengine.
    "4.7.0": "4.9.0",
    "4.7.1": "4.9.0",
}
DCGM_PACKAGE = "datacenter-gpu-manager-4-core"  # DCGM 4's core package, whose version the node reads (dpkg-query)
EXPORTER_PACKAGE = "datacenter-gpu-manager-exporter"
EXPORTER_UNIT = "nvidia-dcgm-exporter"  # the package's systemd unit; hpcc overrides its ExecStart in a drop-in
DCGM_UNIT = "nvidia-dcgm"  # nv-hostengine: the one host engine, shared by the exporter (-r) and `dcgmi diag`
HOSTENGINE = "localhost:5555"  # nv-hostengine's default address
COUNTERS_PATH = "/etc/dcgm-exporter/hpcc-counters.csv"
# What the metrics step last applied on a GPU node (hpcc_node/dcgm.py applied_record), read by its agent, which runs
# the step's dcgm part again when its own bundle would apply another (hpcc_node/agent_dcgm.py).
APPLIED_PATH = "/etc/hpcc/dcgm.applied"
# One file per GPU index, one job id a line (dcgm-exporter's README, "How to include HPC jobs in metric labels"),
# on tmpfs: a rebooted node runs no job.
JOB_MAP_DIR = "/run/hpcc/dcgm-job-map"
JOB_LABEL = "hpc_job"  # the label dcgm-exporter gives a mapped GPU's series (its transformation/const.go)
README_SECTION = "What cannot be checked here"

# dpkg's version: [epoch:]upstream[-revision] (deb-version(7)); DCGM's upstream starts with its release.
_DPKG = re.compile(r"^(?:[0-9]+:)?([0-9]+\.[0-9]+\.[0-9]+)(?:[.~+][0-9A-Za-z.~+]*)?(?:-[0-9A-Za-z.~+]+)?$")


def dcgm_release(version: str) -> Optional[str]:
    """`4.6.0` of dpkg's `1:4.6.0-1` (or of `4.6.0`); None when it is no DCGM version."""
    found = _DPKG.match(version.strip())
    return found.group(1) if found else None


def exporter_for(dcgm_version: str) -> Optional[str]:
    """The dcgm-exporter release paired with this DCGM (a dpkg version such as `1:4.6.0-1`), or None: hpcc has not
    verified an exporter for it, and the node runs none."""
    release = dcgm_release(dcgm_version)
    return PAIRED.get(release) if release else None


# hpcc's counters file, dcgm-exporter's -f format ("DCGM FIELD, Prometheus metric type, help message", exactly three
# fields a row, '#' a comment: its README, "Changing Metrics"). The rows of 4.5.3-4.8.2's etc/default-counters.csv
# (25 metric rows and the driver-version label row), and the two violation counters that file leaves commented out,
# which hpcc's throttling alerts read: the time the GPU's clocks were held down by its power cap or by heat, in ns.
DEFAULT_ROWS: Tuple[Tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes."),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    ("DCGM_FI_DRIVER_VERSION", "label", "Driver Version"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
    ),
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in "
        "bytes per second.",
    ),
    (
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in "
        "bytes per second.",
    ),
)
POWER_VIOLATION = "DCGM_FI_DEV_POWER_VIOLATION"
THERMAL_VIOLATION = "DCGM_FI_DEV_THERMAL_VIOLATION"
HPCC_ROWS: Tuple[Tuple[str, str, str], ...] = (
    (POWER_VIOLATION, "counter", "Throttling duration due to power constraints (in ns)."),
    (THERMAL_VIOLATION, "counter", "Throttling duration due to thermal constraints (in ns)."),
)
ROWS = DEFAULT_ROWS + HPCC_ROWS
LABEL_ROWS = tuple(name for name, kind, _ in ROWS if kind == "label")  # labels on the other series, no family
# The series the exporter serves with this file: what the rules and `hpcc top` may read.
SERIES: Dict[str, Tuple[str, str]] = {name: (kind, text) for name, kind, text in ROWS if kind != "label"}
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # %
FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"  # W


@dataclass(frozen=True)
class Quantity:
    """One quantity hpcc reads from dcgm-exporter: the series hpcc records it as, in base units (Prometheus' "Metric
    and label naming": https://prometheus.io/docs/practices/naming/), from its 4.8.x name scaled by `to_base`, or
    from its DCGM 4.7 name, already in base units."""

    record: str
    legacy: str
    to_base: str  # PromQL arithmetic from the legacy unit to the base unit; "" when they agree
    renamed: str

    def in_base_units(self, legacy: float) -> float:
        """A legacy value as the rule records it (and as DCGM 4.7's field holds it)."""
        if not self.to_base:
            return legacy
        op, factor = self.to_base.split()
        return legacy / float(factor) if op == "/" else legacy * float(factor)


# The DCGM 4.7 names: those DCGM 4.6.1's dcgm_fields.h already defines (same field, same unit: temperature, power,
# Xid; or a new field in base units: SM_CLOCK_HERTZ) and those only DCGM 4.7 adds (the _RATIO, _BYTES and
# _SECONDS_TOTAL fields: https://docs.nvidia.com/datacenter/dcgm/latest/dcgm-api/dcgm-api-field-ids.html). hpcc could
# not read 4.7's header itself; a misspelt name here leaves its series unrecorded on 4.9 nodes, it never stops one.
UTILIZATION = Quantity("gpu:utilization:ratio", GPU_UTIL, " / 100", "DCGM_FI_DEV_GPU_UTIL_RATIO")
MEMORY_USED = Quantity("gpu:memory_used:bytes", FB_USED, " * 1048576", "DCGM_FI_DEV_FB_USED_BYTES")
POWER = Quantity("gpu:power:watts", POWER_USAGE, "", "DCGM_FI_DEV_BOARD_POWER_WATTS")
TEMPERATURE = Quantity("gpu:temperature:celsius", "DCGM_FI_DEV_GPU_TEMP", "", "DCGM_FI_DEV_GPU_TEMP_CELSIUS")
SM_CLOCK = Quantity("gpu:sm_clock:hertz", "DCGM_FI_DEV_SM_CLOCK", " * 1e6", "DCGM_FI_DEV_SM_CLOCK_HERTZ")
LAST_XID = Quantity("gpu:last_xid:code", "DCGM_FI_DEV_XID_ERRORS", "", "DCGM_FI_DEV_XID_ERROR")
# The violation counters count nanoseconds; DCGM 4.7's count seconds.
POWER_THROTTLE = Quantity(
    "gpu:power_throttle:seconds_total", POWER_VIOLATION, " / 1e9", "DCGM_FI_DEV_GPU_POWER_THROTTLE_SECONDS_TOTAL"
)
THERMAL_THROTTLE = Quantity(
    "gpu:thermal_throttle:seconds_total", THERMAL_VIOLATION, " / 1e9", "DCGM_FI_DEV_GPU_THERMAL_THROTTLE_SECONDS_TOTAL"
)
RECORDED: Tuple[Quantity, ...] = (
    UTILIZATION,
    MEMORY_USED,
    POWER,
    TEMPERATURE,
    SM_CLOCK,
    LAST_XID,
    POWER_THROTTLE,
    THERMAL_THROTTLE,
)


def counters_csv() -> str:
    """The -f file: a stamp of its format, then one row a field (no comma inside a help text: a fourth field would
    be refused as "malformed CSV record")."""
    lines = [
        f"# hpcc dcgm counters, format {formats.DCGM_COUNTERS} (hpcc_contract/dcgm.py; dcgm-exporter 4.8.x rows)",
        "# DCGM FIELD, Prometheus metric type, help message",
    ]
    lines += [f"{name}, {kind}, {text}" for name, kind, text in ROWS]
    return "\n".join(lines) + "\n"


COUNTERS_CSV = counters_csv()
