"""The head's agent keeps the shared image cache within its cap (issue 35): every EVICT_EVERY_S it runs the cache's
eviction (hpcc_node/containers/cache.py `evict`: least recently used first, never an image locked or used within its
grace) to the cap the settings give (IMAGE_CACHE_GIB, containers.cacheMaxGiB: a changed cap reaches the head with the
settings, no new bundle). Only the head, which mounts the cluster's file system like every node: one evictor a
cluster, so no two nodes race to evict the same images. Each eviction is logged with its reason (the cache's size
before, the cap, the image's last use), then the size after; nothing is logged while the cache is within its cap.
Nothing runs while the settings give no cap (containers off) or before any image was cached (no cache directory:
the agent never creates one, so an unmounted file system is left alone)."""

from __future__ import annotations

import os
from typing import Callable, List, Optional

from hpcc_contract import containers as c
from hpcc_node.containers import locks
from hpcc_node.containers.cache import Eviction, ImageCache, ImportFailed

EVICT_EVERY_S = 600.0  # an image imported meanwhile overshoots the cap for at most this long
GIB = 1 << 30


def evict_due(last: Optional[float], now: float, every: float = EVICT_EVERY_S) -> bool:
    """Is an eviction due: never run yet, `every` seconds since the last, or the clock went back past it."""
    return last is None or now - last >= every or now < last


def cap_bytes(settings: dict) -> Optional[int]:
    """The settings' IMAGE_CACHE_GIB in bytes; None when they give none."""
    value = str(settings.get("IMAGE_CACHE_GIB") or "")
    return int(value) * GIB if value.isdigit() and int(value) > 0 else None


def _refuse(*_args: object) -> str:
    raise ImportFailed("the evictor imports nothing")


def evict_cache(
    root: str, cap: int, node: str, clock: Callable[[], float], log: Callable[[str], None]
) -> List[Eviction]:
    """One eviction of the cache at `root` to `cap` bytes, each decision and the size after logged."""
    said: List[str] = []

    def note(line: str) -> None:
        said.append(line)

    cache = ImageCache(root, _refuse, _refuse, node=node, clock=clock, log=note)
    before = sum(e.size for e in cache.list())
    evictions = cache.evict(cap)
    for line in said:
        log(f"image cache: {line}")
    if evictions:
        after = sum(e.size for e in cache.list())
        gone = sum(1 for e in evictions if e.evicted)
        log(
            f"image cache: {before} bytes before, {after} after, cap {cap} ({cap // GIB} GiB): "
            f"{gone} image(s) evicted, {len(evictions) - gone} kept in use"
        )
    return evictions


class ImageCacheEvicting:
    """Agent's image cache method. What it uses of the agent: its config `c`, `settings`, `node`, `clock`, `log`."""

    images_evicted_at: Optional[float] = None

    def evict_images(self) -> None:
        if self.c.role != "head":
            return
        cap = cap_bytes(self.settings)
        now = self.clock()
        if cap is None or not evict_due(self.images_evicted_at, now):
            return
        self.images_evicted_at = now
        root = c.cache_root(str(self.settings.get("MOUNT_POINT") or "/fsx"))
        if not os.path.isdir(root):
            return
        try:
            evict_cache(root, cap, self.node.node, self.clock, self.log)
        except (OSError, locks.LockTimeout, c.BadRecord) as e:
            self.log(f"image cache: eviction failed: {e}; again in {EVICT_EVERY_S:.0f} s")
