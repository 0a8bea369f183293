"""How much the head's Prometheus holds and takes (issue 34's figures): the series a node brings, by what its type
has, and the memory Prometheus takes for a number of series. The plan warns when the head is too small for the
cluster (infra/config/validators/type_rules.py head_holds_the_metrics).

- Series per node: scripts/bench_series.py counts them with the real node_exporter and hpcc's own writers: a
  p5.48xlarge 903, a p4d.24xlarge 679, a c6i.32xlarge 274 (README, Benchmark). The estimate here, from the GPUs and
  EFA devices alone, is within 10% of the GPU types' and above the CPU type's (tests/facts/test_prometheus_sizing.py
  holds it to those figures). The head's recording rules add one series per GPU and quantity (head_series).
- Memory: scripts/bench_prometheus.py runs the real Prometheus against N synthetic p5 nodes and fits its resident
  memory as a line in its head series (Prometheus keeps every active series and its open chunk in memory:
  https://prometheus.io/docs/prometheus/latest/storage/); it says MISS when it measures more than this model."""

from __future__ import annotations

from hpcc_contract import dcgm

NODE_SERIES_BASE = 400  # node_exporter's families with hpcc's flags, hpcc's own checks and agent series, one disk
NODE_SERIES_PER_GPU = 30  # dcgm-exporter's 25 default counters and hpcc's own GPU series
NODE_SERIES_PER_EFA = 8  # hpcc's EFA error and byte counters a device
SERIES_PER_TARGET = 5  # Prometheus' own a scrape target: up, scrape_duration_seconds, ...
RECORDED_PER_GPU = len(dcgm.RECORDED)  # the head's recording rules keep each GPU's quantities once more
HEAD_SERIES = 340  # the head's own node_exporter and hpcc's controller series (bench_series: 303, the box: 340)

# scripts/bench_prometheus.py (Debian 12's Prometheus 2.42, this machine, 2026-11-30): 64 to 512 synthetic p5 nodes
# (58,469 to 465,253 head series) fit RSS = 11 MiB + 2,634 bytes a series, 9.1 GiB at 4,096 p5 nodes. The bench
# reads after six 10 s scrapes; a 2 h head block at a 30 s scrape holds up to 120 samples in each series' open chunk,
# and queries and compaction take their share: the model keeps about half as much again (README, Benchmark).
PROMETHEUS_BASE_BYTES = 64 * 1024**2
PROMETHEUS_BYTES_PER_SERIES = 4096
HEAD_SHARE = (
    0.5  # of the head's memory, Prometheus may take: slurmctld, the controller, the agent and the OS keep the rest
)


def node_series(gpus: int, efa_devices: int) -> int:
    """The series one node adds: its exporters' (node_exporter, dcgm-exporter on GPU nodes) and Prometheus' own."""
    targets = 2 if gpus else 1
    return (
        NODE_SERIES_BASE + NODE_SERIES_PER_GPU * gpus + NODE_SERIES_PER_EFA * efa_devices + SERIES_PER_TARGET * targets
    )


def head_series(gpus: int, efa_devices: int) -> int:
    """The series one node adds to the head's Prometheus: those it scrapes and those its rules record from them."""
    return node_series(gpus, efa_devices) + RECORDED_PER_GPU * gpus


def prometheus_bytes(series: int) -> int:
    return PROMETHEUS_BASE_BYTES + PROMETHEUS_BYTES_PER_SERIES * series
