"""status, hostfile, throttling backoff and reap against clusters planned into moto by the real program."""

from __future__ import annotations


import pytest
from botocore.exceptions import ClientError
from typer.testing import CliRunner

from infra.cli import app
from infra.hostfile import HostEntry, horovod, hosts, mpich, openmpi
from infra.ops.aws import Aws, Backoff
from infra.ops import hostfile as ops_hostfile
from infra.ops.status import cluster_status, summary
from infra.plan.embedded_aws import embedded_aws
from infra.plan.runner import plan_stack_file
from tests.ops_support import EXAMPLES, inject_errors, put_status

REGION = "us-east-1"


def quiet_aws(**backoff) -> tuple[Aws, list[float]]:
    slept: list[float] = []
    return Aws(REGION, backoff=Backoff(sleep=slept.append, **backoff)), slept


@pytest.fixture(scope="module")
def cpu_cluster():
    with embedded_aws(REGION) as env:
        yield plan_stack_file(EXAMPLES / "c6i-oneccl.yaml", aws=env), env


def test_status_lists_every_node_with_state_and_phase(cpu_cluster):
    result, env = cpu_cluster
    aws, _ = quiet_aws()
    rows = cluster_status(aws, "cpu-oneccl")
    assert [r.node for r in rows] == ["head", "compute-000", "compute-001", "compute-002", "compute-003"]
    assert {r.state for r in rows} == {"running"} and {r.phase for r in rows} == {"pending"}
    by_node = {n["name"]: n for n in result.outputs["computeNodes"]}
    assert all(r.instance_id == by_node[r.node]["instanceId"] for r in rows[1:])


def test_node_that_reports_failure_is_named_with_step_and_log(cpu_cluster):
    _, env = cpu_cluster
    put_status(env, "cpu-oneccl", "compute-002", phase="failed", step="mount", ok=False,
               message="mount.lustre: timed out", logTail=["[mount] trying fs-1@tcp:/fsx", "[mount] gave up"])
    try:
        aws, _ = quiet_aws()
        rows = {r.node: r for r in cluster_status(aws, "cpu-oneccl")}
        bad = rows["compute-002"]
        assert bad.failed and bad.step == "mount" and bad.log_tail[-1] == "[mount] gave up"
        assert "failed: compute-002" in summary(list(rows.values()))
        out = CliRunner().invoke(app, ["status", "--cluster", "cpu-oneccl", "--region", REGION])
        assert out.exit_code == 1 and "compute-002" in out.output and "mount.lustre: timed out" in out.output
    finally:
        put_status(env, "cpu-oneccl", "compute-002", phase="pending")


def test_hostfile_rebuilt_from_tags_matches_the_stack_output(cpu_cluster):
    result, _ = cpu_cluster
    aws, _ = quiet_aws()
    assert ops_hostfile.render(aws, "cpu-oneccl", "openmpi") == result.outputs["hostfile"]
    nodes = [HostEntry(n["name"], n["privateIp"], n["slots"]) for n in result.outputs["computeNodes"]]
    for fmt, fn in (("mpich", mpich), ("hosts", hosts), ("horovod", horovod), ("openmpi", openmpi)):
        assert ops_hostfile.render(aws, "cpu-oneccl", fmt) == fn(nodes)
    assert ops_hostfile.entries(aws, "cpu-oneccl")[0].slots == 32  # c6i.16xlarge: one rank per physical core
    out = CliRunner().invoke(app, ["hostfile", "--cluster", "cpu-oneccl", "--region", REGION, "--format", "mpich"])
    assert out.exit_code == 0 and out.output == mpich(nodes)


def test_hostfile_for_unknown_cluster_is_a_message(cpu_cluster):
    out = CliRunner().invoke(app, ["hostfile", "--cluster", "nope", "--region", REGION])
    assert out.exit_code == 1 and "no running compute instances" in out.output and "Traceback" not in out.output


def test_throttled_describe_is_absorbed_by_jittered_backoff(cpu_cluster):
    aws, slept = quiet_aws(base=0.5, cap=4.0)
    left = inject_errors(aws.client("ec2"), "DescribeInstances", ["RequestLimitExceeded", "Throttling", "RequestLimitExceeded"])
    inject_errors(aws.client("ssm"), "GetParametersByPath", ["ThrottlingException"])
    rows = cluster_status(aws, "cpu-oneccl")
    assert len(rows) == 5 and not left
    assert len(slept) == 4
    # full jitter: attempt n waits a random time in [0, min(cap, base * 2**n)]
    assert all(0 <= s <= b for s, b in zip(slept, [0.5, 1.0, 2.0, 0.5]))


def test_backoff_gives_up_and_does_not_retry_other_errors(cpu_cluster):
    aws, slept = quiet_aws(attempts=3)
    inject_errors(aws.client("ec2"), "DescribeInstances", ["Throttling"] * 3)
    with pytest.raises(ClientError, match="Throttling"):
        cluster_status(aws, "cpu-oneccl")
    assert len(slept) == 2
    aws, slept = quiet_aws()
    inject_errors(aws.client("ec2"), "DescribeInstances", ["UnauthorizedOperation"])
    with pytest.raises(ClientError, match="UnauthorizedOperation"):
        cluster_status(aws, "cpu-oneccl")
    assert slept == []


def test_backoff_delays_grow_and_are_jittered():
    b = Backoff(base=1.0, cap=10.0, rand=lambda: 1.0)
    assert [b.delay(i) for i in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert Backoff(base=1.0, cap=10.0, rand=lambda: 0.25).delay(3) == 2.0
