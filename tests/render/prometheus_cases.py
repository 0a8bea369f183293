"""The inputs `promtool test rules` feeds the head's alerts (tests/render/test_prometheus.py): per alert, the trend it
is for (it fires, with these labels and this evidence) and a healthy node or a short blip (it stays quiet). Series
are sampled every minute, as the exporters' targets carry them (hpcc_contract/metrics.py's labels); promtool's
values notation: `a+bxn` is a, a+b, ... n+1 samples.

Units: the DCGM violation counters count nanoseconds, so 12e9 more per minute is a GPU held down 20% of the time;
DCGM 4.7's (dcgm-exporter 4.9.0's names) count seconds, so 12 more per minute is the same GPU."""

from __future__ import annotations

from dataclasses import dataclass

from hpcc_contract import dcgm, metrics
from infra.render import prometheus as prom

NODE = {
    metrics.LABEL_NODE: "gpu-001",
    metrics.LABEL_GROUP: "gpu",
    metrics.LABEL_INSTANCE_ID: "i-0abc",
}
NODE_TARGET = {"job": metrics.JOB_NODE, "instance": f"10.0.1.7:{metrics.NODE_EXPORTER_PORT}", **NODE}
GPU_TARGET = {"job": metrics.JOB_GPU, "instance": f"10.0.1.7:{metrics.DCGM_EXPORTER_PORT}", **NODE}
DRAIN = {"severity": prom.SEVERITY_CRITICAL, metrics.ALERT_ACTION_LABEL: metrics.ALERT_ACTION_DRAIN}
EVENT = {"severity": prom.SEVERITY_WARNING, metrics.ALERT_ACTION_LABEL: metrics.ALERT_ACTION_EVENT}
QUIET: list = []  # no alert firing


@dataclass(frozen=True)
class Case:
    id: str
    alert: str
    series: list  # promtool's input_series
    expect: list  # (eval time, [(labels, annotations) of each firing alert])


def series(name: str, labels: dict, values: str) -> dict:
    inner = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def gpu(n: int, node: str = "gpu-001") -> dict:
    """dcgm-exporter's labels for GPU n (NVIDIA's dcgm-exporter README, "Quickstart" output), its target's after."""
    own = {"gpu": str(n), "UUID": f"GPU-{n:08d}", "device": f"nvidia{n}", "modelName": "NVIDIA H100 80GB HBM3"}
    return {**own, "Hostname": "ip-10-0-1-7", **GPU_TARGET, metrics.LABEL_NODE: node}


def evidence(summary: str, value: str) -> dict:
    return {"summary": summary, "value": value, metrics.LABEL_NODE: "gpu-001"}


def per_minute(ns: float, minutes: int) -> str:
    return f"0+{int(ns)}x{minutes}"


def throttled(fraction: float, minutes: int = 40) -> str:
    """A violation counter of a GPU held down `fraction` of every minute."""
    return per_minute(fraction * 60e9, minutes)


def blip(fraction: float, minutes: int, total: int = 40) -> str:
    """Held down `fraction` for the first `minutes`, then never again."""
    held = int(fraction * 60e9) * minutes
    return f"0+{int(fraction * 60e9)}x{minutes} {held}+0x{total - minutes - 1}"


def throttled_s(fraction: float, minutes: int = 40) -> str:
    """The same, counted in seconds (DCGM 4.7's _THROTTLE_SECONDS_TOTAL fields)."""
    return f"0+{fraction * 60:g}x{minutes}"


def quiet_at(*times: str) -> list:
    return [(t, QUIET) for t in times]


THERMAL = "DCGM_FI_DEV_THERMAL_VIOLATION"
POWER = "DCGM_FI_DEV_POWER_VIOLATION"
THERMAL_47, POWER_47 = dcgm.THERMAL_THROTTLE.renamed, dcgm.POWER_THROTTLE.renamed
HEAT = "GPU 0 (GPU-00000000) on gpu-001 was held down by heat 20% of the last 5 minutes, for 10 minutes"
CAP = (
    "GPU 3 (GPU-00000003) on gpu-001 was held down by its power cap 70% of the last 5 minutes, far more than its "
    "node's other GPUs, for 10 minutes"
)

CAP_VALUE = "0.7000000000000001"  # 42 s a minute over 5 minutes, as Prometheus' rate() sums it in floating point

GPU_CASES = [
    Case(
        "thermal-fires",
        prom.ALERT_GPU_THERMAL,
        [series(THERMAL, gpu(0), throttled(0.2)), series(THERMAL, gpu(1), throttled(0))],
        [("9m", QUIET), ("20m", [({**gpu(0), **DRAIN}, evidence(HEAT, "0.2"))])],
    ),
    Case(
        "thermal-quiet",  # one GPU never held down, another for 3 minutes only
        prom.ALERT_GPU_THERMAL,
        [series(THERMAL, gpu(0), throttled(0)), series(THERMAL, gpu(1), blip(0.5, 3))],
        quiet_at("5m", "10m", "15m", "30m"),
    ),
    Case(
        "thermal-fires-dcgm-4.7",  # the same GPU on a node whose exporter serves DCGM 4.7's names, in seconds
        prom.ALERT_GPU_THERMAL,
        [series(THERMAL_47, gpu(0), throttled_s(0.2)), series(THERMAL_47, gpu(1), throttled_s(0))],
        [("9m", QUIET), ("20m", [({**gpu(0), **DRAIN}, evidence(HEAT, "0.2"))])],
    ),
    Case(
        "thermal-quiet-dcgm-4.7",  # 0.5 s a minute read as nanoseconds would be nothing; as seconds, still too little
        prom.ALERT_GPU_THERMAL,
        [series(THERMAL_47, gpu(0), throttled_s(0.05)), series(THERMAL_47, gpu(1), throttled_s(0))],
        quiet_at("10m", "20m", "30m"),
    ),
    Case(
        "power-fires",  # GPU 3 held down 70% of the time, its peers 30-40% (their median: 40%)
        prom.ALERT_GPU_POWER,
        [series(POWER, gpu(n), throttled(f)) for n, f in enumerate((0.3, 0.4, 0.4, 0.7))],
        [("9m", QUIET), ("20m", [({**gpu(3), **DRAIN}, evidence(CAP, CAP_VALUE))])],
    ),
    Case(
        "power-quiet-busy-node",  # every GPU of a busy node at its power cap 70% of the time: by design, not a fault
        prom.ALERT_GPU_POWER,
        [series(POWER, gpu(n), throttled(0.7)) for n in range(4)],
        quiet_at("10m", "20m", "35m"),
    ),
    Case(
        "power-quiet-near",  # gpu-001's GPU 3 at 60%, its node's median 40%; gpu-002's at 45%, its peers never
        prom.ALERT_GPU_POWER,
        [series(POWER, gpu(n), throttled(f)) for n, f in enumerate((0.2, 0.4, 0.4, 0.6))]
        + [series(POWER, gpu(n, "gpu-002"), throttled(0)) for n in range(3)]
        + [series(POWER, gpu(3, "gpu-002"), throttled(0.45))],
        quiet_at("10m", "20m", "35m"),
    ),
    Case(
        "power-fires-dcgm-4.7",  # as power-fires, in seconds; gpu-002 beside it still on 4.8.x's names, quiet
        prom.ALERT_GPU_POWER,
        [series(POWER_47, gpu(n), throttled_s(f)) for n, f in enumerate((0.3, 0.4, 0.4, 0.7))]
        + [series(POWER, gpu(n, "gpu-002"), throttled(0.3)) for n in range(4)],
        [("9m", QUIET), ("20m", [({**gpu(3), **DRAIN}, evidence(CAP, CAP_VALUE))])],
    ),
    Case(
        "power-quiet-blip",
        prom.ALERT_GPU_POWER,
        [series(POWER, gpu(n), throttled(0.2)) for n in range(3)] + [series(POWER, gpu(3), blip(0.9, 3))],
        quiet_at("5m", "10m", "15m", "30m"),
    ),
]

EFA = {"device": "rdmap16s27", "counter": "rdma_read_wr_err", **NODE_TARGET}
REMOTE = {**EFA, "counter": "unresponsive_remote_events"}
EFA_TEXT = (
    "EFA device rdmap16s27 on gpu-001: rdma_read_wr_err rose by 10 in the last 10 minutes, and in every 10 minutes "
    "for the last 30"
)
ROOT = {"device": "/dev/nvme0n1p1", "fstype": "ext4", "mountpoint": "/", **NODE_TARGET}
GB = 1_000_000_000


def disk(avail: str, size: int = 100 * GB, minutes: int = 60) -> list:
    return [
        series("node_filesystem_size_bytes", ROOT, f"{size}+0x{minutes}"),
        series("node_filesystem_avail_bytes", ROOT, avail),
        series("node_filesystem_readonly", ROOT, f"0+0x{minutes}"),
    ]


DISK_TEXT = "the root file system of gpu-001 has 21% free and, at the last hour's rate, fills within 4 hours"
DOWN_TEXT = (
    "the node exporter on gpu-001 (10.0.1.7:9100) has not answered a scrape for 5 minutes while the node is in the "
    "membership"
)

NODE_CASES = [
    Case(
        "efa-fires",  # one more read error every minute, for an hour
        prom.ALERT_EFA_ERRORS,
        [series("hpcc_efa_errors_total", EFA, "0+1x60")],
        [("25m", QUIET), ("45m", [({**EFA, **DRAIN}, evidence(EFA_TEXT, "10"))])],
    ),
    Case(
        "efa-quiet",  # a remote counter rising (a peer's fault), and one burst of 500 local errors, then none
        prom.ALERT_EFA_ERRORS,
        [
            series("hpcc_efa_errors_total", REMOTE, "0+1x60"),
            series("hpcc_efa_errors_total", {**EFA, "counter": "rx_drops"}, "0+0x4 500+0x55"),
        ],
        quiet_at("10m", "20m", "40m", "55m"),
    ),
    Case(
        "disk-fires",  # 24% free, 100 MB less every minute: empty in 4 hours
        prom.ALERT_ROOT_DISK,
        disk(f"{24 * GB}-{GB // 10}x60"),
        [("10m", QUIET), ("30m", [({**ROOT, **EVENT}, evidence(DISK_TEXT, "0.21"))])],
    ),
    Case(
        "disk-quiet",  # 10% free, but steady
        prom.ALERT_ROOT_DISK,
        disk(f"{10 * GB}+0x60"),
        quiet_at("20m", "50m"),
    ),
    Case(
        "disk-quiet-blip",  # 30% free, 20% for 5 minutes (a file written, then removed), 30% again
        prom.ALERT_ROOT_DISK,
        disk(f"{30 * GB}+0x9 {20 * GB}+0x4 {30 * GB}+0x45"),
        quiet_at("12m", "20m", "40m"),
    ),
    Case(
        "down-fires",
        prom.ALERT_TARGET_DOWN,
        [series("up", NODE_TARGET, "0x15"), series("up", GPU_TARGET, "1x15")],
        [("3m", QUIET), ("10m", [({**NODE_TARGET, **EVENT}, evidence(DOWN_TEXT, "0"))])],
    ),
    Case(
        "down-quiet",  # two missed scrapes; and the head's own Prometheus job is no member's exporter
        prom.ALERT_TARGET_DOWN,
        [
            series("up", NODE_TARGET, "1x4 0x1 1x20"),
            series(
                "up", {"job": metrics.JOB_PROMETHEUS, "instance": "10.0.0.5:9090", metrics.LABEL_NODE: "head"}, "0x20"
            ),
        ],
        quiet_at("5m", "8m", "15m"),
    ),
]

CASES = GPU_CASES + NODE_CASES
