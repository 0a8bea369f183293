"""The real Prometheus (Debian's) scraping a synthetic exporter, for `hpcc top` and the dashboards' panels: three GPU
nodes' dcgm-exporter (its default counters and labels, `hpc_job` on the GPUs of job 41), their node_exporter (the
collectors hpcc runs) with hpcc's health and agent series from the textfile collector, and the head's node_exporter
with the controller's series and Slurm's as it read them. Every name is one a real exporter exports (the panel test
holds the bodies to infra/render/dashboards.py EXPORTED). The head's alert rules are loaded with their `for` cut to
0s, so those whose expression holds fire at once (gpu-001 runs hot; its EFA read errors rise)."""

from __future__ import annotations

import contextlib
import json
import math
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

from hpcc_contract import dcgm, metrics
from infra.ops import OpsError
from infra.ops import top as ops_top
from infra.render.prometheus import alert_rules
from tests.node.metrics_support import tool

UTIL = {"gpu-000": (90, 80), "gpu-001": (30, 40), "gpu-002": (70, 70)}  # two GPUs a node
JOB_ID, JOB_NODES = "41", ("gpu-000", "gpu-001")
TROUBLED = "gpu-001"  # hot, an Xid, EFA read errors rising, its efa check failing
STARTED = time.time()


def _elapsed() -> float:
    return time.time() - STARTED


def gpu_body(node: str) -> str:
    """dcgm-exporter's series for the node's two GPUs: 4.8.x's names (hpcc's counters file), but the troubled node's
    exporter serves DCGM 4.7's names in their units (dcgm-exporter 4.9.0), as a node on a newer DLAMI would."""
    lines = []
    renamed = node == TROUBLED
    for gpu, util in enumerate(UTIL[node]):
        labels = (f'gpu="{gpu}",UUID="GPU-{node}-{gpu}",pci_bus_id="00000000:{53 + gpu:02X}:00.0",'
                  f'device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3",Hostname="{node}"')  # fmt: skip
        if node in JOB_NODES:
            labels += f',hpc_job="{JOB_ID}"'
        hot = node == TROUBLED
        legacy = {
            dcgm.UTILIZATION: util,  # %
            dcgm.MEMORY_USED: 40960,  # MiB
            dcgm.POWER: 500,
            dcgm.TEMPERATURE: 85 if hot else 60,
            dcgm.SM_CLOCK: 1410 if hot else 1980,  # MHz
            dcgm.LAST_XID: 79 if hot and gpu == 0 else 0,
            dcgm.POWER_THROTTLE: int(_elapsed() * 1e8),  # ns: 10% of the time
            dcgm.THERMAL_THROTTLE: int(_elapsed() * 5e8) if hot else 0,
        }
        for q, v in legacy.items():
            if renamed:
                lines.append(f"{q.renamed}{{{labels}}} {q.in_base_units(v)}")
            else:
                lines.append(f"{q.legacy}{{{labels}}} {v}")
    return "\n".join(lines) + "\n"


def node_exporter_body(node: str) -> str:
    """node_exporter's own series, from the collectors hpcc runs (hpcc_contract/metrics.py NODE_EXPORTER_COLLECTORS)."""
    t = _elapsed()
    fs = 'device="/dev/nvme0n1p1",fstype="ext4",mountpoint="/"'
    return "".join(
        f"{line}\n"
        for line in (
            f"node_filesystem_avail_bytes{{{fs}}} 60000000000",
            f"node_filesystem_size_bytes{{{fs}}} 200000000000",
            f"node_filesystem_readonly{{{fs}}} 0",
            "node_load1 12.5",
            "node_memory_MemAvailable_bytes 1500000000000",
            "node_memory_MemTotal_bytes 2000000000000",
            *(f"node_pressure_{r}_waiting_seconds_total {t * 0.01:.3f}" for r in ("cpu", "memory", "io")),
            f'node_network_receive_bytes_total{{device="ens5"}} {int(t * 1e6)}',
            f'node_network_transmit_bytes_total{{device="ens5"}} {int(t * 2e6)}',
            "hpcc_bundle_generation 3",
            "hpcc_membership_generation 7",
        )
    )


def health_body(node: str) -> str:
    """The health agent's textfile series (hpcc_node/health/series.py)."""
    moved = int(_elapsed() * 1e9)  # 1 GB/s a device
    troubled = node == TROUBLED
    lines = [
        f'hpcc_efa_bytes_total{{device="rdmap0",direction="rx"}} {moved}',
        f'hpcc_efa_bytes_total{{device="rdmap0",direction="tx"}} {moved}',
        f'hpcc_efa_errors_total{{device="rdmap0",counter="rdma_read_wr_err"}} {int(_elapsed()) if troubled else 0}',
        'hpcc_health_check_ok{check="gpu"} 1',
        f'hpcc_health_check_ok{{check="efa"}} {0 if troubled else 1}',
        *(f'hpcc_health_check_timestamp_seconds{{check="{c}"}} {STARTED:.0f}' for c in ("gpu", "efa")),
    ]
    for gpu in range(len(UTIL[node])):
        lines += [
            f'hpcc_gpu_ecc_errors{{gpu="{gpu}",kind="volatile_dbe"}} 0',
            f'hpcc_gpu_row_remap_pending{{gpu="{gpu}"}} 0',
        ]
    if troubled:
        lines.append('hpcc_gpu_xid_errors_total{gpu="0",code="79"} 1')
    return "\n".join(lines) + "\n"


def head_body() -> str:
    """The controller's series (hpcc_node/controller/series.py) and Slurm's as it read them."""
    loops = int(_elapsed() / 2)
    return (
        f'hpcc_slurm_job_node_info{{job_id="{JOB_ID}",slurm_node="gpu-000",user="ana",job_name="llama <b>70b</b>"}} 1\n'
        f'hpcc_slurm_job_node_info{{job_id="{JOB_ID}",slurm_node="gpu-001",user="ana",job_name="llama <b>70b</b>"}} 1\n'
        'hpcc_slurm_nodes{group="gpu",state="drain"} 1\nhpcc_slurm_nodes{group="gpu",state="idle"} 2\n'
        'hpcc_slurm_jobs{state="running"} 1\nhpcc_slurm_jobs{state="pending"} 2\n'
        'hpcc_controller_nodes{group="gpu",state="replacing"} 0\nhpcc_controller_nodes{group="gpu",state="ready"} 3\n'
        f"hpcc_controller_loop_seconds 1.25\nhpcc_controller_loops_total {loops}\n"
        f'hpcc_controller_actions_total{{kind="drain"}} {loops}\nhpcc_controller_actions_total{{kind="publish"}} 1\n'
        'hpcc_controller_replacements_total{group="gpu",reason="requested"} 1\n'
        'hpcc_controller_spares{group="gpu"} 0\nhpcc_controller_alerts_total 1\n'
        "hpcc_controller_membership_generation 7\n"
    )


def body(path: str) -> str:
    kind, node = path.strip("/").split("/")
    if kind == "gpu":
        return gpu_body(node)
    if node == "head":
        return node_exporter_body(node) + head_body()
    return node_exporter_body(node) + health_body(node)


def bodies() -> dict[str, str]:
    """Every body the exporter serves, by path (for the test that holds them to exported names)."""
    paths = [f"/gpu/{n}" for n in UTIL] + [f"/node/{n}" for n in (*UTIL, "head")]
    return {p: body(p) for p in paths}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def synthetic_prometheus(work: Path) -> Iterator[str]:
    """The real Prometheus scraping the synthetic exporter every second, the head's rules loaded with `for: 0s`;
    yields its URL once `hpcc top` reads a frame with the job and the GPU group's EFA throughput."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            data = body(self.path).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    at = f"127.0.0.1:{server.server_address[1]}"

    def group(job, node, group):
        labels = {"__metrics_path__": f"/{job}/{node}", metrics.LABEL_NODE: node, metrics.LABEL_GROUP: group,
                  metrics.LABEL_INSTANCE_ID: f"i-{node}"}  # fmt: skip
        return {"targets": [at], "labels": labels}

    (work / "gpus.json").write_text(json.dumps([group("gpu", n, "gpu") for n in UTIL]))
    (work / "nodes.json").write_text(json.dumps([group("node", n, "gpu") for n in UTIL] + [group("node", "head", "")]))
    rules = yaml.safe_load(alert_rules())
    for rule in rules["groups"][0]["rules"]:
        if "alert" in rule:
            rule["for"] = "0s"
    (work / "rules.yml").write_text(yaml.safe_dump(rules))
    port = _free_port()
    (work / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{work / 'rules.yml'}']\nscrape_configs:\n"
        f"- job_name: {metrics.JOB_GPU}\n  file_sd_configs: [{{files: ['{work / 'gpus.json'}']}}]\n"
        f"- job_name: {metrics.JOB_NODE}\n  file_sd_configs: [{{files: ['{work / 'nodes.json'}']}}]\n"
    )
    proc = subprocess.Popen(
        [tool("prometheus"), f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    targets = 2 * len(UTIL) + 1  # each GPU node's two exporters, the head's node_exporter
    try:
        deadline, seen = time.monotonic() + 60, "nothing yet"
        while True:
            try:  # every target scraped at least twice (a rate), not only the first few
                up = ops_top.query(base, "count(count_over_time(up[1m]) >= 2 and up == 1)")
                frame = ops_top.read_frame(base)
                efa = [r.efa for r in frame.groups if r.name == "gpu"]
                seen = f"{up[0][1] if up else 0:.0f} of {targets} targets up twice, jobs {len(frame.jobs)}, efa {efa}"
                if up and up[0][1] == targets and frame.jobs and efa and not math.isnan(efa[0]):
                    break
            except OpsError as e:
                seen = str(e)
            assert proc.poll() is None, "prometheus exited"
            assert time.monotonic() < deadline, f"the synthetic Prometheus not ready in 60 s: {seen}"
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        server.shutdown()
