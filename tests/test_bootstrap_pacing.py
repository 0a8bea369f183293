"""At 512 compute nodes the bootstrap stays under SSM's default 40 requests/s: the arithmetic."""

import pytest

from infra.bootstrap_pacing import (CALLS_PER_NODE, SSM_REQUESTS_PER_SECOND, SSM_READS, STATUS_WRITES, TARGET_SHARE,
                                    pacing_for)
from tests.bootstrap_cases import contexts


def test_calls_per_node_are_a_small_constant():
    # hosts + fsx reads, a status write for each of the 7 steps plus ready/failed, the key read (+ head's write)
    assert (SSM_READS, STATUS_WRITES, CALLS_PER_NODE) == (2, 8, 12)


@pytest.mark.parametrize("nodes", [2, 3, 9, 65, 129, 257, 513, 1025])
def test_the_cluster_stays_within_its_share_of_ssm_throughput(nodes):
    """Each node spaces its calls by the interval, so the cluster makes at most nodes / interval calls a second."""
    pacing = pacing_for(nodes)
    assert pacing.cluster_requests_per_second() <= SSM_REQUESTS_PER_SECOND * TARGET_SHARE + 1e-9
    assert pacing.poll_seconds * 1000 >= pacing.api_interval_ms  # polls never outpace the interval


def test_512_compute_nodes_worked_example():
    """513 nodes (512 compute + head), budget 40/s x 0.75 = 30/s:
    interval = ceil(513 x 1000 / 30) = 17,100 ms between two calls of one node;
    cluster rate = 513 / 17.1 s = 30.0 requests/s <= 40;
    a node's 12 calls then cost it at most 12 x 17.1 s x 1.25 (jitter) = 256.5 s of waiting for its turn."""
    pacing = pacing_for(513)
    assert pacing.api_interval_ms == 17_100
    assert pacing.cluster_requests_per_second() == pytest.approx(30.0)
    assert pacing.cluster_requests_per_second() < SSM_REQUESTS_PER_SECOND
    assert pacing.pacing_delay_seconds() == pytest.approx(256.5) and pacing.poll_seconds == 18


def test_small_clusters_barely_wait():
    pacing = pacing_for(3)
    assert pacing.api_interval_ms == 100 and pacing.pacing_delay_seconds() < 2 and pacing.poll_seconds == 5


def test_the_rendered_script_paces_with_the_computed_interval():
    for name, ctx in contexts():
        assert ctx.api_interval_ms == pacing_for(ctx.node_count + 1).api_interval_ms, name
