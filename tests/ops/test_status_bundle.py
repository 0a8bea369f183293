"""`hpcc status` shows the bundle each node's agent runs, the nodes drifted from their boot steps, and a halted
rollout once for the cluster (from the head's status)."""

from __future__ import annotations

import pytest
from moto import mock_aws

from infra.ops.aws import Aws
from infra.ops.status.cluster import cluster_status
from tests.ops.fleet import REGION, C, fleet
from tests.ops.test_status import status_cli

A, B = "a" * 64, "b" * 64


@pytest.fixture
def f():
    with mock_aws():
        yield fleet({"gpu": 3})


def test_status_shows_each_nodes_bundle_drift_and_a_halted_rollout_once(f):
    halt = f"halted: bundle {B[:12]} refused on canary gpu-000: self-check failed"
    f.status(f.head, name="head", phase="ready", step="sync", bundle=A, rollout=halt, generation=1)
    f.status(f.ids["gpu-000"], name="gpu-000", phase="ready", bundle=A, refused={"sha256": B}, generation=1)
    f.status(
        f.ids["gpu-001"],
        name="gpu-001",
        phase="ready",
        bundle=B,
        generation=1,
        drifted=f"boot steps changed in {B[:12]}: replace when idle",
    )
    f.status(f.ids["gpu-002"], name="gpu-002", phase="ready", bundle="../not-a-hash", generation=1)
    got = cluster_status(Aws(REGION), C).rows()
    assert (got["head"].bundle, got["gpu-001"].bundle, got["gpu-002"].bundle) == (A[:12], B[:12], None)
    assert got["gpu-001"].drifted and not got["gpu-000"].drifted and got["gpu-000"].ready
    out = status_cli()
    assert out.exit_code == 0, out.output
    assert out.output.count(f"rollout {halt}") == 1 and "drifted, replaced when idle: gpu-001" in out.output
    assert f"{B[:12]} drifted" in out.output and "4/4 nodes ready" in out.output
