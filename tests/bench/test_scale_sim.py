"""Issue 38's scale simulator (scripts/bench_scale.py, scripts/scale/) run small: today's behaviour, as the issue
states it, must come out of the simulated runs of the real controller and signer, so that a change to the code (or
to the model) that alters it fails here. Sizes and horizons are small; no assertion reads the wall clock."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from scale import scenarios  # noqa: E402 - after sys.path gets scripts/
from scale.report import table  # noqa: E402 - after sys.path gets scripts/
from scale.world import STATUS_GET_SECONDS, Model  # noqa: E402 - after sys.path gets scripts/

SMALL, LARGER = 16, 200


@pytest.fixture(scope="module")
def bring_ups():
    return {n: scenarios.bring_up(Model(n), horizon=3600) for n in (SMALL, LARGER)}


@pytest.fixture(scope="module")
def settled():
    return {n: scenarios.settled(Model(n), steady=900, horizon=3600) for n in (SMALL, LARGER)}


def test_a_few_nodes_booting_at_once_all_get_their_certificates_and_come_up(bring_ups):
    small = bring_ups[SMALL]
    assert small["all_ready"] is not None and small["ready"] == SMALL
    assert not small["boot_failures"]


def test_beyond_a_few_hundred_booting_at_once_most_boots_fail_waiting_for_a_certificate(bring_ups):
    """The head signs through its own per-node pacer (3 paced S3 calls a node): at 200 nodes most boots time out."""
    larger = bring_ups[LARGER]
    assert larger["all_ready"] is None
    assert larger["boot_failures"].get("no host certificate", 0) > LARGER // 2
    assert larger["signed_per_minute"] < bring_ups[SMALL]["signed_per_minute"]
    assert larger["head_s3_per_certificate"] > 2  # its keys' lookup, their read, the certificate's write, and more


def test_replacement_is_all_or_nothing_one_instance_short_replaces_none():
    n, k = 64, 4  # below the systemic threshold (5 at 64 nodes): the deaths are each node's own
    short = scenarios.deaths(Model(n), k, capacity=k - 1)
    assert short["replaced"] == 0 and short["launch_errors"].get("InsufficientInstanceCapacity", 0) >= 1
    enough = scenarios.deaths(Model(n), k, capacity=k, horizon=3600)
    assert enough["replaced"] == k


def test_a_restarted_controller_reads_every_status_one_at_a_time_before_its_first_decision(settled):
    for n, r in settled.items():
        assert r["restart_to_first_decision"] >= n * STATUS_GET_SECONDS


def test_membership_and_verdicts_reach_their_readers_later_as_the_cluster_grows(settled):
    small, larger = settled[SMALL], settled[LARGER]
    assert small["generations"] >= 2  # one replacement publishes more than one generation
    assert larger["seen_p99"] > small["seen_p99"]
    assert larger["heartbeat_gap_max"] > small["heartbeat_gap_max"]
    # every node re-reads a secret per membership change, and the controller re-reads its changed status
    assert larger["secret_reads_per_change"] >= LARGER - 2
    assert larger["controller_reads_per_change"] >= LARGER - 2


def test_a_failed_verdict_waits_longer_for_the_pacer_in_a_larger_cluster():
    small, larger = (scenarios.verdicts(Model(n), window=300) for n in (SMALL, LARGER))
    assert small["written"] == SMALL and larger["written"] == LARGER
    assert larger["p99"] > small["p99"]


def test_the_table_prints_every_figure_for_every_size():
    model = Model(8)
    result = {
        "bring_up": scenarios.bring_up(model, horizon=3600),
        "settled": scenarios.settled(model, steady=300, horizon=3600),
        "deaths": scenarios.deaths(model, 2, None, horizon=3600),
        "deaths_63": scenarios.deaths(model, 2, 1),
        "verdicts": scenarios.verdicts(model, window=60),
        "timeout": model.timers.heartbeat_timeout_seconds,
    }
    text = table({8: result})
    assert text.count("\n") == 18 and "8 nodes" in text and "None" not in text
