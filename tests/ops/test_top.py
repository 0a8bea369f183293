"""`hpcc top` (infra/ops/top.py): the real Prometheus scrapes synthetic exporters of three GPU nodes and the head's
controller series; one frame shows each group and each running job with its nodes, GPU utilisation (the mean and
the worst node), memory, power and EFA throughput; bad input and a Prometheus that does not answer are messages and
a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from hpcc_contract import metrics
from infra.ops import OpsError
from infra.ops import top as ops_top
from infra.ops.cli import app
from tests.node.metrics_support import tool

UTIL = {"gpu-000": (90, 80), "gpu-001": (30, 40), "gpu-002": (70, 70)}  # two GPUs a node
STARTED = time.time()


def body(path: str) -> str:
    kind, node = path.strip("/").split("/")
    if kind == "gpu":
        lines = []
        for gpu, util in enumerate(UTIL[node]):
            labels = f'gpu="{gpu}",UUID="GPU-{node}-{gpu}",device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3"'
            lines += [f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {util}", f"DCGM_FI_DEV_FB_USED{{{labels}}} 40960",
                      f"DCGM_FI_DEV_POWER_USAGE{{{labels}}} 500"]  # fmt: skip
        return "\n".join(lines) + "\n"
    if node == "head":
        return (
            'hpcc_slurm_job_node_info{job_id="41",slurm_node="gpu-000",user="ana",job_name="llama <b>70b</b>"} 1\n'
            'hpcc_slurm_job_node_info{job_id="41",slurm_node="gpu-001",user="ana",job_name="llama <b>70b</b>"} 1\n'
            'hpcc_slurm_nodes{group="gpu",state="drain"} 1\nhpcc_slurm_nodes{group="gpu",state="idle"} 2\n'
            'hpcc_controller_nodes{group="gpu",state="replacing"} 0\n'
        )
    moved = int((time.time() - STARTED) * 1e9)  # 1 GB/s a device
    return f'hpcc_efa_bytes_total{{device="rdmap0",direction="rx"}} {moved}\n'


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
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
    work = tmp_path_factory.mktemp("prometheus")

    def group(job, node, group):
        labels = {"__metrics_path__": f"/{job}/{node}", metrics.LABEL_NODE: node, metrics.LABEL_GROUP: group,
                  metrics.LABEL_INSTANCE_ID: f"i-{node}"}  # fmt: skip
        return {"targets": [at], "labels": labels}

    (work / "gpus.json").write_text(json.dumps([group("gpu", n, "gpu") for n in UTIL]))
    (work / "nodes.json").write_text(json.dumps([group("node", n, "gpu") for n in UTIL] + [group("node", "head", "")]))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (work / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n"
        f"- job_name: {metrics.JOB_GPU}\n  file_sd_configs: [{{files: ['{work / 'gpus.json'}']}}]\n"
        f"- job_name: {metrics.JOB_NODE}\n  file_sd_configs: [{{files: ['{work / 'nodes.json'}']}}]\n"
    )
    proc = subprocess.Popen(
        [tool("prometheus"), f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline, frame = time.monotonic() + 60, None
    while time.monotonic() < deadline:
        try:
            frame = ops_top.read_frame(base)
            if frame.jobs and all(not math.isnan(r.efa) for r in frame.groups if r.name == "gpu"):
                break
        except OpsError:
            pass
        assert proc.poll() is None, "prometheus exited"
        time.sleep(0.5)
    yield base
    proc.terminate()
    proc.wait(timeout=20)
    server.shutdown()


def test_a_frame_has_each_group_and_each_running_job_with_its_nodes_and_worst_node(prometheus):
    frame = ops_top.read_frame(prometheus)
    groups = {r.name: r for r in frame.groups}
    gpu = groups["gpu"]
    assert gpu.nodes == ["gpu-000", "gpu-001", "gpu-002"] and groups["(head)"].nodes == ["head"]
    assert gpu.gpu == pytest.approx((85 + 35 + 70) / 3) and (gpu.worst, gpu.worst_node) == (35, "gpu-001")
    assert (gpu.memory, gpu.power, gpu.draining, gpu.replacing) == (6 * 40960, 3000, 1, 0)
    assert gpu.efa > 0  # rate() over 2 minutes of a counter scraped for seconds: some, not yet 3 GB/s
    (job,) = frame.jobs
    assert (job.name, job.user, job.job_name, job.nodes) == ("41", "ana", "llama <b>70b</b>", ["gpu-000", "gpu-001"])
    assert job.gpu == pytest.approx(60) and (job.worst, job.worst_node) == (35, "gpu-001")


def test_hpcc_top_once_prints_the_job_with_its_nodes(prometheus):
    out = CliRunner().invoke(app, ["top", "--once", "--prometheus", prometheus, "--sort", "worst"])
    assert out.exit_code == 0, out.output
    assert "41" in out.output and "gpu-000, gpu-001" in out.output and "llama <b>70b</b>" in out.output
    assert "35% gpu-001" in out.output and "ana" in out.output


def test_rows_sort_busiest_first_the_worst_gpu_lowest_first_and_unknown_last():
    rows = [ops_top.Row("a", gpu=50, worst=10), ops_top.Row("b", gpu=90, worst=80), ops_top.Row("c")]
    assert [r.name for r in ops_top.sorted_rows(rows, "gpu")] == ["b", "a", "c"]
    assert [r.name for r in ops_top.sorted_rows(rows, "worst")] == ["a", "b", "c"]
    with pytest.raises(OpsError, match="one of name, nodes"):
        ops_top.sorted_rows(rows, "temperature")


@pytest.mark.parametrize(
    "args, words",
    [
        (["--sort", "temperature"], "--sort temperature: one of name"),
        (["--prometheus", "head:9090"], "give its URL"),
    ],
)
def test_bad_options_are_a_usage_error(args, words):
    out = CliRunner().invoke(app, ["top", "--once", *args])
    assert out.exit_code == 2 and words in out.output, out.output


def test_a_prometheus_that_does_not_answer_is_a_message_and_exit_1():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    out = subprocess.run(
        [sys.executable, "-m", "infra.ops.cli", "top", "--once", "--prometheus", f"http://127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1 and "did not answer" in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_the_forward_reaches_the_heads_prometheus_on_its_own_address_through_session_manager():
    argv = ops_top.forward_argv("us-east-1", "i-0head", "10.0.0.5", 49152)
    assert argv[:3] == ["aws", "ssm", "start-session"]
    assert argv[argv.index("--document-name") + 1] == "AWS-StartPortForwardingSessionToRemoteHost"
    assert argv[-1] == f"host=10.0.0.5,portNumber={metrics.PROMETHEUS_PORT},localPortNumber=49152"


def test_a_forward_that_ends_says_what_it_printed():
    with pytest.raises(OpsError, match="ended: no such target"):
        with ops_top.Forward(["sh", "-c", "echo no such target >&2; exit 1"], 9, deadline_seconds=10):
            pass
