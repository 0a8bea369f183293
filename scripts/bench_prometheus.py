#!/usr/bin/env python3
"""Issue 34's head figure (`make bench`; never a timed test): the head's Prometheus at several cluster sizes, fitted
to 4,096 p5 nodes. Target: at most 16 GiB resident with a 30 s scrape.

The real Prometheus (Debian 12's package) scrapes N synthetic targets through file-based discovery, as the head's
does. Each target is a p5.48xlarge node's series (SERIES_PER_NODE, scripts/bench_series.py's figure: node_exporter's
families, dcgm-exporter's default counters for 8 GPUs, hpcc's own for 32 EFA devices), names and label shapes like
theirs, served by one local HTTP server; every scrape gets new values (several bodies a target, in turn), so the
head block holds real samples, not one repeated value. After a warm-up of scrapes, read: its resident memory
(VmRSS of /proc/<pid>/status), its head series (prometheus_tsdb_head_series), and the scrape durations
(scrape_duration_seconds). Memory is fitted as a line in the head's series (Prometheus keeps every active series
and its open chunk in memory: https://prometheus.io/docs/prometheus/latest/storage/) and read at 4,096 nodes.

The scrape interval is shorter than the head's 30 s (default 10 s) so a point takes a minute, not five: the memory
per series counts the series and their open chunks, which a shorter interval fills sooner (the figure leans high).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from infra.facts import prometheus_sizing  # noqa: E402 - after sys.path gets the checkout

SERIES_PER_NODE = 903  # a p5.48xlarge with hpcc's defaults (README, Benchmark: "Series per node")
TARGET_NODES = 4096
TARGET_BYTES = 16 * 1024**3
BODIES = 4  # bodies a target, served in turn: each scrape brings new values
PROMETHEUS = "prometheus"


def node_lines(count: int) -> list[str]:
    """`count` series names with labels, shaped like a GPU node's: per GPU, per EFA device, per disk, the rest."""
    lines: list[str] = []
    for gpu in range(8):
        for field in ("GPU_UTIL", "FB_USED", "FB_FREE", "POWER_USAGE", "GPU_TEMP", "SM_CLOCK", "MEM_CLOCK",
                      "XID_ERRORS", "PCIE_REPLAY_COUNTER", "TOTAL_ENERGY_CONSUMPTION", "POWER_VIOLATION",
                      "THERMAL_VIOLATION", "PROF_GR_ENGINE_ACTIVE", "PROF_PIPE_TENSOR_ACTIVE", "PROF_DRAM_ACTIVE",
                      "PROF_PCIE_TX_BYTES", "PROF_PCIE_RX_BYTES", "NVLINK_BANDWIDTH_TOTAL", "MEMORY_TEMP",
                      "MEM_COPY_UTIL", "ENC_UTIL", "DEC_UTIL", "FB_RESERVED", "CORRECTABLE_REMAPPED_ROWS",
                      "UNCORRECTABLE_REMAPPED_ROWS"):  # fmt: skip
            uuid = f"GPU-{gpu:08x}-1111-2222-3333-444455556666"
            labels = f'gpu="{gpu}",UUID="{uuid}",device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3"'
            lines.append(f'DCGM_FI_DEV_{field}{{{labels},Hostname="gpu-node"}}')
    for dev in range(32):
        for counter in ("rdma_read_wr_err", "rdma_write_wr_err", "rx_drops", "tx_drops", "rdma_read_bytes",
                        "rdma_write_bytes", "rx_bytes", "tx_bytes"):  # fmt: skip
            lines.append(f'hpcc_efa_errors_total{{device="rdmap{dev}s0",counter="{counter}"}}')
    disk = 0
    while len(lines) < count:
        family = ("node_disk_read_bytes_total", "node_disk_written_bytes_total", "node_filesystem_avail_bytes",
                  "node_network_receive_bytes_total", "node_memory_Active_bytes", "node_pressure_cpu_waiting_seconds_total")  # noqa: E501 # fmt: skip
        lines.append(f'{family[disk % len(family)]}{{device="nvme{disk // len(family)}n1"}}')
        disk += 1
    return lines[:count]


class Targets:
    def __init__(self, count: int):
        base = node_lines(count)
        rnd = random.Random(7)
        self.bodies = [
            ("\n".join(f"{line} {rnd.random() * 1e6:.3f}" for line in base) + "\n").encode() for _ in range(BODIES)
        ]
        self.turn: dict[str, int] = {}
        self.lock = threading.Lock()

    def body(self, path: str) -> bytes:
        with self.lock:
            n = self.turn.get(path, 0)
            self.turn[path] = n + 1
        return self.bodies[n % BODIES]


def serve(targets: Targets) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            data = targets.body(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(port: int, expr: str) -> float:
    url = f"http://127.0.0.1:{port}/api/v1/query?query={urllib.parse.quote(expr)}"
    with urllib.request.urlopen(url, timeout=30) as r:
        result = json.loads(r.read())["data"]["result"]
    return float(result[0]["value"][1]) if result else float("nan")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def measure(nodes: int, interval: int, scrapes: int, server_port: int, work: Path) -> dict[str, float]:
    """One Prometheus scraping `nodes` targets for `scrapes` intervals: its figures."""
    targets = [
        {
            "targets": [f"127.0.0.1:{server_port}"],
            "labels": {"__metrics_path__": f"/metrics/{i}", "node": f"gpu-{i:04d}"},
        }
        for i in range(nodes)
    ]
    data = work / f"data-{nodes}"
    (work / "targets.json").write_text(json.dumps(targets))
    port = free_port()
    (work / "prometheus.yml").write_text(
        f"global: {{scrape_interval: {interval}s, evaluation_interval: {interval}s}}\n"
        "scrape_configs:\n"
        f"- job_name: node\n  file_sd_configs: [{{files: ['{work / 'targets.json'}']}}]\n"
        f"- job_name: prometheus\n  static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n"
    )
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={data}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        time.sleep(interval * scrapes + 5)
        return {
            "nodes": nodes,
            "series": query(port, "prometheus_tsdb_head_series"),
            "rss": rss_bytes(proc.pid),
            "scrape_avg": query(port, 'avg(scrape_duration_seconds{job="node"})'),
            "scrape_max": query(port, 'max(scrape_duration_seconds{job="node"})'),
            "up": query(port, 'sum(up{job="node"})'),
        }
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(data, ignore_errors=True)


def fit(points: list[dict[str, float]]) -> tuple[float, float]:
    """Least squares: rss = a + b * series."""
    xs, ys = [p["series"] for p in points], [p["rss"] for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / max(1e-9, sum((x - mx) ** 2 for x in xs))
    return my - b * mx, b


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", default="64,128,256,512", help="the cluster sizes to run, comma separated")
    parser.add_argument("--interval", type=int, default=10, help="seconds between scrapes")
    parser.add_argument("--scrapes", type=int, default=6, help="scrapes before the figures are read")
    args = parser.parse_args()
    if shutil.which(PROMETHEUS) is None:
        print(f"MISS {PROMETHEUS} is not installed (Debian: apt-get install prometheus; make deps)")
        return 1
    version = subprocess.run([PROMETHEUS, "--version"], capture_output=True, text=True)
    print(f"prometheus: {(version.stdout + version.stderr).splitlines()[0]}")
    print(f"each target: {SERIES_PER_NODE} series (a p5.48xlarge), scraped every {args.interval} s, read after "
          f"{args.scrapes} scrapes")  # fmt: skip
    server = serve(Targets(SERIES_PER_NODE))
    points = []
    print(f"{'nodes':>6}{'up':>6}{'head series':>13}{'RSS MiB':>9}{'KiB/series':>11}{'scrape avg ms':>14}{'max ms':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for nodes in (int(n) for n in args.nodes.split(",")):
            p = measure(nodes, args.interval, args.scrapes, server.server_address[1], Path(tmp))
            points.append(p)
            per_series = p["rss"] / max(1, p["series"]) / 1024
            print(
                f"{nodes:>6}{p['up']:>6.0f}{p['series']:>13,.0f}{p['rss'] / 2**20:>9.0f}{per_series:>11.2f}"
                f"{p['scrape_avg'] * 1000:>14.1f}{p['scrape_max'] * 1000:>8.1f}"
            )
    server.shutdown()
    a, b = fit(points)
    series = TARGET_NODES * (SERIES_PER_NODE + 5)  # and Prometheus' five of its own a target
    predicted = a + b * series
    print(f"fit: RSS = {a / 2**20:.0f} MiB + {b:.0f} bytes x head series")
    model = prometheus_sizing.PROMETHEUS_BYTES_PER_SERIES
    print(f"the plan's model (infra/facts/prometheus_sizing.py): {model} bytes a series")
    if b > model * 1.2:
        print(f"MISS measured {b:.0f} bytes a series, over the plan's {model}: raise it, or the plan warns too late")
    gib, target = predicted / 2**30, TARGET_BYTES / 2**30
    print(f"{TARGET_NODES:,} p5 nodes: {series:,} series, {gib:.1f} GiB resident (target {target:.0f} GiB)")
    if predicted > TARGET_BYTES:
        print(f"MISS {TARGET_NODES:,} p5 nodes: {gib:.1f} GiB resident, over {target:.0f} GiB")
        return 1
    return 1 if b > model * 1.2 else 0


if __name__ == "__main__":
    sys.exit(main())
