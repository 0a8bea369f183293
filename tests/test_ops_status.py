"""Readiness belongs to the live instance, membership convergence by hostsVersion, dead nodes named with the
replace command, and node-written text printed as plain text (clusters planned into moto)."""

from __future__ import annotations

import pytest
from rich.console import Console
from typer.testing import CliRunner

from infra.cli import app
from infra.naming import Paths
from infra.ops.aws import Aws
from infra.ops.readiness import wait_ready
from infra.ops.status import cluster_status, plain, replace_command, table
from infra.plan.embedded_aws import embedded_aws
from infra.plan.runner import plan_stack_file
from tests.ops_support import EXAMPLES, live_instance, put_status

REGION = "us-east-1"
C = "cpu-oneccl"
NODES = ["head", "compute-000", "compute-001", "compute-002", "compute-003"]


@pytest.fixture
def cluster():
    with embedded_aws(REGION) as env:
        plan_stack_file(EXAMPLES / "c6i-oneccl.yaml", aws=env)
        for node in NODES:
            put_status(env, C, node, phase="ready", step="launch-env")
        yield env


def rows(env=None):
    return {r.node: r for r in cluster_status(Aws(REGION), C)}


def status_cli(*extra):
    return CliRunner().invoke(app, ["status", "--cluster", C, "--region", REGION, *extra], env={"COLUMNS": "300"})


def test_a_ready_status_from_another_instance_is_pending_in_status_and_in_the_wait(cluster):
    put_status(cluster, C, "compute-001", phase="ready", step="launch-env", instanceId="i-0old")
    put_status(cluster, C, "compute-002", phase="ready", step="launch-env", instanceId=None)
    got = rows()
    assert got["compute-001"].phase == "pending" and not got["compute-001"].ready
    assert got["compute-001"].message == "status written by i-0old (a previous instance)"
    assert got["compute-002"].phase == "pending" and "names no instance" in got["compute-002"].message
    assert got["compute-000"].ready
    waited = wait_ready(Aws(REGION), C, NODES, timeout=0, poll=0, console=Console(record=True), sleep=lambda _: None)
    assert waited.timed_out and [r.node for r in waited.waiting] == ["compute-001", "compute-002"]
    out = status_cli()
    assert "status written by i-0old (a previous instance)" in out.output and "3/5 nodes ready" in out.output


def test_a_node_converges_when_it_has_applied_the_current_hosts_version(cluster):
    ssm = cluster.client("ssm")
    hosts = ssm.get_parameter(Name=Paths(C).hosts)["Parameter"]
    ssm.put_parameter(Name=Paths(C).hosts, Value=hosts["Value"], Type="String", Overwrite=True)  # version 2
    put_status(cluster, C, "compute-000", phase="ready", step="launch-env")  # applied version 2
    got = rows()
    assert got["compute-000"].converged and not got["compute-001"].converged
    assert (got["compute-001"].hosts_version, got["compute-001"].hosts_target) == (hosts["Version"], hosts["Version"] + 1)
    out = Console(record=True, width=250)
    out.print(table(C, list(got.values())))
    hosts_column = {line.split("│")[1].strip(): line.split("│")[8].strip() for line in out.export_text().splitlines()
                    if line.startswith("│")}
    assert hosts_column == {"head": "1/2", "compute-000": "2/2", "compute-001": "1/2", "compute-002": "1/2",
                            "compute-003": "1/2"}

    polls = []

    def agents_apply(_seconds):
        polls.append(1)
        for node in NODES:
            put_status(cluster, C, node, phase="ready", step="launch-env")

    waited = wait_ready(Aws(REGION), C, NODES, timeout=600, poll=0, console=Console(record=True), sleep=agents_apply)
    assert waited.ok and len(polls) == 1


def test_dead_or_failed_nodes_are_named_with_the_replace_command(cluster):
    ec2 = cluster.client("ec2")
    ec2.terminate_instances(InstanceIds=[live_instance(cluster, C, "compute-003")["InstanceId"]])
    ec2.stop_instances(InstanceIds=[live_instance(cluster, C, "compute-000")["InstanceId"]])
    put_status(cluster, C, "compute-001", phase="failed", step="efa", ok=False, message="no EFA device")
    out = status_cli()
    assert out.exit_code == 1
    assert "replace them with: hpcc replace Pulumi.<stack>.yaml --stack <stack> compute-000 compute-001 compute-003" \
        in out.output
    assert replace_command(["compute-003"], "bert") == "hpcc replace Pulumi.bert.yaml --stack bert compute-003"


def test_all_ready_names_nothing_to_replace(cluster):
    out = status_cli()
    assert out.exit_code == 0 and "hpcc replace" not in out.output and "5/5 nodes ready" in out.output


def test_node_text_with_markup_and_escapes_prints_as_plain_text(cluster):
    put_status(cluster, C, "compute-002", phase="failed", step="[bold]mount", ok=False, message="mount said [/] and [red]x",
               logTail=["\x1b[31mred line\x1b[0m", "\x1b]0;title\x07after osc", "bell\x07 and [/]"])
    out = status_cli()
    assert out.exit_code == 1 and "Traceback" not in out.output
    assert "mount said [/] and [red]x" in out.output and "[bold]mount" in out.output
    assert "red line" in out.output and "after osc" in out.output and "bell and [/]" in out.output
    assert "\x1b" not in out.output and "\x07" not in out.output


@pytest.mark.parametrize("raw, clean", [
    ("\x1b[1;31mred\x1b[0m", "red"), ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"), ("a\x00b\rc\td", "abc\td"),
    ("\x9b31mc1", "31mc1"), ("plain [/] text", "plain [/] text"),
])
def test_plain_strips_terminal_control(raw, clean):
    assert plain(raw) == clean
