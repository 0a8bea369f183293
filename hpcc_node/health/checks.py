"""Which command each check runs on this node and how its output is read: the runner's specs for a list of
check names (verdict.BOOT_CHECKS, PERIODIC_CHECKS, ...). A node without GPUs, EFA or Neuron devices has no such
checks; a node with them always has them, so a missing tool there fails ("nvidia-smi missing on a GPU node").

Two periodic checks are not commands: `xid` reads the kernel log's new lines (xid.new_lines, xid.check) and
`efa_counters` compares two reads of sysfs (devices.read_efa_counters, compare_efa). Both read local files the
kernel serves from memory, which do not hang the way a network file system does; the caller keeps their state
(the log offset, the previous counters) between runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import List, Optional, Sequence

from hpcc_contract.settings import BOOT_DIAG_LEVEL_DEFAULT
from hpcc_node.health import devices, gpu, host
from hpcc_node.health.host import DISK_MIN_FREE_GIB
from hpcc_node.health.runner import CheckSpec
from hpcc_node.health.verdict import (
    CHECK_TIMEOUT_S,
    DCGM_DIAG,
    DISK_FREE,
    EFA_COUNTERS,
    EFA_DEVICES,
    GPU_COUNT,
    GPU_MEMORY,
    GPU_RECOVERY,
    NEURON_DEVICES,
    SHARED_MOUNT,
    XID,
)

IN_PROCESS = (XID, EFA_COUNTERS)
# DCGM's levels run from seconds (1) to hours (4): each gets its own deadline, not the periodic one.
DCGM_TIMEOUT_S = {1: 120, 2: 900, 3: 3600, 4: 10800}


@dataclass(frozen=True)
class NodeFacts:
    host: str
    gpus: int = 0  # NVIDIA GPUs the instance type has (EC2's GpuInfo)
    efa_devices: int = 0  # EFA interfaces it was launched with
    neuron_devices: int = 0
    shared_mount: Optional[str] = None  # the Lustre mount point, when the cluster has one
    dcgm_level: int = BOOT_DIAG_LEVEL_DEFAULT  # 0: no DCGM diagnostic (hpcc_contract/settings.py)
    disk_path: str = "/"
    disk_min_free_gib: float = DISK_MIN_FREE_GIB


def _probe(name: str, timeout_s: float, *args: str) -> CheckSpec:
    """A check run by hpcc_node.health.host in a child (a hung mount blocks the child, not the caller)."""
    return CheckSpec(
        name,
        tuple(host.probe_argv(*args)),
        partial(host.parse_probe, check=name),
        timeout_s,
        label=f"the {args[0]} probe of {args[1]}",
    )


def specs(names: Sequence[str], facts: NodeFacts, timeout_s: Optional[float] = None) -> List[CheckSpec]:
    """The command checks among `names` that this node has, in the order given (unknown names are refused)."""
    t = CHECK_TIMEOUT_S if timeout_s is None else timeout_s
    out: List[CheckSpec] = []
    for name in names:
        if name in IN_PROCESS:
            continue
        if name == GPU_COUNT and facts.gpus:
            out.append(
                CheckSpec(name, gpu.NVIDIA_SMI_LIST, partial(gpu.parse_list, expected=facts.gpus), t, "a GPU node")
            )
        elif name == GPU_MEMORY and facts.gpus:
            out.append(CheckSpec(name, gpu.NVIDIA_SMI_QUERY, gpu.parse_query, t, "a GPU node"))
        elif name == GPU_RECOVERY and facts.gpus:
            out.append(CheckSpec(name, gpu.NVIDIA_SMI_RECOVERY, gpu.parse_recovery, t, "a GPU node"))
        elif name == DCGM_DIAG and facts.gpus and facts.dcgm_level:
            deadline = DCGM_TIMEOUT_S[facts.dcgm_level] if timeout_s is None else timeout_s
            out.append(CheckSpec(name, gpu.dcgmi_argv(facts.dcgm_level), gpu.parse_dcgm, deadline, "a GPU node"))
        elif name == EFA_DEVICES and facts.efa_devices:
            out.append(
                CheckSpec(
                    name,
                    devices.FI_INFO_EFA,
                    partial(devices.parse_fi_info, expected=facts.efa_devices),
                    t,
                    "an EFA node",
                )
            )
        elif name == NEURON_DEVICES and facts.neuron_devices:
            out.append(
                CheckSpec(
                    name,
                    devices.NEURON_LS,
                    partial(devices.parse_neuron_ls, expected=facts.neuron_devices),
                    t,
                    "a Neuron node",
                )
            )
        elif name == SHARED_MOUNT and facts.shared_mount:
            out.append(_probe(name, t, "mount", facts.shared_mount, facts.host))
        elif name == DISK_FREE:
            out.append(_probe(name, t, "disk", facts.disk_path, str(facts.disk_min_free_gib)))
        elif name not in (GPU_COUNT, GPU_MEMORY, GPU_RECOVERY, DCGM_DIAG, EFA_DEVICES, NEURON_DEVICES, SHARED_MOUNT):
            raise ValueError(f"no check named {name!r}")
    return out
