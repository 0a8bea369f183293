"""`hpcc check fabric`'s plan: rounds of disjoint pairs, suspects bisected against known-good nodes, a floor
relative to the group's median; with a fixed RNG and a measuring function that knows which links are slow."""

from __future__ import annotations

import random
from itertools import chain

import pytest

from hpcc_node.health import fabric

GOOD, SLOW = 45.0, 11.0


def nodes(n: int, prefix: str = "compute") -> list:
    return [f"{prefix}-{i:03d}" for i in range(n)]


class Links:
    """Pair bandwidth is the slower end's; `broken` nodes fail every measurement. Records every round."""

    def __init__(self, slow=(), broken=(), speeds=None):
        self.slow, self.broken, self.speeds, self.rounds = set(slow), set(broken), speeds or {}, []

    def speed(self, n):
        return self.speeds.get(n, SLOW if n in self.slow else GOOD)

    def __call__(self, pairs):
        self.rounds.append(list(pairs))
        return {p: None if set(p) & self.broken else min(self.speed(p[0]), self.speed(p[1])) for p in pairs}


@pytest.mark.parametrize("n", [2, 3, 8, 9, 64])
def test_every_node_is_measured_and_every_round_is_disjoint(n):
    plan = fabric.pair_rounds(nodes(n), 3, random.Random(7))
    assert len(plan) == 3
    for pairs in plan:
        members = list(chain.from_iterable(pairs))
        assert len(members) == len(set(members))  # disjoint: the round runs at once
        assert len(members) == n - n % 2  # everyone but one of an odd count
    assert set(chain.from_iterable(chain.from_iterable(plan))) == set(nodes(n))


def test_rounds_avoid_repeating_pairs_and_the_work_is_linear():
    plan = fabric.pair_rounds(nodes(64), 3, random.Random(7))
    pairs = list(chain.from_iterable(plan))
    assert len(pairs) == len(set(pairs)) == 3 * 32  # not 64 x 63 / 2


def test_a_slow_node_is_named_with_its_bandwidth_its_reference_and_the_floor():
    links = Links(slow={"compute-005"})
    report = fabric.check_fabric({"p5": nodes(16)}, links, random.Random(3))
    assert [f.node for f in report.slow] == ["compute-005"]
    why = report.slow[0].why
    assert f"{SLOW:.1f} GB/s with compute-" in why and "known good" in why and "0.8 x group median 45.0" in why
    assert report.pairs_measured == 3 * 8 + 1  # the rounds, then one bisect measurement


def test_a_healthy_cluster_names_none_and_measures_only_the_rounds():
    links = Links()
    report = fabric.check_fabric({"p5": nodes(16)}, links, random.Random(3))
    assert report.slow == [] and len(links.rounds) == 3


def test_the_partners_of_a_slow_node_are_cleared_by_the_bisection():
    """With one round every partner of the slow node shares its low pair; the bisection tells them apart."""
    links = Links(slow={"compute-002"})
    report = fabric.check_fabric({"p5": nodes(8)}, links, random.Random(1), rounds=1)
    assert [f.node for f in report.slow] == ["compute-002"]
    partner = next(a if b == "compute-002" else b for a, b in links.rounds[0] if "compute-002" in (a, b))
    assert {s for s, _ in links.rounds[1]} == {"compute-002", partner}  # both suspects measured again


def test_a_node_whose_measurements_fail_is_named():
    report = fabric.check_fabric({"p5": nodes(6)}, Links(broken={"compute-001"}), random.Random(2))
    assert [f.node for f in report.slow] == ["compute-001"] and "failed" in report.slow[0].why


def test_a_group_whose_every_pair_fails_names_every_node_never_a_clean_bill():
    """No rate at all (the provider broken, a port blocked): a median of 0 would pass every node."""
    group = nodes(3)
    report = fabric.check_fabric({"p5": group}, Links(broken=set(group)), random.Random(2))
    assert [f.node for f in report.slow] == group and all("every pair" in f.why for f in report.slow)
    two_broken = fabric.check_fabric({"p5": nodes(6)}, Links(broken={"compute-001", "compute-004"}), random.Random(5))
    assert sorted(f.node for f in two_broken.slow) == ["compute-001", "compute-004"]
    assert two_broken.medians["p5"] == GOOD  # the broken nodes do not drag the median down


def test_each_group_is_held_to_its_own_median():
    speeds = {n: 12.0 for n in nodes(4, "cpu")}  # a slower type is not slow for its kind
    report = fabric.check_fabric(
        {"cpu": nodes(4, "cpu"), "gpu": nodes(4, "gpu")}, Links(speeds=speeds), random.Random(4)
    )
    assert report.slow == [] and report.medians == {"cpu": 12.0, "gpu": GOOD}


def test_an_absolute_floor_overrides_the_relative_one():
    report = fabric.check_fabric({"p5": nodes(4)}, Links(), random.Random(4), floor=fabric.Floor(absolute_gbps=50))
    assert {f.node for f in report.slow} == set(nodes(4)) and "floor 50 GB/s (absolute)" in report.slow[0].why


def test_two_nodes_or_one_cannot_be_told_apart_and_say_so():
    two = fabric.check_fabric({"p5": nodes(2)}, Links(slow={"compute-001"}), random.Random(1))
    assert two.slow == [] and len(two.unmeasured) == 2 and "cannot tell them apart" in two.unmeasured[0].why
    alone = fabric.check_fabric({"p5": nodes(1)}, Links(), random.Random(1))
    assert alone.pairs_measured == 0 and "alone in its group" in alone.unmeasured[0].why
