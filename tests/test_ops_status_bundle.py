"""`hpcc status` shows the bundle each node's agent runs, the nodes drifted from their boot steps, and a halted
rollout once for the cluster (from the head's status)."""

from __future__ import annotations

from tests.ops_support import put_status
from tests.test_ops_status import NODES, C, cluster, rows, status_cli  # noqa: F401 - cluster is a fixture

A, B = "a" * 64, "b" * 64


def test_status_shows_each_nodes_bundle_drift_and_a_halted_rollout_once(cluster):
    halt = f"halted: bundle {B[:12]} refused on canary compute-000: self-check failed"
    put_status(cluster, C, "head", phase="ready", step="sync", bundle=A, rollout=halt)
    put_status(cluster, C, "compute-000", phase="ready", step="sync", bundle=A, refused={"sha256": B, "reason": "x"},
               **{"class": "bundle"})
    put_status(cluster, C, "compute-001", phase="ready", step="sync", bundle=B,
               drifted=f"boot steps changed in {B[:12]}: replace when idle")
    put_status(cluster, C, "compute-002", phase="ready", step="sync", bundle="../not-a-hash")
    got = rows()
    assert (got["head"].bundle, got["compute-001"].bundle, got["compute-002"].bundle) == (A[:12], B[:12], None)
    assert got["compute-001"].drifted and not got["compute-000"].drifted and got["compute-000"].ready
    out = status_cli()
    assert out.exit_code == 0, out.output
    assert out.output.count(f"rollout {halt}") == 1 and "drifted, replace when idle: compute-001" in out.output
    assert f"{B[:12]} drifted" in out.output and "5/5 nodes ready" in out.output
