"""At 512 compute nodes the nodes stay under SSM's default 40 requests/s and membership converges within
2 minutes: the arithmetic, for every regime of cluster size the config allows."""

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
    SSM_READS,
    SSM_REQUESTS_PER_SECOND,
    STATUS_WRITES,
    TARGET_SHARE,
    agent_requests_per_second,
    convergence_seconds,
    first_call_pacing,
    pacing_for,
    sync_seconds,
)
from infra.render.steps import STEPS
from tests.render.bootstrap_cases import configs, contexts, settings

BUDGET = SSM_REQUESTS_PER_SECOND * TARGET_SHARE


def test_calls_per_node_are_a_small_constant():
    # hosts + settings in one read, fsx; a status write for each of the 11 steps plus ready/failed; the keys
    assert (SSM_READS, STATUS_WRITES, CALLS_PER_NODE) == (2, 12, 18)
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


ALL_SIZES = range(1, MAX_COMPUTE_NODES + 2)  # head + 0..512 compute nodes
# The sizes that can behave differently: the smallest and largest, and both sides of every change of regime.
SIZES = sorted({1, ALL_SIZES[-1]} | {m for n in ALL_SIZES[1:] if _floors(n) != _floors(n - 1) for m in (n - 1, n)})


def test_the_sizes_checked_cover_every_regime():
    assert len({_floors(n) for n in SIZES}) == len({_floors(n) for n in ALL_SIZES}) >= 3


# Above FIRST_CALL_NODES the SSM pacing model cannot converge in 2 minutes (4,097 nodes: 384 s): membership and
# status move to S3 (issue 19, the node side), after which the agents' SSM calls no longer scale with the count.
# Strict: once the node side re-paces, these pass and the mark must go.
OVER_SSM_MODEL = pytest.mark.xfail(strict=True, reason="the SSM pacing model ends at 512 nodes; issue 19 node side")


@pytest.mark.parametrize(
    "nodes", [pytest.param(n, marks=OVER_SSM_MODEL) if n > FIRST_CALL_NODES + 1 else n for n in SIZES]
)
def test_every_cluster_size_stays_in_budget_and_converges_within_2_minutes(nodes):
    """One pacer per node: the cluster makes at most nodes / interval calls a second, agents or not; the
    agents' ticks alone ask less; a hosts change is seen within one tick and one pacer turn."""
    pacing = pacing_for(nodes)
    assert pacing.cluster_requests_per_second() <= BUDGET + 1e-9
    assert pacing.poll_seconds * 1000 >= pacing.api_interval_ms  # polls never outpace the interval
    assert sync_seconds(pacing) * 1000 >= pacing.api_interval_ms * 1.25  # a tick's call never waits its turn
    assert agent_requests_per_second(pacing) <= BUDGET
    assert convergence_seconds(pacing) <= CONVERGENCE_TARGET_SECONDS


def test_512_compute_nodes_worked_example():
    """513 nodes (512 compute + head), budget 40/s x 0.75 = 30/s:
    interval = ceil(513 x 1000 / 30) = 17,100 ms between two calls of one node; cluster rate = 513 / 17.1 s = 30/s;
    a booting node's 18 calls cost it at most 18 x 17.1 s x 1.25 = 384.8 s of waiting for its turn;
    agent tick = ceil(17.1 x 1.25) = 22 s, so settled agents ask 513 / 22 = 23.3/s;
    convergence <= 22 x 1.25 + 17.1 x 1.25 = 27.5 + 21.4 = 48.9 s (plus AWS's answer) <= 120 s."""
    pacing = pacing_for(513)
    assert pacing.api_interval_ms == 17_100 and pacing.poll_seconds == 18
    assert pacing.cluster_requests_per_second() == pytest.approx(30.0)
    assert pacing.pacing_delay_seconds() == pytest.approx(384.75)
    assert sync_seconds(pacing) == 22 and agent_requests_per_second(pacing) == pytest.approx(23.32, abs=0.01)
    assert convergence_seconds(pacing) == pytest.approx(48.875)


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
