"""The controller's figures: decide() time for a whole cluster of ready nodes (and with 0.1% failing), and the
size of the membership object, at 64 to 4,096 nodes in two groups. decide() runs every loop (60 s), so it must
stay far below a second at 4,096 nodes."""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpcc_node.controller.decide import decide  # noqa: E402 - after sys.path gets the checkout
from hpcc_node.controller.membership import encode  # noqa: E402 - after sys.path gets the checkout
from hpcc_node.controller.model import PUBLISH, Group, Instance, Report, Slot, SlurmNode, Snapshot  # noqa: E402 - after sys.path gets the checkout

NOW = 1_000_000.0


def cluster(nodes: int, failing: float = 0.0):
    groups = [Group("gpu", "p5.48xlarge", nodes // 2), Group("cpu", "c7i.48xlarge", nodes - nodes // 2)]
    slots, insts, reps, slurm = {}, {}, {}, {}
    for g in groups:
        for i in range(g.count):
            name, iid, ip = f"{g.name}-{i:03d}", f"i-{g.name}{i:013x}", f"10.{i // 62500}.{i // 250 % 250}.{i % 250}"
            slots[name] = Slot(name, g.name, i, iid, "ready", NOW - 3600, version=3)
            insts[iid] = Instance(iid, "running", NOW - 3700, g.name, ip, True, name_tag=name)
            reps[name] = Report(name, iid, True, at=NOW - 30)
            slurm[name] = SlurmNode(name, frozenset({"ALLOCATED"}), "", ip)
    bad = [n for k, n in enumerate(sorted(slots)) if failing and k % int(1 / failing) == 0]
    for name in bad:
        insts[slots[name].instance_id] = replace(insts[slots[name].instance_id], status_ok=False)
    return groups, Snapshot(now=NOW, slots=slots, instances=insts, reports=reps, slurm=slurm), len(bad)


def timed(groups, snap, runs: int = 5):
    best, actions = float("inf"), []
    for _ in range(runs):
        start = time.perf_counter()
        actions = decide(snap, groups, NOW)
        best = min(best, time.perf_counter() - start)
    return best, actions


def main() -> None:
    print(f"{'nodes':>6} {'decide (ready)':>15} {'decide (0.1% failing)':>22} {'replaced':>9} {'membership':>11}")
    for nodes in (64, 512, 2048, 4096):
        groups, snap, _ = cluster(nodes)
        quiet, actions = timed(groups, snap)
        body = next(a for a in actions if a.kind == PUBLISH).data["body"]
        groups, failing, bad = cluster(nodes, 0.001)
        busy, actions = timed(groups, failing)
        replaced = sum(1 for a in actions if a.kind == "replace")
        print(
            f"{nodes:>6} {quiet * 1000:>12.1f} ms {busy * 1000:>19.1f} ms {replaced:>4}/{bad:<4} "
            f"{len(encode(body, 1)) / 1024:>8.0f} KB"
        )


if __name__ == "__main__":
    main()
