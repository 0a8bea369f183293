"""The plan of `hpcc check fabric`: measure every node's link without N x N work, and name the slow ones.

1. A few rounds of disjoint pairs per group (a random pairing each round, the RNG handed in): every node is in
   one pair per round, so a round runs all at once and costs one pair-measurement time. With an odd count the
   node left out is one already measured most.
2. A node's score is its best pair: a healthy node paired once with a slow one still scores well in another
   round. The floor is relative, a fraction of the median of the group's scores (AWS's published bandwidth
   per type is only an upper bound), or an absolute override. A relative floor needs three nodes or more: two
   nodes share their only pair and cannot be told apart.
3. Suspects (best pair under the floor) are bisected: each is measured again against a known-good node of its
   group, which tells whether the slowness is its own or its partner's.
Work: rounds x N/2 pairs plus one per suspect. Measuring (nccl-tests, torch, MPI) is the caller's, handed in
as a function that runs one round's pairs together. Pure otherwise.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

Pair = Tuple[str, str]
MeasureRound = Callable[[List[Pair]], Mapping[Pair, Optional[float]]]  # GB/s per pair; None: the pair failed

ROUNDS_DEFAULT = 3
FLOOR_FRACTION_DEFAULT = 0.8
_TRIES = 20  # random pairings tried per round, keeping the one that repeats fewest earlier pairs


@dataclass(frozen=True)
class Floor:
    fraction: float = FLOOR_FRACTION_DEFAULT  # of the group's median node score
    absolute_gbps: Optional[float] = None  # overrides the fraction when set

    def value(self, median: float) -> float:
        return self.absolute_gbps if self.absolute_gbps is not None else self.fraction * median

    def describe(self, median: float) -> str:
        if self.absolute_gbps is not None:
            return f"floor {self.absolute_gbps:g} GB/s (absolute)"
        return f"floor {self.value(median):.1f} GB/s = {self.fraction:g} x group median {median:.1f}"


@dataclass(frozen=True)
class Finding:
    node: str
    group: str
    gbps: Optional[float]  # its bisect measurement, or its best pair
    why: str


@dataclass(frozen=True)
class Collective:
    """One group's ring all-reduce (hpcc_node/jobs/allreduce.py): its bus bandwidth, or why it failed and on
    which nodes, or why it did not run (a group of one node; no torchrun)."""

    group: str
    status: str  # "ok", "failed" or "not run"
    ranks: int = 0
    busbw: Optional[float] = None  # GB/s
    failed: Tuple[str, ...] = ()  # the nodes whose part exited non-zero
    why: str = ""


@dataclass
class FabricReport:
    slow: List[Finding]
    unmeasured: List[Finding]
    pairs_measured: int
    medians: Dict[str, float]
    collectives: List[Collective] = field(default_factory=list)


def _key(a: str, b: str) -> Pair:
    return (a, b) if a <= b else (b, a)


def pair_rounds(nodes: Sequence[str], rounds: int, rng) -> List[List[Pair]]:
    """`rounds` pairings of `nodes`, each of disjoint pairs; every node in every round but one with an odd count."""
    nodes = sorted(set(nodes))
    seen: Dict[Pair, int] = {}
    times = {n: 0 for n in nodes}
    plan = []
    for _ in range(rounds if len(nodes) >= 2 else 0):
        best = None
        for _ in range(_TRIES):
            order = nodes[:]
            rng.shuffle(order)
            if len(order) % 2:  # leave out the node measured most (the first such in this shuffle)
                out = max(order, key=lambda n: times[n])
                order.remove(out)
            pairs = [_key(order[i], order[i + 1]) for i in range(0, len(order), 2)]
            repeats = sum(seen.get(p, 0) for p in pairs)
            if best is None or repeats < best[0]:
                best = (repeats, pairs)
            if repeats == 0:
                break
        for a, b in best[1]:
            seen[(a, b)] = seen.get((a, b), 0) + 1
            times[a] += 1
            times[b] += 1
        plan.append(best[1])
    return plan


def best_per_node(measured: Mapping[Pair, Optional[float]]) -> Dict[str, float]:
    best: Dict[str, float] = {}
    for (a, b), gbps in measured.items():
        for n in (a, b):
            best[n] = max(best.get(n, 0.0), gbps or 0.0)
    return best


def bisect_rounds(suspects: Sequence[str], references: Sequence[str]) -> List[List[Pair]]:
    """Each suspect against a known-good node; a reference serves one suspect per round (pairs stay disjoint)."""
    if not references:
        return []
    out, todo = [], list(suspects)
    while todo:
        batch, todo = todo[: len(references)], todo[len(references) :]
        out.append([(s, r) for s, r in zip(batch, references)])
    return out


def check_group(
    group: str, nodes: Sequence[str], measure: MeasureRound, rng, rounds: int = ROUNDS_DEFAULT, floor: Floor = Floor()
) -> FabricReport:
    measured: Dict[Pair, Optional[float]] = {}
    for pairs in pair_rounds(nodes, rounds, rng):
        got = measure(pairs)
        measured.update({p: got.get(p) for p in pairs})
    if not measured:
        alone = [Finding(n, group, None, "not measured: alone in its group") for n in nodes]
        return FabricReport([], alone, 0, {})
    best = best_per_node(measured)
    if not any(best.values()):  # not one pair gave a rate: no median to judge by, and no node is known good
        return FabricReport(
            [Finding(n, group, None, "every pair it was in failed (no rate measured)") for n in sorted(best)],
            [],
            len(measured),
            {},
        )
    if len(best) < 3 and floor.absolute_gbps is None:
        why = (
            "not judged: two nodes share their only pair, a relative floor cannot tell them apart (set an absolute one)"
        )
        return FabricReport([], [Finding(n, group, best[n], why) for n in sorted(best)], len(measured), {})
    # of the scores of the nodes with a rate: a few slow pairs, or nodes whose every pair failed, do not drag it down
    median = statistics.median(v for v in best.values() if v > 0)
    limit = floor.value(median)
    suspects = sorted((n for n in best if best[n] < limit), key=lambda n: (best[n], n))
    references = sorted((n for n in best if best[n] >= limit), key=lambda n: (-best[n], n))
    slow: List[Finding] = []
    rule = floor.describe(median)
    if suspects and not references:
        for n in suspects:
            slow.append(
                Finding(
                    n,
                    group,
                    best[n],
                    f"best pair {best[n]:.1f} GB/s under the {rule}; no node of the "
                    "group is above it to tell which side is slow",
                )
            )
        return FabricReport(slow, [], len(measured), {group: median})
    checked: Dict[Pair, Optional[float]] = {}
    for pairs in bisect_rounds(suspects, references):
        got = measure(pairs)
        checked.update({p: got.get(p) for p in pairs})
    for (s, ref), gbps in sorted(checked.items()):
        if gbps is None:
            slow.append(
                Finding(
                    s,
                    group,
                    None,
                    f"the measurement with {ref} (known good, {best[ref]:.1f} GB/s) "
                    f"failed; best pair before {best[s]:.1f} GB/s, {rule}",
                )
            )
        elif gbps < limit:
            slow.append(
                Finding(s, group, gbps, f"{gbps:.1f} GB/s with {ref} (known good, {best[ref]:.1f} GB/s); {rule}")
            )
    return FabricReport(slow, [], len(measured) + len(checked), {group: median})


def check_fabric(
    groups: Mapping[str, Sequence[str]],
    measure: MeasureRound,
    rng,
    rounds: int = ROUNDS_DEFAULT,
    floor: Floor = Floor(),
) -> FabricReport:
    """Every group on its own (its own median: one type's link is not another's)."""
    total = FabricReport([], [], 0, {})
    for group in sorted(groups):
        r = check_group(group, groups[group], measure, rng, rounds, floor)
        total.slow += r.slow
        total.unmeasured += r.unmeasured
        total.pairs_measured += r.pairs_measured
        total.medians.update(r.medians)
    return total
