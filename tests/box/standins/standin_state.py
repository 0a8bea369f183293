"""What the stand-ins read: one small file per fact in the directory $HPCC_STANDIN_STATE (each box node has its
own, so a test switches one node's GPUs without touching the others). A missing file is the healthy default."""

import os
import time

DEFAULTS = {
    "gpus": "8",
    "ecc": "",
    "remap_pending": "",
    "remap_failed": "",
    "recovery": "",
    "dcgm": "pass",
    "hang": "",
    "off_bus": "",
    "gpu_util": "",  # dcgm-exporter: index:percent
    "power_violation": "",  # dcgm-exporter: index:share of each second held down by the power cap
    "thermal_violation": "",  # dcgm-exporter: index:share held down by heat
    "dcgm_names": "4.8",  # dcgm-exporter: 4.9 serves DCGM 4.7's names and units (exporter 4.9.0)
}


def state(name: str) -> str:
    root = os.environ.get("HPCC_STANDIN_STATE", "")
    try:
        with open(os.path.join(root, name)) as f:
            return f.read().strip()
    except OSError:
        return DEFAULTS[name]


def indexes(name: str) -> set:
    """A comma-separated list of GPU indexes (`1,3`), or `index:count` pairs for counters (`1:2`)."""
    return {item.split(":")[0] for item in state(name).split(",") if item}


def pairs(name: str) -> dict:
    """`index:value,...` (`1:2` for counters, `2:Drain and Reset` for words)."""
    return dict(item.split(":", 1) for item in state(name).split(",") if ":" in item)


def counts(name: str) -> dict:
    return {i: int(n) for i, n in pairs(name).items()}


def maybe_hang(tool: str) -> None:
    """`hang` names the tools that never answer (a hung driver or mount): the check's timeout must catch them."""
    if tool in state("hang").split(","):
        time.sleep(3600)


def bus_id(i: int) -> str:
    return f"00000000:{0x53 + i:02X}:00.0"  # p5-like bus ids, one per GPU
