"""`hpcc status` with Slurm: each node's Slurm state beside its bootstrap phase, from the head's own status (its
agent writes sinfo's states and host lists there), shown only when the scheduler is on; node-written text stays
plain text (a controller-run cluster in moto, tests/ops/fleet.py)."""

from __future__ import annotations

import pytest
from moto import mock_aws
from typer.testing import CliRunner

from hpcc_contract.names import Paths
from infra.ops.aws import Aws
from infra.ops.cli import app
from infra.ops.status.cluster import cluster_status, slurm_states
from tests.ops.fleet import REGION, C, fleet


@pytest.fixture(scope="module")
def cluster():
    with mock_aws():
        yield fleet({"gpu": 4})


def set_scheduler(f, scheduler: str) -> None:
    """The settings parameter's SCHEDULER line (the only line that matters here)."""
    name = Paths(C).settings
    text = f.ssm.get_parameter(Name=name)["Parameter"]["Value"]
    lines = [f"SCHEDULER={scheduler}" if line.startswith("SCHEDULER=") else line for line in text.splitlines()]
    f.ssm.put_parameter(Name=name, Value="\n".join(lines) + "\n", Type="String", Overwrite=True)


def put_status(f, node: str, **fields) -> None:
    """`node`'s own status (the head's carries the Slurm states); instanceId overrides who wrote it."""
    iid = f.head if node == "head" else f.ids[node]
    writer = fields.pop("instanceId", iid)
    f.status(iid, name=node, **fields)
    if writer != iid:  # a body naming another instance under this instance's key
        import json

        key = f"status/arn:aws:ec2:{REGION}:123456789012:instance/{iid}.json"
        body = json.loads(f.s3.get_object(Bucket=f.bucket, Key=key)["Body"].read())
        body["instance_id"] = writer
        f.s3.put_object(Bucket=f.bucket, Key=key, Body=json.dumps(body).encode())


def columns() -> tuple[list[str], dict[str, dict[str, str]]]:
    """`hpcc status`'s node table as header names and node -> column -> cell."""
    out = CliRunner().invoke(app, ["status", "--cluster", C, "--region", REGION], env={"COLUMNS": "400"})
    assert "Traceback" not in out.output, out.output
    text = out.output[out.output.index(f"cluster {C}: nodes") :]
    lines = [line for line in text.splitlines() if line.startswith("┃") or line.startswith("│")]
    header = [cell.strip() for cell in lines[0].strip("┃").split("┃")]
    rows = {}
    for line in lines[1:]:
        cells = [cell.strip() for cell in line.strip("│").split("│")]
        rows[cells[0]] = dict(zip(header, cells, strict=True))
    return header, rows


def test_each_node_shows_its_slurm_state_beside_its_phase(cluster):
    set_scheduler(cluster, "slurm")
    put_status(cluster, "head", phase="ready", step="launch-env", slurm={"idle": "gpu-[000-001]", "drained": "gpu-002"})
    header, rows = columns()
    assert header[header.index("phase") + 1] == "slurm"
    assert {node: row["slurm"] for node, row in rows.items()} == {
        "head": "-",
        "gpu-000": "idle",
        "gpu-001": "idle",
        "gpu-002": "drained",
        "gpu-003": "-",
    }  # the head runs no slurmd; gpu-003 is not in Slurm's lists (yet)


def test_the_column_is_there_while_the_head_has_not_reported(cluster):
    set_scheduler(cluster, "slurm")
    put_status(cluster, "head", phase="efa", step="efa")
    header, rows = columns()
    assert "slurm" in header and {row["slurm"] for row in rows.values()} == {"-"}


def test_no_slurm_column_without_the_scheduler(cluster):
    set_scheduler(cluster, "none")
    put_status(cluster, "head", phase="ready", step="launch-env")
    header, _ = columns()
    assert "slurm" not in header and header[header.index("phase") + 1] == "step"
    assert all(r.slurm is None for r in cluster_status(Aws(REGION), C).nodes)


def test_a_head_still_reporting_after_slurm_was_turned_off_shows_its_states(cluster):
    set_scheduler(cluster, "none")
    put_status(cluster, "head", phase="ready", step="launch-env", slurm={"idle": "gpu-000"})
    header, rows = columns()
    assert "slurm" in header and rows["gpu-000"]["slurm"] == "idle"


def test_a_previous_head_instance_s_report_is_not_the_cluster_s(cluster):
    set_scheduler(cluster, "slurm")
    put_status(cluster, "head", phase="ready", slurm={"idle": "gpu-[000-003]"}, instanceId="i-0old")
    states = {r.node: r.slurm for r in cluster_status(Aws(REGION), C).nodes}
    assert set(states.values()) == {"-"}


def test_node_written_states_print_as_plain_text(cluster):
    set_scheduler(cluster, "slurm")
    put_status(cluster, "head", phase="ready", slurm={"[red]idle\x1b[31m": "gpu-000", "down*": "gpu-001"})
    _, rows = columns()
    assert rows["gpu-000"]["slurm"] == "[red]idle" and rows["gpu-001"]["slurm"] == "down*"


@pytest.mark.parametrize(
    "reported, expected",
    [
        (
            {"idle": "gpu-[000-002,005]", "mixed": "gpu-003"},
            {"gpu-000": "idle", "gpu-001": "idle", "gpu-002": "idle", "gpu-005": "idle", "gpu-003": "mixed"},
        ),
        ({"idle~": "gpu-[000-001],gpu-007"}, {"gpu-000": "idle~", "gpu-001": "idle~", "gpu-007": "idle~"}),
        ({"idle": "gpu-[000-"}, {}),  # not a host list
        ({"idle": "gpu-[0-99999999]"}, {}),  # python-hostlist refuses ranges past its MAX_SIZE
        ({"idle": ["gpu-000"], 3: "gpu-001"}, {}),  # not state -> host-list strings
        ("idle gpu-000", {}),
        (None, {}),
    ],
)
def test_slurm_states_expands_sinfo_host_lists_and_skips_the_rest(reported, expected):
    assert slurm_states(reported) == expected
