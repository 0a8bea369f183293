#!/usr/bin/env python3
"""Issue 35's figures computed for AWS: a 20 GB image's cold start (imported once, then read from FSx) and warm start
(already in the cache) on 512 p5.48xlarge nodes at once, for a few FSx sizes and tiers; a prewarmed spare's start;
and the FSx each target needs. The model and every rate's source or assumption: infra/facts/image_start.py.
Prints MET or MISS per target; a MISS is a figure to know, not a failure (exit 0)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from infra.facts import image_start as m  # noqa: E402 - after sys.path gets the checkout

IMAGE_GB, NODES, CARD = m.TARGET_IMAGE_GB, m.TARGET_NODES, m.P5_CARD_GBPS
# (GiB, tier): hpcc's default file system, then larger and faster ones.
CASES = [
    (1200, ("SCRATCH_2", None)),
    (4800, ("PERSISTENT_2", 125)),
    (48000, ("PERSISTENT_2", 250)),
    (48000, ("PERSISTENT_2", 1000)),
    (100800, ("PERSISTENT_2", 1000)),
]
# What a lazily mounted squashfs (pyxis use_squashfuse) would read before the job runs: an assumption to measure.
LAZY = replace(m.ASSUMED, read_share=0.25)


def verdict(seconds: float, target: float) -> str:
    return "MET" if seconds <= target else "MISS"


def fmt(s: float) -> str:
    return f"{s:,.0f} s" if s < 600 else f"{s / 60:,.1f} min"


def needed(gib: int | None, tier: m.FsxTier) -> str:
    if gib is None:
        return "none (over 512 TiB)"
    return f"{gib / 1000:,.1f} TiB ({m.Fsx(gib, tier).network_mbps / 1000:,.0f} GB/s)"


def table(a: m.Assumptions, label: str) -> None:
    print(f"\n{label}: {IMAGE_GB:g} GB image, {NODES} nodes at once (p5.48xlarge, card 0 {CARD:g} Gbps)")
    print("| FSx | network MB/s | import | cold start | cold <= 3 min | warm start | warm <= 30 s | binds (warm) |")
    print("|---|---|---|---|---|---|---|---|")
    for gib, key in CASES:
        tier = m.FSX_TIERS[key]
        fsx = m.Fsx(gib, tier)
        imp = m.import_time(IMAGE_GB, fsx, CARD, a=a)
        cold = m.cold_start(IMAGE_GB, NODES, fsx, CARD, a=a)
        warm = m.warm_start(IMAGE_GB, NODES, fsx, CARD, a)
        print(
            f"| {gib / 1000:,.1f} TiB {tier.name} | {fsx.network_mbps:,.0f} | {fmt(imp.seconds)} ({imp.bottleneck}) "
            f"| {fmt(cold.seconds)} | {verdict(cold.seconds, m.COLD_TARGET_S)} | {fmt(warm.seconds)} "
            f"| {verdict(warm.seconds, m.WARM_TARGET_S)} | {warm.bottleneck} |"
        )
    print(f"FSx needed for {NODES} nodes (smallest capacity of each tier, baseline throughput):")
    for tier in m.FSX_TIERS.values():
        cold = m.capacity_needed(tier, IMAGE_GB, NODES, m.COLD_TARGET_S, CARD, a=a)
        warm = m.capacity_needed(tier, IMAGE_GB, NODES, m.WARM_TARGET_S, CARD, warm=True, a=a)
        print(f"  {tier.name}: cold <= 3 min {needed(cold, tier)}; warm <= 30 s {needed(warm, tier)}")
    pre = m.prewarmed_start(IMAGE_GB, a)
    print(f"Prewarmed spare (squashfs on local NVMe), a requeued job's start: {fmt(pre.seconds)} ({pre.bottleneck})")
    one = m.warm_start(IMAGE_GB, 1, m.Fsx(48000, m.FSX_TIERS["PERSISTENT_2", 250]), CARD, a)
    print(f"One node's warm start from the cache (nobody else reading): {fmt(one.seconds)} ({one.bottleneck})")


def main() -> int:
    table(m.ASSUMED, "enroot create (hpcc's pyxis today: the whole squashfs read and unpacked)")
    table(LAZY, "pyxis use_squashfuse (ASSUMED: a node reads 25% of the squashfs before the job runs)")
    print(
        f"\nDocumented: FSx SSD throughput and cache per TiB ({m.SSD_STORAGE}), one flow 5 Gbps outside a cluster "
        f"placement group ({m.NETWORK_BANDWIDTH}). Assumed (infra/facts/image_start.py Assumptions): "
        + ", ".join(f"{k}={v}" for k, v in vars(m.ASSUMED).items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
