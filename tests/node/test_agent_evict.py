"""The head's agent keeps the shared image cache within the settings' cap (hpcc_node/agent_evict.py): due every
ten minutes by the injected clock, only on the head, only with a cap; each eviction logged with its reason (the
size before, the cap, the image's last use) and the size after."""

from __future__ import annotations

import os
import types

import pytest

from hpcc_contract import containers as c
from hpcc_node import agent_evict as ai
from hpcc_node.agent import Agent

NOW = 1_700_000_000.0
OLD, NEWER, FRESH = (f"sha256:{x * 64}" for x in "abc")


def cache_with(root, entries):
    """Entries as the cache writes them: the squashfs of `size` bytes and its entry document."""
    os.makedirs(root, exist_ok=True)
    for digest, ref, size, last_used in entries:
        with open(os.path.join(root, c.image_name(digest)), "wb") as f:
            f.write(b"h" * size)
        with open(os.path.join(root, c.entry_name(digest)), "w") as f:
            f.write(
                c.dumps_entry(
                    c.CacheEntry(digest, [c.parse_reference(ref).canonical], size, last_used, last_used, "gpu-001")
                )
            )


@pytest.mark.parametrize(
    "last,now,due",
    [(None, NOW, True), (NOW - 599, NOW, False), (NOW - 600, NOW, True), (NOW + 60, NOW, True)],
)
def test_an_eviction_is_due_every_ten_minutes_and_after_the_clock_went_back(last, now, due):
    assert ai.evict_due(last, now) is due


@pytest.mark.parametrize("value,cap", [("", None), (None, None), ("2", 2 << 30), ("x", None), ("0", None)])
def test_the_cap_is_the_settings_gib(value, cap):
    assert ai.cap_bytes({"IMAGE_CACHE_GIB": value}) == cap


def test_an_eviction_logs_each_reason_and_the_size_after(tmp_path):
    root = str(tmp_path / "images")
    cache_with(root, [(OLD, "ubuntu:20.04", 600, NOW - 86400), (NEWER, "ubuntu:22.04", 500, NOW - 3600),
                      (FRESH, "ubuntu:24.04", 400, NOW - 60)])  # fmt: skip
    lines: list[str] = []
    done = ai.evict_cache(root, 1000, "head", lambda: NOW, lines.append)
    assert [(e.digest, e.evicted) for e in done] == [(OLD, True)]  # then within the cap: FRESH stays
    evicted = next(line for line in lines if line.startswith("image cache: evicted"))
    assert "registry-1.docker.io/library/ubuntu:20.04" in evicted and "held 1500 bytes" in evicted
    assert "cap of 1000" in evicted and "last used 2023-11-13T22:13:20Z" in evicted
    assert lines[-1].startswith("image cache: 1500 bytes before, 900 after, cap 1000")
    assert not os.path.exists(os.path.join(root, c.image_name(OLD)))
    assert os.path.exists(os.path.join(root, c.image_name(FRESH)))


def test_within_the_cap_nothing_is_evicted_or_logged(tmp_path):
    root = str(tmp_path / "images")
    cache_with(root, [(OLD, "ubuntu:20.04", 600, NOW - 86400)])
    lines: list[str] = []
    assert ai.evict_cache(root, 1 << 30, "head", lambda: NOW, lines.append) == [] and lines == []


def fake_agent(tmp_path, role="head", cap="1", now=None):
    now = now or [NOW]
    lines: list[str] = []
    agent = ai.ImageCacheEvicting()
    agent.c = types.SimpleNamespace(role=role)
    agent.settings = {"IMAGE_CACHE_GIB": cap, "MOUNT_POINT": str(tmp_path / "fsx")}
    agent.node = types.SimpleNamespace(node="head")
    agent.clock = lambda: now[0]
    agent.log = lines.append
    return agent, lines, now


def test_the_head_evicts_to_the_settings_cap_once_per_period(tmp_path, monkeypatch):
    root = c.cache_root(str(tmp_path / "fsx"))
    cache_with(root, [(OLD, "ubuntu:20.04", 600, NOW - 86400)])
    calls = []
    monkeypatch.setattr(ai, "evict_cache", lambda *a: calls.append(a) or [])
    agent, _, now = fake_agent(tmp_path, cap="3")
    agent.evict_images()
    agent.evict_images()
    now[0] += ai.EVICT_EVERY_S
    agent.evict_images()
    assert [(a[0], a[1], a[2]) for a in calls] == [(root, 3 << 30, "head")] * 2


@pytest.mark.parametrize("role,cap,cache", [("compute", "1", True), ("head", "", True), ("head", "1", False)])
def test_no_eviction_off_the_head_without_a_cap_or_without_a_cache(tmp_path, monkeypatch, role, cap, cache):
    if cache:
        cache_with(c.cache_root(str(tmp_path / "fsx")), [(OLD, "ubuntu:20.04", 600, NOW - 86400)])
    monkeypatch.setattr(ai, "evict_cache", lambda *a: pytest.fail("evicted"))
    fake_agent(tmp_path, role=role, cap=cap)[0].evict_images()
    assert not os.path.exists(str(tmp_path / "fsx")) or cache  # an absent cache is never created


def test_a_failed_eviction_is_logged_and_tried_at_the_next_period(tmp_path, monkeypatch):
    cache_with(c.cache_root(str(tmp_path / "fsx")), [(OLD, "ubuntu:20.04", 600, NOW - 86400)])

    def broken(*a):
        raise OSError("Input/output error")

    monkeypatch.setattr(ai, "evict_cache", broken)
    agent, lines, _ = fake_agent(tmp_path)
    agent.evict_images()
    assert lines == ["image cache: eviction failed: Input/output error; again in 600 s"]


def test_the_agent_runs_it_each_tick():
    assert issubclass(Agent, ai.ImageCacheEvicting)
    import inspect

    assert "self.evict_images()" in inspect.getsource(Agent.tick)
