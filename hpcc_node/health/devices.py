"""The node's fabric and accelerator devices: EFA by `fi_info -p efa` and its error counters in sysfs, Neuron
devices by `neuron-ls`. Parsers take (stdout, exit code); the counters' reader takes the sysfs root.

fi_info: AWS's EFA guide (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html, "fi_info -p efa
-t FI_EP_RDM") lists one `provider: efa` block per device, each with its `domain:` (e.g. `rdmap16s27-rdm`);
devices are counted by distinct domains, as the bootstrap's `efa_device_count` does (templates/steps/efa.sh.j2).
EFA counters: /sys/class/infiniband/<device>/ports/<port>/hw_counters/<name>, names from the Linux EFA driver
(drivers/infiniband/hw/efa/efa_verbs.c) and AWS's "Collect EFA metrics" (CloudWatch agent) page.
neuron-ls: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/tools/neuron-sys-tools/neuron-ls.html
(`--json-output`: a list with one object per device, `neuron_device` its index; Neuron 2.34 announces a new
JSON layout, read here as an object holding such a list).
"""

from __future__ import annotations

import json
import os
from typing import Dict, List, Mapping, Optional, Tuple

from hpcc_node.health.verdict import EFA_COUNTERS, EFA_DEVICES, NEURON_DEVICES, CheckResult, fail, ok, unknown, warn

FI_INFO_EFA = ("fi_info", "-p", "efa", "-t", "FI_EP_RDM")
NEURON_LS = ("neuron-ls", "--json-output")
SYSFS_INFINIBAND = "/sys/class/infiniband"

# Counters that rise when this node's side of the fabric fails, and the rise per check period past which the
# node is drained (below it: a warning). Chosen, not published: a healthy EFA device shows none of these.
LOCAL_ERROR_LIMITS = {"rdma_read_wr_err": 10, "rdma_write_wr_err": 10, "rx_drops": 1000}
# Counters that rise when a peer stops answering: they name a remote fault as much as ours, so they only warn
# (draining on them would take out every healthy peer of one bad node).
REMOTE_ERROR_COUNTERS = ("unresponsive_remote_events", "impaired_remote_conn_events", "retrans_timeout_events")


def fi_info_domains(out: str) -> List[str]:
    return sorted(
        {
            line.split(None, 1)[1].strip()
            for line in out.splitlines()
            if line.strip().startswith("domain:") and len(line.split(None, 1)) == 2
        }
    )


def parse_fi_info(out: str, rc: int, expected: int) -> CheckResult:
    if rc != 0:
        first = next((line.strip() for line in out.splitlines() if line.strip()), "no output")
        return fail(
            EFA_DEVICES,
            f"fi_info -p efa failed (exit {rc}): {first[:120]}; the node was launched with {expected} EFA interface(s)",
            "drain",
            "replace",
        )
    if "provider:" not in out:
        return unknown(EFA_DEVICES, f"fi_info printed no provider block: {out.strip()[:120]}")
    found = len(fi_info_domains(out))
    if found != expected:
        return fail(
            EFA_DEVICES, f"{found} EFA device(s) by fi_info; the node was launched with {expected}", "drain", "replace"
        )
    return ok(EFA_DEVICES, f"{found} EFA device(s)")


def _neuron_devices(doc: object) -> Optional[list]:
    if isinstance(doc, list) and all(isinstance(d, dict) and "neuron_device" in d for d in doc):
        return doc
    if isinstance(doc, dict):
        for value in doc.values():
            found = _neuron_devices(value) if isinstance(value, list) and value else None
            if found is not None:
                return found
    return None


def parse_neuron_ls(out: str, rc: int, expected: int) -> CheckResult:
    if rc != 0:
        first = next((line.strip() for line in out.splitlines() if line.strip()), "no output")
        return fail(NEURON_DEVICES, f"neuron-ls failed (exit {rc}): {first[:120]}", "drain", "reboot")
    try:
        devices = _neuron_devices(json.loads(out))
    except ValueError:
        devices = None
    if devices is None:
        return unknown(NEURON_DEVICES, f"neuron-ls printed JSON this parser does not read: {out.strip()[:120]}")
    if len(devices) != expected:
        return fail(
            NEURON_DEVICES,
            f"{len(devices)} Neuron device(s) visible, the instance type has {expected}",
            "drain",
            "replace",
        )
    return ok(NEURON_DEVICES, f"{len(devices)} Neuron device(s)")


ERROR_COUNTERS = tuple(LOCAL_ERROR_LIMITS) + REMOTE_ERROR_COUNTERS
# Bytes each device moved (the driver's port counters tx_bytes, rx_bytes): no check reads them, the health series
# do (series.py); never compared by compare_efa, which warns on any counter that rises.
BYTE_COUNTERS = ("rx_bytes", "tx_bytes")

Counters = Dict[Tuple[str, str, str], int]


def read_efa_counters(root: str = SYSFS_INFINIBAND, names: Tuple[str, ...] = ERROR_COUNTERS) -> Counters:
    """Every error counter (or those `names`) of every device and port; one the driver does not have is left out."""
    out: Counters = {}
    for device in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        ports = os.path.join(root, device, "ports")
        for port in sorted(os.listdir(ports)) if os.path.isdir(ports) else []:
            for name in names:
                try:
                    with open(os.path.join(ports, port, "hw_counters", name)) as f:
                        out[(device, port, name)] = int(f.read().strip())
                except (OSError, ValueError):
                    continue
    return out


def compare_efa(
    before: Mapping[Tuple[str, str, str], int], after: Mapping[Tuple[str, str, str], int], expected_devices: int
) -> CheckResult:
    """Error counters between two reads one period apart."""
    devices = {d for d, _, _ in after}
    if expected_devices and not after:
        return fail(
            EFA_COUNTERS,
            f"no EFA counters readable; the node was launched with {expected_devices} EFA interface(s)",
            "drain",
            "replace",
        )
    rises = {k: after[k] - before[k] for k in after if k in before and after[k] > before[k]}
    local = [
        f"{d} port {p} {n} +{r}"
        for (d, p, n), r in sorted(rises.items())
        if n in LOCAL_ERROR_LIMITS and r >= LOCAL_ERROR_LIMITS[n]
    ]
    if local:
        return fail(EFA_COUNTERS, "EFA errors rising: " + ", ".join(local), "drain", "replace")
    if rises:
        return warn(
            EFA_COUNTERS,
            "EFA counters rising: " + ", ".join(f"{d} port {p} {n} +{r}" for (d, p, n), r in sorted(rises.items())),
        )
    return ok(EFA_COUNTERS, f"{len(devices)} EFA device(s), no error counter rising")
