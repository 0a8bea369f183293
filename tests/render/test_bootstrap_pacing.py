"""At every size the config allows (4,096 compute nodes) the nodes stay under SSM's default 40 requests/s and their
agents under half of S3's per-prefix rate, and membership converges within 2 minutes: the arithmetic, for every
regime of cluster size."""

import pytest

from infra.render.node_settings import parse
from infra.render.pacing import (
    CALLS_PER_NODE,
    CONVERGENCE_TARGET_SECONDS,
    FIRST_CALL_NODES,
    MAX_COMPUTE_NODES,
    MIN_INTERVAL_MS,
    MIN_POLL_SECONDS,
    MIN_SYNC_SECONDS,
    S3_REQUESTS_PER_SECOND,
    S3_TARGET_SHARE,
    SECRET_CALLS,
    SSM_READS,
    SSM_REQUESTS_PER_SECOND,
    STATUS_WRITES,
    TARGET_SHARE,
    agent_requests_per_second,
    agent_ssm_requests_per_second,
    convergence_seconds,
    first_call_pacing,
    pacing_for,
    sync_seconds,
)
from infra.render.steps import STEPS
from tests.render.bootstrap_cases import configs, contexts, settings

BUDGET = SSM_REQUESTS_PER_SECOND * TARGET_SHARE


def test_calls_per_node_are_a_small_constant():
    # the settings, fsx; the keys: paced. A status write for each of the 13 steps plus ready/failed: S3's, unpaced
    assert (SSM_READS, SECRET_CALLS, CALLS_PER_NODE, STATUS_WRITES) == (2, 4, 6, 14)
    assert STATUS_WRITES == len(STEPS) + 1  # counted from the one step list


def _floors(nodes: int) -> tuple[bool, bool, bool]:
    """Which minimums bind at this size (interval, poll, agent tick): between two changes the arithmetic is the
    same formula, and the largest size of each stretch is its worst case."""
    pacing = pacing_for(nodes)
    return (
        pacing.api_interval_ms == MIN_INTERVAL_MS,
        pacing.poll_seconds == MIN_POLL_SECONDS,
        sync_seconds(pacing) == MIN_SYNC_SECONDS,
    )


ALL_SIZES = range(1, MAX_COMPUTE_NODES + 2)  # head + 0..4,096 compute nodes
# The sizes that can behave differently: the smallest and largest, and both sides of every change of regime.
SIZES = sorted({1, ALL_SIZES[-1]} | {m for n in ALL_SIZES[1:] if _floors(n) != _floors(n - 1) for m in (n - 1, n)})


def test_the_sizes_checked_cover_every_regime():
    assert len({_floors(n) for n in SIZES}) == len({_floors(n) for n in ALL_SIZES}) >= 3


@pytest.mark.parametrize("nodes", SIZES)
def test_every_cluster_size_stays_in_budget_and_converges_within_2_minutes(nodes):
    """One pacer per node for SSM and Secrets Manager: the cluster makes at most nodes / interval such calls a
    second; the agents' ticks are S3's, at most S3_TARGET_SHARE of its per-prefix rate, and ask nothing of SSM
    while the settings stay; a new membership generation is seen within one tick (issue 38: up to 4,096 nodes)."""
    pacing = pacing_for(nodes)
    assert pacing.cluster_requests_per_second() <= BUDGET + 1e-9
    assert pacing.poll_seconds * 1000 >= pacing.api_interval_ms  # polls never outpace the interval
    assert agent_requests_per_second(pacing) <= S3_REQUESTS_PER_SECOND * S3_TARGET_SHARE
    assert agent_ssm_requests_per_second(pacing) == 0
    assert convergence_seconds(pacing) <= CONVERGENCE_TARGET_SECONDS


def test_512_compute_nodes_worked_example():
    """513 nodes (512 compute + head), SSM budget 40/s x 0.75 = 30/s:
    interval = ceil(513 x 1000 / 30) = 17,100 ms between two paced calls of one node; cluster rate = 30/s;
    a booting node's 6 paced calls cost it at most 6 x 17.1 s x 1.25 = 128.25 s of waiting for its turn;
    agent tick = 10 s (S3: 513 x 2 / 10 s = 102.6 GETs/s of the 1,750 allowed), so a new membership generation is
    seen within 10 x 1.25 = 12.5 s (plus S3's answer); at 4,096 nodes the same 12.5 s (819 GETs/s)."""
    pacing = pacing_for(513)
    assert pacing.api_interval_ms == 17_100 and pacing.poll_seconds == 18
    assert pacing.cluster_requests_per_second() == pytest.approx(30.0)
    assert pacing.pacing_delay_seconds() == pytest.approx(128.25)
    assert sync_seconds(pacing) == 10 and agent_requests_per_second(pacing) == pytest.approx(102.6)
    assert convergence_seconds(pacing) == pytest.approx(12.5)
    largest = pacing_for(MAX_COMPUTE_NODES + 1)
    assert convergence_seconds(largest) == pytest.approx(12.5) and agent_requests_per_second(largest) < 820


def test_small_clusters_barely_wait():
    pacing = pacing_for(3)
    assert pacing.api_interval_ms == 100 and pacing.pacing_delay_seconds() <= 2.5 and pacing.poll_seconds == 5
    assert sync_seconds(pacing) == 10 and convergence_seconds(pacing) < 13


def test_a_node_paces_its_first_call_for_a_512_node_cluster():
    assert MAX_COMPUTE_NODES == 4096 and FIRST_CALL_NODES == 512 and first_call_pacing() == pacing_for(513)
    for name, ctx in contexts():
        assert ctx.first_interval_ms == 17_100 and ctx.first_poll_seconds == 18, name


def test_the_settings_carry_the_pacing_of_the_clusters_size():
    values = settings()
    for stem, cfg in configs():
        pacing = pacing_for(cfg.cluster.compute.count + 1)
        got = parse(values[stem])
        assert (got.api_interval_ms, got.poll_seconds, got.sync_seconds) == (
            pacing.api_interval_ms,
            pacing.poll_seconds,
            sync_seconds(pacing),
        ), stem
