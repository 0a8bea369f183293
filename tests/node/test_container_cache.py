"""The shared image cache (hpcc_node/containers/cache.py): one import per image across processes that ask at once,
the others waiting and saying for whom; a failed import publishes nothing and the next one tries; eviction keeps
the cap, least recently used first, never an entry being imported or read; list() for `hpcc images`."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
import traceback
from pathlib import Path

import pytest

from hpcc_contract import containers as c
from hpcc_contract import formats
from hpcc_node.containers import cache as cache_mod
from hpcc_node.containers import locks
from hpcc_node.containers.cache import ImageCache, ImportFailed

D1, D2, D3 = (f"sha256:{ch * 64}" for ch in "abc")
REF = "nvcr.io#nvidia/pytorch:24.07-py3"
CANON = "nvcr.io/nvidia/pytorch:24.07-py3"
DIGESTS = {CANON: D1, "registry-1.docker.io/library/ubuntu:22.04": D2, "nvcr.io/nvidia/cuda:12": D3}


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now
        self.hooks: list = []  # called by sleep(), once each, in order

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.hooks:
            self.hooks.pop(0)()


def resolve(ref: c.ImageRef) -> str:
    return DIGESTS[ref.canonical]


class Importer:
    def __init__(self, size: int = 100, fail: bool = False) -> None:
        self.calls: list = []
        self.size, self.fail = size, fail

    def __call__(self, ref: c.ImageRef, digest: str, dest: str) -> None:
        self.calls.append((ref.canonical, digest))
        assert not os.path.exists(dest)  # enroot import refuses an existing output
        with open(dest, "wb") as f:
            f.write(b"s" * (self.size // 2))
            if self.fail:
                raise RuntimeError("registry said 503")
            f.write(b"s" * (self.size - self.size // 2))


def make(root, importer=None, clock=None, **kw) -> ImageCache:
    clock = clock or Clock()
    lines = kw.pop("lines", [])
    return ImageCache(
        str(root), resolve, importer or Importer(), node=kw.pop("node", "gpu-001"), clock=clock, sleep=clock.sleep,
        log=lines.append, progress=kw.pop("progress", lines.append), **kw,
    )  # fmt: skip


def files(root) -> list:
    return sorted(os.listdir(root))


def test_the_first_ensure_imports_and_every_later_one_starts_from_the_cache(tmp_path):
    importer, clock = Importer(), Clock()
    cache = make(tmp_path, importer, clock)
    path = cache.ensure(REF)
    assert path == str(tmp_path / c.image_name(D1)) and os.path.getsize(path) == 100
    assert importer.calls == [(CANON, D1)]
    clock.now += 3600
    assert cache.ensure("docker://nvcr.io/nvidia/pytorch:24.07-py3") == path  # another spelling, same image
    assert importer.calls == [(CANON, D1)]
    entry = c.loads_entry((tmp_path / c.entry_name(D1)).read_text())
    assert entry.references == [CANON] and entry.imported_by == "gpu-001" and entry.size == 100
    assert entry.created == 1_000_000.0 and entry.last_used == clock.now
    assert files(tmp_path) == [c.entry_name(D1), c.lock_name(D1), c.image_name(D1)]  # no temp file left


def test_a_last_use_is_written_at_most_once_a_minute_and_a_new_reference_at_once(tmp_path):
    clock = Clock()
    cache = make(tmp_path, clock=clock)
    cache.ensure(REF)
    clock.now += 30
    cache.ensure(REF)
    assert c.loads_entry((tmp_path / c.entry_name(D1)).read_text()).last_used == 1_000_000.0
    DIGESTS["nvcr.io/nvidia/pytorch:latest"] = D1
    try:
        cache.ensure("nvcr.io/nvidia/pytorch")
    finally:
        del DIGESTS["nvcr.io/nvidia/pytorch:latest"]
    entry = c.loads_entry((tmp_path / c.entry_name(D1)).read_text())
    assert entry.references == [CANON, "nvcr.io/nvidia/pytorch:latest"] and entry.last_used == 1_000_030.0


def test_a_failed_import_publishes_nothing_and_the_next_ensure_imports(tmp_path):
    cache = make(tmp_path, Importer(fail=True))
    with pytest.raises(ImportFailed, match="importing nvcr.io/nvidia/pytorch:24.07-py3 failed: registry said 503"):
        cache.ensure(REF)
    assert files(tmp_path) == [c.lock_name(D1)]  # no squashfs, no half-written temp file
    good = Importer()
    assert os.path.getsize(make(tmp_path, good).ensure(REF)) == 100 and len(good.calls) == 1


def test_an_importer_that_writes_nothing_is_a_failure(tmp_path):
    cache = make(tmp_path, lambda ref, digest, dest: None)
    with pytest.raises(ImportFailed, match="wrote no squashfs"):
        cache.ensure(REF)
    assert files(tmp_path) == [c.lock_name(D1)]


def test_a_killed_importers_temp_file_is_removed_by_the_next_import(tmp_path):
    stale = tmp_path / c.temp_name(D1, "gpu-009", 4242)
    stale.write_bytes(b"half")
    lines: list = []
    make(tmp_path, lines=lines).ensure(REF)
    assert not stale.exists() and any("a killed importer's" in line for line in lines)


def test_a_waiter_says_whom_it_waits_for_and_gives_up_at_its_deadline(tmp_path):
    held = locks.try_acquire(str(tmp_path / c.lock_name(D1)), shared=False)
    assert held is not None
    locks.write_holder(held, {"node": "gpu-007", "pid": 1, "reference": REF, "since": 1_000_000.0 - 120})
    said: list = []
    importer = Importer()
    cache = make(tmp_path, importer, progress=said.append, wait_s=100)
    try:
        with pytest.raises(locks.LockTimeout, match=r"gave up after 100 s waiting for node gpu-007 importing"):
            cache.ensure(REF)
    finally:
        locks.release(held)
    assert said[0] == (f"{CANON}: waiting for node gpu-007 importing {CANON} since 1970-01-12T13:44:40Z (120 s)")
    assert 3 <= len(said) <= 5  # one line every 30 s of 100, not one a poll
    assert importer.calls == []


def test_after_the_lock_it_looks_again_and_takes_what_another_node_imported(tmp_path, monkeypatch):
    """The shared look found nothing; between letting it go and the exclusive lock another node imported it."""
    clock, importer = Clock(), Importer()
    lock, image = str(tmp_path / c.lock_name(D1)), tmp_path / c.image_name(D1)
    other: list = []
    real_release = locks.release

    def release(fd, clear=False):
        real_release(fd, clear)
        if not other and not image.exists():
            other.append(locks.try_acquire(lock, shared=False))  # the other node's import starts here

    def the_other_node_finishes():
        image.write_bytes(b"i" * 70)
        real_release(other[0])

    monkeypatch.setattr(locks, "release", release)
    clock.hooks.append(the_other_node_finishes)
    assert make(tmp_path, importer, clock).ensure(REF) == str(image)
    assert importer.calls == [] and other and image.read_bytes() == b"i" * 70


# -- many processes at once ------------------------------------------------------------------------------------------


def _racer(root, counter, index, barrier, results, fail_first):
    """One node: ensure() the same image as the others, at the same moment."""

    def importer(ref, digest, dest):
        with open(counter, "a") as f:
            f.write(f"n{index}\n")
        with open(counter) as f:
            first = len(f.read().splitlines()) == 1
        with open(dest, "wb") as f:
            f.write(b"x" * 1000)
            time.sleep(0.4)
            if fail_first and first:
                raise RuntimeError("the first import fails")
            f.write(b"y" * 1000)

    said: list = []
    try:
        cache = ImageCache(root, resolve, importer, node=f"n{index}", progress=said.append, log=lambda line: None)
        barrier.wait(timeout=10)
        results.put((index, "ok", cache.ensure(REF), said))
    except Exception as e:
        results.put((index, "error", f"{type(e).__name__}: {e}", said + [traceback.format_exc()]))


def race(tmp_path, n=6, fail_first=False):
    ctx = multiprocessing.get_context("fork")
    root, counter = str(tmp_path / "images"), str(tmp_path / "imports")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(root, counter, i, barrier, results, fail_first)) for i in range(n)]
    for p in procs:
        p.start()
    got = sorted(results.get(timeout=30) for _ in procs)
    for p in procs:
        p.join(timeout=10)
    with open(counter) as f:
        return got, f.read().split(), root


def test_six_processes_asking_at_once_import_once_and_all_get_the_same_whole_image(tmp_path):
    got, imports, root = race(tmp_path)
    assert len(imports) == 1, imports  # exactly one import
    assert {status for _, status, _, _ in got} == {"ok"}, got
    paths = {path for _, _, path, _ in got}
    assert paths == {os.path.join(root, c.image_name(D1))}
    assert os.path.getsize(paths.pop()) == 2000  # whole: never the half an importer had written
    waiters = [said for index, _, _, said in got if f"n{index}" != imports[0]]
    assert any(f"waiting for node {imports[0]} importing {CANON}" in line for said in waiters for line in said)
    assert sorted(os.listdir(root)) == [c.entry_name(D1), c.lock_name(D1), c.image_name(D1)]


def test_when_the_first_import_fails_the_next_waiter_imports_and_the_rest_take_its_image(tmp_path):
    got, imports, root = race(tmp_path, fail_first=True)
    assert len(imports) == 2, imports  # the failed one, then one more: not one per waiter
    failed = [g for g in got if g[1] == "error"]
    assert len(failed) == 1 and "the first import fails" in failed[0][2] and f"n{failed[0][0]}" == imports[0]
    assert {path for _, status, path, _ in got if status == "ok"} == {os.path.join(root, c.image_name(D1))}
    assert os.path.getsize(os.path.join(root, c.image_name(D1))) == 2000


# -- list and evict ----------------------------------------------------------------------------------------------


def filled(tmp_path, clock, lines):
    """Three images: pytorch (100 B, used first), ubuntu (200 B), cuda (300 B, used last), each an hour apart."""
    for ref, size in ((REF, 100), ("ubuntu:22.04", 200), ("nvcr.io/nvidia/cuda:12", 300)):
        make(tmp_path, Importer(size), clock, lines=lines).ensure(ref)
        clock.now += 3600
    return make(tmp_path, clock=clock, lines=lines)


def test_list_shows_each_image_with_its_reference_size_and_times_most_recent_first(tmp_path):
    clock = Clock()
    cache = filled(tmp_path, clock, [])
    listed = cache.list()
    assert [(e.references, e.digest, e.size) for e in listed] == [
        (["nvcr.io/nvidia/cuda:12"], D3, 300),
        (["registry-1.docker.io/library/ubuntu:22.04"], D2, 200),
        ([CANON], D1, 100),
    ]
    assert listed[2].created == listed[2].last_used == 1_000_000.0 and listed[0].imported_by == "gpu-001"
    os.unlink(tmp_path / c.entry_name(D2))  # a squashfs without its document: still listed, from its own times
    (tmp_path / c.entry_name(D3)).write_text("{not json")
    lines: list = []
    cache.log = lines.append
    assert {(e.digest, tuple(e.references), e.size) for e in cache.list()} == {
        (D1, (CANON,), 100),
        (D2, (), 200),
        (D3, (), 300),
    }
    assert any(line.startswith(f"{c.entry_name(D3)}: not read (cache entry: not JSON") for line in lines)


def test_eviction_removes_least_recently_used_first_until_under_the_cap(tmp_path):
    clock, lines = Clock(), []
    cache = filled(tmp_path, clock, lines)
    done = cache.evict(350)
    assert [(e.digest, e.evicted) for e in done] == [(D1, True), (D2, True)]
    assert [e.digest for e in cache.list()] == [D3]
    assert files(tmp_path) == [c.entry_name(D3), c.lock_name(D3), c.image_name(D3)]  # nothing of D1, D2 left
    evicted = [line for line in lines if line.startswith("evicted")]
    assert len(evicted) == 2 and evicted[0].startswith(f"evicted {CANON} ({D1}, 100 bytes)")
    assert "over its cap of 350; least recently used first" in evicted[0]
    assert cache.evict(350) == []  # within the cap: nothing to do


def test_eviction_never_takes_an_image_in_use_or_used_within_the_grace(tmp_path):
    clock, lines = Clock(), []
    cache = filled(tmp_path, clock, lines)
    with cache.using(REF) as path:  # a reader holds D1 (and its use is now recent: make it old again)
        entry = c.loads_entry((tmp_path / c.entry_name(D1)).read_text())
        (tmp_path / c.entry_name(D1)).write_text(c.dumps_entry(entry._replace(last_used=1_000_000.0)))
        clock.now = 1_000_000.0 + 2 * 3600 + 120  # cuda used 2 minutes ago: within the grace
        done = cache.evict(0)
        assert os.path.exists(path)
    assert [(e.digest, e.evicted) for e in done] == [(D1, False), (D2, True), (D3, False)]
    assert "its lock is held" in done[0].reason and "last used 120 s ago" in done[2].reason
    assert any("over its cap of 0: the rest is in use" in line for line in lines)
    clock.now += 3600
    assert [e.digest for e in cache.evict(0) if e.evicted] == [D1, D3]  # once let go and idle


def test_an_entry_used_again_since_the_listing_is_kept_and_its_lock_let_go(tmp_path, monkeypatch):
    clock = Clock()
    cache = filled(tmp_path, clock, [])
    clock.now += 3600
    listed = cache.list()
    monkeypatch.setattr(cache, "list", lambda: listed)  # the listing evict() works from, before another node's use
    other = make(tmp_path, clock=clock, node="gpu-002")
    other.ensure(REF)  # D1 used again
    done = cache.evict(0)
    assert [(e.digest, e.evicted) for e in done] == [(D1, False), (D2, True), (D3, True)]
    assert done[0].reason == "in use: used again at 1970-01-12T17:46:40Z"
    fd = locks.try_acquire(str(tmp_path / c.lock_name(D1)), shared=False)  # not left held
    assert fd is not None
    locks.release(fd)


def test_an_entry_document_of_a_newer_format_is_neither_rewritten_nor_evicted(tmp_path):
    clock, lines = Clock(), []
    cache = filled(tmp_path, clock, lines)
    newer = json.dumps({**json.loads((tmp_path / c.entry_name(D1)).read_text()), formats.FORMAT_KEY: 2})
    (tmp_path / c.entry_name(D1)).write_text(newer)
    clock.now += 3600
    cache.ensure(REF)
    assert (tmp_path / c.entry_name(D1)).read_text() == newer
    assert any("last use not noted: image cache entry format 2 is newer" in line for line in lines)
    clock.now += 3600
    os.utime(tmp_path / c.image_name(D1), (1_000_000.0, 1_000_000.0))  # the listing's stand-in: its import time
    kept = [e for e in cache.evict(0) if not e.evicted]
    assert [(e.digest, e.reason) for e in kept] == [
        (D1, "its entry document is of a newer format: left to the newer hpcc that wrote it")
    ]


def test_a_sweep_removes_leftovers_only_when_nobody_holds_their_lock(tmp_path):
    clock = Clock()
    cache = filled(tmp_path, clock, [])
    temp = tmp_path / c.temp_name(D1, "gpu-009", 7)
    temp.write_bytes(b"half")
    orphan = tmp_path / c.entry_name(f"sha256:{'d' * 64}")
    orphan.write_text("{}")
    held = locks.try_acquire(str(tmp_path / c.lock_name(D1)), shared=False)  # an import of D1 is running
    assert sorted(cache.sweep()) == [orphan.name] and temp.exists()
    locks.release(held)
    assert cache.sweep() == [temp.name] and not temp.exists()
    assert files(tmp_path) == sorted(
        [c.entry_name(d) for d in (D1, D2, D3)] + [c.lock_name(d) for d in (D1, D2, D3)]
        + [c.image_name(d) for d in (D1, D2, D3)]
    )  # fmt: skip


def test_an_eviction_between_the_wait_and_the_lock_sends_the_waiter_to_the_new_lock_file(tmp_path, monkeypatch):
    """The waiter opened the lock file; an eviction unlinked it and let go; the waiter's flock then succeeds on a file
    nobody else will ever lock, so it must open the one now at the path."""
    lock = str(tmp_path / c.lock_name(D1))
    opened = [os.open(lock, os.O_RDWR | os.O_CREAT)]  # the waiter's open, before the eviction
    os.unlink(lock)  # the eviction
    real_open = locks._open
    monkeypatch.setattr(locks, "_open", lambda path: opened.pop() if opened else real_open(path))
    fd = locks.try_acquire(lock, shared=False)
    assert fd is not None and os.fstat(fd).st_ino == os.stat(lock).st_ino
    assert locks.try_acquire(lock, shared=False) is None  # the one lock everyone sees is held
    locks.release(fd)


def test_an_image_published_without_the_lock_is_never_overwritten(tmp_path):
    image = tmp_path / c.image_name(D1)

    def importer(ref, digest, dest):
        Path(dest).write_bytes(b"mine")
        image.write_bytes(b"theirs")  # somebody wrote it meanwhile, bypassing the lock

    lines: list = []
    assert make(tmp_path, importer, lines=lines).ensure(REF) == str(image)
    assert image.read_bytes() == b"theirs" and any("appeared during the import" in line for line in lines)
    assert files(tmp_path) == [c.entry_name(D1), c.lock_name(D1), c.image_name(D1)]


def test_entry_documents_are_written_whole(tmp_path):
    cache = make(tmp_path)
    cache.ensure(REF)
    doc = json.loads((tmp_path / c.entry_name(D1)).read_text())
    assert doc[formats.FORMAT_KEY] == formats.IMAGE_ENTRY and doc["digest"] == D1
    assert cache_mod.TOUCH_EVERY_S <= 60 < cache_mod.GRACE_S  # a use is noted well within the grace
