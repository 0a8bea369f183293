"""The cluster's image cache on its shared file system (issue 35): one squashfs per image manifest digest, imported by
the first node that needs it while every other node waits for that import instead of pulling too, then started from
the cache. The layout is the contract's (hpcc_contract/containers.py); the locks are locks.py's.

ensure(reference): resolve the manifest digest (`enroot digest`, injected), and under a shared lock return the
squashfs if it is there (its last use noted at most once a minute). Else take the digest's exclusive lock (waiting,
with progress lines naming the importing node, up to a deadline), look again (another node may have finished it),
and import into a temp file in the same directory; fsync it and publish it under its name with link(2), which
"will not overwrite" an existing name (EEXIST: https://man7.org/linux/man-pages/man2/link.2.html), or, on a file
system without hard links, rename(2) while the name is still absent (we hold the lock). A squashfs under its name is
therefore always whole. A failed import removes its temp file and raises; the next waiter imports in its turn.
This is pyxis' caching importer (importers/caching_importer.sh, https://github.com/NVIDIA/pyxis) with the locking
its README says it lacks ("It does not handle locking of the cache directory").

In use. A process that keeps a shared lock while it reads (using()) is never evicted. pyxis' importer protocol
(importers/README.md) returns the path from a `get` process that exits before enroot opens the file; an entry used
within the last GRACE_S is not evicted either, and once the file is open an eviction is harmless to its reader:
unlink(2) removes the name, and the file "will remain in existence until the last file descriptor referring to it
is closed" (https://man7.org/linux/man-pages/man2/unlink.2.html), a squashfuse mount's included.

evict(cap_bytes): least recently used first until the cache is within its cap, skipping what is locked or used
within GRACE_S, each eviction logged with its reason; a killed importer's temp file and an entry's leftovers
(a document or lock file without its squashfs) are removed when nobody holds its lock."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

from hpcc_contract import containers as c
from hpcc_contract.formats import NewerFormat
from hpcc_node.containers import locks, lustre

Resolver = Callable[[c.ImageRef], str]  # the manifest digest of a reference, `sha256:<hex>`
Importer = Callable[[c.ImageRef, str, str], None]  # (reference, digest, path to write the squashfs at)

WAIT_S = 3600.0  # how long a node waits for another's import (a large image from a slow registry takes minutes)
GRACE_S = 600.0  # an entry used this recently is in use (see above)
TOUCH_EVERY_S = 60.0  # a last use is written at most this often: 1,000 nodes starting a job do not rewrite it 1,000x
PROGRESS_EVERY_S = 30.0


class ImportFailed(RuntimeError):
    """The importer failed (or wrote no squashfs); nothing was published."""


class Eviction(NamedTuple):
    digest: str
    reference: str
    size: int
    evicted: bool
    reason: str


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def _fsync(path: str, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ImageCache:
    def __init__(
        self,
        root: str,
        resolver: Resolver,
        importer: Importer,
        node: Optional[str] = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        log: Optional[Callable[[str], None]] = None,
        progress: Optional[Callable[[str], None]] = None,
        wait_s: float = WAIT_S,
        grace_s: float = GRACE_S,
        layout: Optional[Callable[[str], object]] = None,
    ) -> None:
        self.root = root
        self.resolver, self.importer = resolver, importer
        self.node = c.check_node(node or socket.gethostname().split(".")[0])
        self.clock, self.sleep = clock, sleep
        self.log = log or logging.getLogger("hpcc.containers").info
        self.progress = progress or self.log
        self.wait_s, self.grace_s = wait_s, grace_s
        # what a new cache directory is made with (lustre.py: striped over every OST); None: the file system's own
        self.layout = layout if layout is not None else (lambda d: lustre.stripe_wide(d, self.log))

    def _path(self, name: str) -> str:
        return os.path.join(self.root, name)

    # -- ensure ----------------------------------------------------------------------------------------------------

    def ensure(self, reference: str) -> str:
        """The cached squashfs of `reference`, imported first if no node has; BadReference for a malformed one,
        ImportFailed, LockTimeout when another node's import outlasts the wait."""
        ref = c.parse_reference(reference)
        digest = c.check_digest(self.resolver(ref))
        self._make_root()
        lock, image = self._path(c.lock_name(digest)), self._path(c.image_name(digest))
        deadline = self.clock() + self.wait_s
        fd = self._acquire(lock, True, deadline, ref)
        try:
            if os.path.isfile(image):
                self._touch(ref, digest)
                return image
        finally:
            locks.release(fd)
        # flock(2): converting a shared lock to an exclusive one "is not guaranteed to be atomic", so let go, take
        # it exclusively, and look again.
        fd = self._acquire(lock, False, deadline, ref)
        try:
            if not os.path.isfile(image):
                note = {"node": self.node, "pid": os.getpid(), "reference": ref.canonical, "since": self.clock()}
                locks.write_holder(fd, note)
                self._import(ref, digest, image)
            self._touch(ref, digest)
            return image
        finally:
            locks.release(fd, clear=True)

    def _make_root(self) -> None:
        """The cache directory, laid out for many readers when this node makes it (another node may race it: the
        layout is the same either way)."""
        if not os.path.isdir(self.root):
            os.makedirs(self.root, exist_ok=True)
            self.layout(self.root)

    @contextlib.contextmanager
    def using(self, reference: str) -> Iterator[str]:
        """ensure(), then a shared lock on the image for as long as the caller reads it: never evicted meanwhile."""
        ref = c.parse_reference(reference)
        for _ in range(3):  # evicted between ensure() and the lock only when its last use was not written
            image = self.ensure(reference)
            digest = c.digest_of(os.path.basename(image))
            assert digest is not None
            fd = self._acquire(self._path(c.lock_name(digest)), True, self.clock() + self.wait_s, ref)
            if os.path.isfile(image):
                try:
                    yield image
                finally:
                    locks.release(fd)
                return
            locks.release(fd)
        raise ImportFailed(f"{ref.canonical}: evicted as soon as it was imported, three times; raise the cache's cap")

    def _acquire(self, lock: str, shared: bool, deadline: float, ref: c.ImageRef) -> int:
        said = [float("-inf")]

        def waiting(now: float) -> None:
            if now - said[0] >= PROGRESS_EVERY_S:
                said[0] = now
                self.progress(f"{ref.canonical}: {self._whom(lock, now)}")

        try:
            return locks.acquire(lock, shared, deadline, self.clock, self.sleep, waiting)
        except locks.LockTimeout:
            raise locks.LockTimeout(
                f"{ref.canonical}: gave up after {self.wait_s:.0f} s {self._whom(lock, self.clock())}"
            ) from None

    def _whom(self, lock: str, now: float) -> str:
        holder = locks.read_holder(lock)
        if holder is None:
            return f"waiting for the lock of {os.path.basename(lock)} (an eviction or a reader holds it)"
        since = holder["since"]
        return (
            f"waiting for node {holder['node']} importing {holder['reference']} since {_utc(since)} "
            f"({max(now - since, 0):.0f} s)"
        )

    def _import(self, ref: c.ImageRef, digest: str, image: str) -> None:
        self._remove_temps(digest)  # a killed importer's: we hold the lock, nobody else writes them
        temp = self._path(c.temp_name(digest, self.node, os.getpid()))
        start = self.clock()
        self.log(f"importing {ref.canonical} ({digest}) into {image}")
        try:
            self.importer(ref, digest, temp)
            if not os.path.isfile(temp) or os.path.getsize(temp) == 0:
                raise ImportFailed(f"importing {ref.canonical}: the importer wrote no squashfs")
            _fsync(temp)
            try:
                os.link(temp, image)
            except FileExistsError:
                self.log(f"{image} appeared during the import (written without the lock?): kept it")
            except OSError:  # no hard links here (EPERM, EOPNOTSUPP, EMLINK): the lock keeps the name ours
                if not os.path.exists(image):
                    os.rename(temp, image)
            _fsync(self.root, directory=True)
        except Exception as e:
            if isinstance(e, ImportFailed):
                raise
            raise ImportFailed(f"importing {ref.canonical} failed: {e}") from e
        finally:
            _unlink(temp)  # published by then under its own name, or failed: either way the temp name goes
        self.log(f"imported {ref.canonical} ({digest}, {os.path.getsize(image)} bytes) in {self.clock() - start:.0f} s")

    def _touch(self, ref: c.ImageRef, digest: str) -> None:
        """Note a use (and the reference, if new), at most once per TOUCH_EVERY_S; the first note creates the entry."""
        now = self.clock()
        try:
            old = self._read_entry(digest)
        except NewerFormat as e:  # formats.py's rule: what a newer hpcc wrote is kept, never rewritten in an older form
            self.log(f"{ref.canonical}: last use not noted: {e}")
            return
        except (OSError, c.BadRecord):
            old = None  # a damaged document: written anew
        if old and ref.canonical in old.references and now - old.last_used < TOUCH_EVERY_S:
            return
        size = os.path.getsize(self._path(c.image_name(digest)))
        refs = list(old.references) if old else []
        refs += [ref.canonical] if ref.canonical not in refs else []
        entry = c.CacheEntry(
            digest,
            refs,
            size,
            old.created if old else now,
            max(now, old.last_used) if old else now,
            old.imported_by if old and old.imported_by else self.node,
        )
        temp = self._path(c.temp_name(digest, self.node, os.getpid()) + c.ENTRY_SUFFIX)
        try:
            with open(temp, "w") as f:
                f.write(c.dumps_entry(entry))
                f.flush()
                os.fsync(f.fileno())
            os.replace(temp, self._path(c.entry_name(digest)))  # rename(2): readers see the old or the new, whole
        except OSError as e:  # a reader without write access to the cache: its use goes unnoted
            _unlink(temp)
            self.log(f"{ref.canonical}: last use not noted: {e}")

    def _read_entry(self, digest: str) -> Optional[c.CacheEntry]:
        """The entry's document, None when there is none; NewerFormat, BadRecord or OSError when it does not read."""
        try:
            with open(self._path(c.entry_name(digest))) as f:
                return c.loads_entry(f.read())
        except FileNotFoundError:
            return None

    def _entry(self, digest: str) -> Optional[c.CacheEntry]:
        try:
            return self._read_entry(digest)
        except (OSError, c.BadRecord, NewerFormat) as e:
            self.log(f"{c.entry_name(digest)}: not read ({e}); its squashfs's own times stand in")
            return None

    # -- list and evict ----------------------------------------------------------------------------------------------

    def list(self) -> List[c.CacheEntry]:
        """Every cached image, most recently used first; without a readable entry document, the squashfs's own
        times and no reference."""
        out = []
        for name in self._names():
            digest = c.digest_of(name)
            if digest is None or not name.endswith(c.IMAGE_SUFFIX):
                continue
            try:
                st = os.stat(self._path(name))
            except FileNotFoundError:
                continue  # evicted meanwhile
            entry = self._entry(digest)
            if entry is None:
                entry = c.CacheEntry(digest, [], st.st_size, st.st_mtime, st.st_mtime, "")
            out.append(entry._replace(size=st.st_size))
        return sorted(out, key=lambda e: (-e.last_used, e.digest))

    def _names(self) -> List[str]:
        try:
            return sorted(os.listdir(self.root))
        except FileNotFoundError:
            return []

    def evict(self, cap_bytes: int) -> List[Eviction]:
        """Least recently used entries removed until the cache holds at most `cap_bytes`; what was evicted and what
        was kept although over the cap, each with its reason (also logged)."""
        self.sweep()
        entries = sorted(self.list(), key=lambda e: (e.last_used, e.digest))
        total = before = sum(e.size for e in entries)
        out: List[Eviction] = []
        for entry in entries:
            if total <= cap_bytes:
                break
            evicted, reason = self._evict_one(entry, before, cap_bytes)
            ref = entry.references[0] if entry.references else "(reference unknown)"
            out.append(Eviction(entry.digest, ref, entry.size, evicted, reason))
            self.log(f"{'evicted' if evicted else 'kept'} {ref} ({entry.digest}, {entry.size} bytes): {reason}")
            total -= entry.size if evicted else 0
        if total > cap_bytes:
            self.log(f"the image cache holds {total} bytes, over its cap of {cap_bytes}: the rest is in use")
        return out

    def _evict_one(self, entry: c.CacheEntry, before: int, cap: int) -> Tuple[bool, str]:
        if self._recent(entry.last_used):
            return False, f"in use: last used {self.clock() - entry.last_used:.0f} s ago (within {self.grace_s:.0f} s)"
        lock = self._path(c.lock_name(entry.digest))
        fd = locks.try_acquire(lock, shared=False)
        if fd is None:
            return False, "in use: its lock is held (an import, or a reader)"
        try:
            keep = self._kept_after_all(entry.digest)
            if keep is None:
                _unlink(self._path(c.image_name(entry.digest)))
                _unlink(self._path(c.entry_name(entry.digest)))
        except BaseException:
            locks.release(fd)
            raise
        if keep is not None:
            locks.release(fd)
            return False, keep
        locks.remove(lock, fd)
        return True, (
            f"the cache held {before} bytes, over its cap of {cap}; least recently used first "
            f"(last used {_utc(entry.last_used)})"
        )

    def _kept_after_all(self, digest: str) -> Optional[str]:
        """Why an entry stays after all, read again under its lock (a node may have used it since the listing)."""
        try:
            fresh = self._read_entry(digest)
        except NewerFormat:
            return "its entry document is of a newer format: left to the newer hpcc that wrote it"
        except (OSError, c.BadRecord):
            return None
        if fresh and self._recent(fresh.last_used):
            return f"in use: used again at {_utc(fresh.last_used)}"
        return None

    def _recent(self, last_used: float) -> bool:
        return self.clock() - last_used < self.grace_s

    def sweep(self) -> List[str]:
        """Remove what no entry needs, when nobody holds its digest's lock: temp files of importers that were
        killed, and documents or lock files whose squashfs is gone. The names removed."""
        names = self._names()
        digests: Dict[str, List[str]] = {}
        for name in names:
            base = name[1:] if name.startswith(".") else name
            digest = c.digest_of(base.split(".", 1)[0] + c.LOCK_SUFFIX)
            if digest and c.image_name(digest) not in names:
                digests.setdefault(digest, []).append(name)
            elif digest and name.startswith(c.temp_prefix(digest)):
                digests.setdefault(digest, []).append(name)
        removed = []
        for digest, leftovers in sorted(digests.items()):
            lock = self._path(c.lock_name(digest))
            fd = locks.try_acquire(lock, shared=False)
            if fd is None:
                continue  # an import or a reader: its files are live
            try:
                present = os.path.exists(self._path(c.image_name(digest)))  # published since the listing: keep it
                for name in leftovers:
                    if name.startswith(c.temp_prefix(digest)) or not (present or name == c.lock_name(digest)):
                        removed += [name] if _unlink(self._path(name)) else []
            except BaseException:
                locks.release(fd)
                raise
            if present:
                locks.release(fd)
            else:
                locks.remove(lock, fd)
        for name in removed:
            self.log(f"removed {name}: left by an import or entry that is gone")
        return removed

    def _remove_temps(self, digest: str) -> None:
        for name in self._names():
            if name.startswith(c.temp_prefix(digest)) and _unlink(self._path(name)):
                self.log(f"removed {name}: a killed importer's")
