"""The image cache's per-digest lock files, flock(2)'d: exclusive while one process imports or evicts the image,
shared while a process checks or reads it. "A call to flock() may block if an incompatible lock is held by another
process"; the lock goes with the open file description, so a process that dies (or a node Lustre evicts) releases it
(flock(2), https://man7.org/linux/man-pages/man2/flock.2.html). On Lustre, flock is coherent across the clients
only on a mount with `-o flock` (hpcc mounts FSx so); without it the call fails with ENOSYS, which surfaces.

A waiter polls with LOCK_NB and a growing pause instead of blocking, so it can give up at its deadline and say whom
it waits for. An eviction unlinks the lock file while it holds it; a waiter that opened the old file then holds a
lock nobody else sees, so every acquisition checks that the file it locked is still the one at the path, and opens
it again if not. The exclusive holder writes who it is into the file (node, pid, reference, since) for the waiters'
progress lines, and empties it before it lets go."""

from __future__ import annotations

import errno
import fcntl
import json
import os
from typing import Any, Callable, Dict, Optional

from hpcc_contract.containers import BadRecord, BadReference, check_node, parse_reference

POLL_FIRST_S = 0.05
POLL_MAX_S = 2.0  # at most one LOCK_NB try every 2 s per waiting node: a few hundred a second at 1,000 nodes
HOLDER_MAX = 4096  # bytes of the holder's note read back


class LockTimeout(TimeoutError):
    """The lock was not free by the deadline."""


def _open(path: str) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except PermissionError:  # another user's lock file: a reader's shared lock needs no write access
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


def _still_at(fd: int, path: str) -> bool:
    try:
        here = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (here.st_dev, here.st_ino)


def try_acquire(path: str, shared: bool) -> Optional[int]:
    """The open, locked file descriptor, or None when an incompatible lock is held."""
    while True:
        fd = _open(path)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            raise
        if _still_at(fd, path):
            return fd
        os.close(fd)  # unlinked by an eviction while we opened it: lock the file now at the path


def acquire(
    path: str,
    shared: bool,
    deadline: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    waiting: Callable[[float], None],
) -> int:
    """try_acquire until it succeeds; `waiting(now)` before each pause; LockTimeout once `clock()` is past
    `deadline`."""
    pause = POLL_FIRST_S
    while True:
        fd = try_acquire(path, shared)
        if fd is not None:
            return fd
        now = clock()
        if now >= deadline:
            raise LockTimeout(path)
        waiting(now)
        sleep(min(pause, max(deadline - now, 0.0)))
        pause = min(pause * 2, POLL_MAX_S)


def release(fd: int, clear: bool = False) -> None:
    """Close (which releases the flock); `clear` empties the holder's note first."""
    try:
        if clear:
            os.ftruncate(fd, 0)
    except OSError:
        pass  # opened read-only: there was no note of ours
    finally:
        os.close(fd)


def remove(path: str, fd: int) -> None:
    """Unlink a lock file we hold exclusively, then let go: waiters on it open the next one (see above)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    release(fd)


def write_holder(fd: int, note: Dict[str, Any]) -> None:
    try:
        data = json.dumps(note).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except OSError:
        pass  # a note for the waiters' progress lines only


def read_holder(path: str) -> Optional[Dict[str, Any]]:
    """The exclusive holder's note ({node, pid, reference, since}), checked: another node wrote it. None when there
    is none or it does not read."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read(HOLDER_MAX).decode())
        since = doc["since"]
        if isinstance(since, bool) or not isinstance(since, (int, float)) or not isinstance(doc["pid"], int):
            return None
        return {
            "node": check_node(doc["node"]),
            "pid": doc["pid"],
            "reference": parse_reference(doc["reference"]).canonical,
            "since": float(since),
        }
    except (OSError, ValueError, KeyError, TypeError, BadRecord, BadReference):
        return None
