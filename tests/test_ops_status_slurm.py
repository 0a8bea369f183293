"""`hpcc status` with Slurm: each node's Slurm state beside its bootstrap phase, from the head's own status (its
agent writes sinfo's states and host lists there), shown only when the scheduler is on; node-written text stays
plain text (one cluster planned into moto: examples/c6i-oneccl.yaml with `scheduler: slurm`)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from infra.cli import app
from infra.naming import Paths
from infra.ops.aws import Aws
from infra.ops.status import cluster_status, slurm_states
from infra.plan.embedded_aws import embedded_aws
from infra.plan.runner import plan_stack_file
from tests.ops_support import put_status, stack_file

REGION, C = "us-east-1", "cpu-oneccl"
COMPUTE = [f"compute-{i:03d}" for i in range(4)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with embedded_aws(REGION) as env:
        plan_stack_file(stack_file(tmp_path_factory.mktemp("slurm"), "c6i-oneccl", scheduler="slurm"), aws=env)
        for node in COMPUTE:
            put_status(env, C, node, phase="ready", step="launch-env")
        yield env


def set_scheduler(env, scheduler: str) -> None:
    """The settings parameter as the program would render it for `scheduler` (only the SCHEDULER line matters)."""
    ssm = env.client("ssm")
    text = ssm.get_parameter(Name=Paths(C).settings)["Parameter"]["Value"]
    lines = [f"SCHEDULER={scheduler}" if line.startswith("SCHEDULER=") else line for line in text.splitlines()]
    ssm.put_parameter(Name=Paths(C).settings, Value="\n".join(lines) + "\n", Type="String", Overwrite=True)


def columns() -> tuple[list[str], dict[str, dict[str, str]]]:
    """`hpcc status`'s table as header names and node -> column -> cell."""
    out = CliRunner().invoke(app, ["status", "--cluster", C, "--region", REGION], env={"COLUMNS": "400"})
    assert "Traceback" not in out.output, out.output
    lines = [line for line in out.output.splitlines() if line.startswith("┃") or line.startswith("│")]
    header = [cell.strip() for cell in lines[0].strip("┃").split("┃")]
    rows = {}
    for line in lines[1:]:
        cells = [cell.strip() for cell in line.strip("│").split("│")]
        rows[cells[0]] = dict(zip(header, cells))
    return header, rows


def test_each_node_shows_its_slurm_state_beside_its_phase(cluster):
    set_scheduler(cluster, "slurm")
    put_status(cluster, C, "head", phase="ready", step="launch-env",
               slurm={"idle": "compute-[000-001]", "drained": "compute-002"})
    header, rows = columns()
    assert header[header.index("phase") + 1] == "slurm"
    assert {node: row["slurm"] for node, row in rows.items()} == {
        "head": "-", "compute-000": "idle", "compute-001": "idle", "compute-002": "drained",
        "compute-003": "-"}  # the head runs no slurmd; compute-003 is not in Slurm's lists (yet)


def test_the_column_is_there_while_the_head_has_not_reported(cluster):
    set_scheduler(cluster, "slurm")
    put_status(cluster, C, "head", phase="efa", step="efa")
    header, rows = columns()
    assert "slurm" in header and {row["slurm"] for row in rows.values()} == {"-"}


def test_no_slurm_column_without_the_scheduler(cluster):
    set_scheduler(cluster, "none")
    put_status(cluster, C, "head", phase="ready", step="launch-env")
    header, _ = columns()
    assert "slurm" not in header and header[header.index("phase") + 1] == "step"
    assert all(r.slurm is None for r in cluster_status(Aws(REGION), C))


def test_a_head_still_reporting_after_slurm_was_turned_off_shows_its_states(cluster):
    set_scheduler(cluster, "none")
    put_status(cluster, C, "head", phase="ready", step="launch-env", slurm={"idle": "compute-000"})
    header, rows = columns()
    assert "slurm" in header and rows["compute-000"]["slurm"] == "idle"


def test_a_previous_head_instance_s_report_is_not_the_cluster_s(cluster):
    set_scheduler(cluster, "slurm")
    put_status(cluster, C, "head", phase="ready", slurm={"idle": "compute-[000-003]"}, instanceId="i-0old")
    states = {r.node: r.slurm for r in cluster_status(Aws(REGION), C)}
    assert set(states.values()) == {"-"}


def test_node_written_states_print_as_plain_text(cluster):
    set_scheduler(cluster, "slurm")
    put_status(cluster, C, "head", phase="ready", slurm={"[red]idle\x1b[31m": "compute-000", "down*": "compute-001"})
    _, rows = columns()
    assert rows["compute-000"]["slurm"] == "[red]idle" and rows["compute-001"]["slurm"] == "down*"


@pytest.mark.parametrize("reported, expected", [
    ({"idle": "compute-[000-002,005]", "mixed": "compute-003"},
     {"compute-000": "idle", "compute-001": "idle", "compute-002": "idle", "compute-005": "idle",
      "compute-003": "mixed"}),
    ({"idle~": "compute-[000-001],compute-007"}, {"compute-000": "idle~", "compute-001": "idle~", "compute-007": "idle~"}),
    ({"idle": "compute-[000-"}, {}),  # not a host list
    ({"idle": "compute-[0-99999999]"}, {}),  # python-hostlist refuses ranges past its MAX_SIZE
    ({"idle": ["compute-000"], 3: "compute-001"}, {}),  # not state -> host-list strings
    ("idle compute-000", {}), (None, {}),
])
def test_slurm_states_expands_sinfo_host_lists_and_skips_the_rest(reported, expected):
    assert slurm_states(reported) == expected
