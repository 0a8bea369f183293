"""`hpcc top` (infra/ops/top.py): the real Prometheus scrapes synthetic exporters of three GPU nodes and the head's
controller series (tests/ops/prometheus_support.py); one frame shows each group and each running job with its nodes, GPU
utilisation (the mean and the worst node), memory, power and EFA throughput; bad input and a Prometheus that does not
answer are messages and a non-zero exit, never a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from hpcc_contract import metrics
from infra.ops import OpsError, forward
from infra.ops import top as ops_top
from infra.ops.cli import app
from tests.ops.prometheus_support import synthetic_prometheus


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    with synthetic_prometheus(tmp_path_factory.mktemp("prometheus")) as base:
        yield base


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
    argv = forward.forward_argv("us-east-1", "i-0head", "10.0.0.5", metrics.PROMETHEUS_PORT, 49152)
    assert argv[:3] == ["aws", "ssm", "start-session"]
    assert argv[argv.index("--document-name") + 1] == "AWS-StartPortForwardingSessionToRemoteHost"
    assert argv[-1] == f"host=10.0.0.5,portNumber={metrics.PROMETHEUS_PORT},localPortNumber=49152"


def test_a_forward_that_ends_says_what_it_printed():
    with pytest.raises(OpsError, match="ended: no such target"):
        with forward.Forward(["sh", "-c", "echo no such target >&2; exit 1"], 9, deadline_seconds=10):
            pass
