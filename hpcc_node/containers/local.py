"""A node's own copy of cached images (issue 35, part 3): `sha256-<hex>.sqsh` in the node's local image directory
(hpcc_contract/prewarm.py local_images_dir: the instance store where the node has one, else the root volume), copied
from the shared cache on the cluster's file system. A warm start then reads the squashfs from the node's own disk.

Entry points: `LocalImages(root)` (copy, has, evict), `prefer_local(shared_ensure, resolve, local)` (what the image
service answers with: the local copy when the node holds the image, else the shared cache's; service.py's
make_service builds it), `remembered(resolve)` (one `enroot digest` per reference and minute, shared by the two).

A copy is written to a hidden temp name in the same directory, fsync'd, then rename(2)d to its digest's name, which
"is atomic": a reader sees no file or the whole one (https://man7.org/linux/man-pages/man2/rename.2.html); its size
is checked against the source first. The name is the digest, so a file under it is that image and a second copy is
skipped (idempotent). Each use sets the copy's mtime (os.utime), the LRU clock of evict(): least recently used
first until the directory is within its cap, never an image the caller keeps (its group's wanted ones) nor one used
within GRACE_S (pyxis' importer answers a path a moment before enroot opens it: cache.py's reasoning), each
eviction logged with its reason. An unlinked file stays readable by whoever has it open (unlink(2))."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable, Collection, Dict, List, NamedTuple, Optional, Tuple

from hpcc_contract import containers as c
from hpcc_contract import prewarm as contract

GRACE_S = 600.0
REMEMBER_S = 60.0  # a reference's digest is asked again after this: a moved tag is seen within a minute
CHUNK = 16 << 20
CAP_FRACTION = 0.5  # of the local file system, when no cap is given: enroot's own data shares it

log = logging.getLogger("hpcc.containers.local")

Ensure = Callable[[str], str]  # the shared cache's: a reference -> its squashfs
JobEnsure = Callable[[str, str], str]  # the service's: (a reference, the job asking) -> a squashfs
Resolver = Callable[[c.ImageRef], str]
JobDigest = Callable[[str, str], Optional[str]]  # (job, canonical reference) -> the digest the job ran, if recorded


class CopyTimeout(TimeoutError):
    """The copy did not finish by its deadline; nothing was published."""


class LocalImage(NamedTuple):
    digest: str
    size: int
    last_used: float


def default_dir(is_mount: Callable[[str], bool] = os.path.ismount) -> str:
    """The node's local image directory: on the instance store when it is mounted, else the root volume's."""
    store = c.INSTANCE_STORE_MOUNT
    return contract.local_images_dir(store if is_mount(store) else None)


def default_cap(root: str, fraction: float = CAP_FRACTION) -> int:
    """A share of the file system the directory is on (statvfs(2): f_blocks x f_frsize)."""
    probe = root
    while not os.path.exists(probe) and probe != os.path.dirname(probe):
        probe = os.path.dirname(probe)
    st = os.statvfs(probe)
    return int(st.f_blocks * st.f_frsize * fraction)


class LocalImages:
    def __init__(
        self,
        root: str,
        clock: Callable[[], float] = time.time,
        log: Optional[Callable[[str], None]] = None,
        grace_s: float = GRACE_S,
    ) -> None:
        self.root, self.clock, self.grace_s = root, clock, grace_s
        self.log = log or logging.getLogger("hpcc.containers.local").info

    def path(self, digest: str) -> str:
        return os.path.join(self.root, c.image_name(digest))

    def has(self, digest: str) -> bool:
        return os.path.isfile(self.path(digest))

    def touch(self, digest: str) -> None:
        try:
            now = self.clock()
            os.utime(self.path(digest), (now, now))
        except OSError:  # evicted meanwhile, or a read-only disk: the use goes unnoted
            pass

    def copy(
        self,
        digest: str,
        source: str,
        deadline: float = float("inf"),
        progress: Optional[Callable[[int, int], None]] = None,
    ) -> bool:
        """Copy the shared cache's squashfs `source` in as `digest`'s; False when it was here already. CopyTimeout
        past `deadline` (checked between chunks), OSError when the source or the disk fails; no partial file stays."""
        dest = self.path(digest)
        if os.path.isfile(dest):
            return False
        os.makedirs(self.root, mode=0o755, exist_ok=True)
        temp = os.path.join(self.root, f"{c.temp_prefix(digest)}{os.getpid()}.{threading.get_ident()}{c.TEMP_SUFFIX}")
        try:
            with open(source, "rb") as src, open(temp, "wb") as out:
                total, done = os.fstat(src.fileno()).st_size, 0
                while True:
                    if self.clock() > deadline:
                        raise CopyTimeout(f"{digest}: {done} of {total} bytes copied by the deadline")
                    chunk = src.read(CHUNK)
                    if not chunk:
                        break
                    out.write(chunk)
                    done += len(chunk)
                    if progress is not None:
                        progress(done, total)
                out.flush()
                os.fsync(out.fileno())
            if done != total:
                raise OSError(f"{source}: read {done} bytes of {total} (changed while copied?)")
            os.chmod(temp, 0o644)  # users' enroot reads it, as the shared cache's (service.py SQUASHFS_MODE)
            os.replace(temp, dest)
        finally:
            try:
                os.unlink(temp)
            except FileNotFoundError:
                pass
        self.touch(digest)
        return True

    def list(self) -> List[LocalImage]:
        out = []
        try:
            names = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return []
        for name in names:
            digest = c.digest_of(name)
            if digest is None or not name.endswith(c.IMAGE_SUFFIX):
                continue
            try:
                st = os.stat(os.path.join(self.root, name))
            except FileNotFoundError:
                continue
            out.append(LocalImage(digest, st.st_size, st.st_mtime))
        return out

    def sweep(self) -> List[str]:
        """Temp files a killed copy left (older than the grace: a running copy's is younger); their names."""
        gone = []
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        for name in names:
            path = os.path.join(self.root, name)
            try:
                if name.startswith(".") and name.endswith(c.TEMP_SUFFIX) and self._old(os.stat(path).st_mtime):
                    os.unlink(path)
                    gone.append(name)
            except FileNotFoundError:
                pass
        return gone

    def _old(self, t: float) -> bool:
        return self.clock() - t >= self.grace_s

    def evict(self, cap_bytes: int, keep: Collection[str] = ()) -> List[Tuple[str, bool, str]]:
        """(digest, evicted, reason) for each image looked at, least recently used first, until within the cap."""
        self.sweep()
        images = sorted(self.list(), key=lambda i: (i.last_used, i.digest))
        total = sum(i.size for i in images)
        out = []
        for image in images:
            if total <= cap_bytes:
                break
            if image.digest in keep:
                evicted, why = False, "its group's jobs use it (prewarm)"
            elif not self._old(image.last_used):
                evicted, why = False, f"used {self.clock() - image.last_used:.0f} s ago (within {self.grace_s:.0f} s)"
            else:
                try:
                    os.unlink(self.path(image.digest))
                except FileNotFoundError:
                    pass
                evicted, why = (
                    True,
                    f"local images held {total} bytes, over the cap of {cap_bytes}; least recently used",
                )
                total -= image.size
            self.log(f"local image {image.digest} ({image.size} bytes) {'evicted' if evicted else 'kept'}: {why}")
            out.append((image.digest, evicted, why))
        return out


def remembered(resolve: Resolver, clock: Callable[[], float] = time.time, ttl_s: float = REMEMBER_S) -> Resolver:
    """`resolve`, its answer per canonical reference kept for `ttl_s` (bounded): prefer_local and the shared cache
    behind it ask once per start, not twice. A reference that pins a digest is asked too: the pin may be a manifest
    list's digest, and the cache keys the platform's manifest (hpcc_contract/containers.py), which enroot picks."""
    memo: Dict[str, Tuple[float, str]] = {}
    lock = threading.Lock()

    def resolved(ref: c.ImageRef) -> str:
        now = clock()
        with lock:
            hit = memo.get(ref.canonical)
            if hit and now - hit[0] < ttl_s:
                return hit[1]
        digest = resolve(ref)
        with lock:
            if len(memo) >= 1024:
                memo.clear()
            memo[ref.canonical] = (now, digest)
        return digest

    return resolved


def prefer_local(
    shared_ensure: Ensure, resolve: Resolver, local: LocalImages, ran: Optional[JobDigest] = None
) -> JobEnsure:
    """An ensure that answers the node's local copy when it holds the reference's digest (its use noted), else the
    shared cache's answer. A local miss never copies on the job's time: the shared squashfs serves this start, and
    the prewarm (agent_images.py) copies what the group's jobs use while the node is idle.

    `ran`: the digest a job already ran for the reference (the controller's prewarm document records a requeued
    job's). A job restarting on a node that holds that digest starts from it without asking the registry: the
    restart runs the image the job ran, and its start does not wait on the registry."""

    def ensure(reference: str, job: str = "") -> str:
        ref = c.parse_reference(reference)
        before = ran(job, ref.canonical) if ran is not None and job else None
        if before is not None and local.has(before):
            local.touch(before)
            log.info(
                "local images: job %s restarts on the image it ran, %s (%s), from this node's copy; the registry "
                "not asked",
                job,
                ref.canonical,
                before,
            )
            return local.path(before)
        try:
            digest = c.check_digest(resolve(ref))
        except Exception as e:  # the shared ensure resolves again and says why in its own words
            log.info("local images: %s not resolved (%s): the shared cache answers", ref.canonical, e)
            return shared_ensure(reference)
        if local.has(digest):
            local.touch(digest)
            log.info("local images: %s (%s) started from this node's copy", ref.canonical, digest)
            return local.path(digest)
        return shared_ensure(reference)

    return ensure


def recorded_digests(fsx_mount: str) -> JobDigest:
    """`ran` for prefer_local: the controller's prewarm document, read at each ask (a small file, asked once per job
    start); any failure to read it is no record (the job's reference is resolved as for any job)."""

    def ran(job: str, reference: str) -> Optional[str]:
        try:
            with open(contract.prewarm_path(fsx_mount)) as f:
                doc = contract.loads_prewarm(f.read())
        except (OSError, ValueError) as e:  # BadRecord and NewerFormat are ValueErrors
            if not isinstance(e, FileNotFoundError):
                log.info("local images: the prewarm document is not read (%s): job %s's image resolved", e, job)
            return None
        return contract.job_digest(doc, job, reference)

    return ran
