"""The node's image service (issue 35; run by a compute node's agent: hpcc_node/agent_image_service.py): root,
listening on hpcc_contract.containers.SERVICE_SOCKET (mode 0666), imports images into the shared cache with root's
registry credentials and answers a job's importer (importer.py, run by pyxis as the job's user) with the squashfs's
path. So no user ever holds a registry credential: the ECR token and the NGC key stay in ROOT_ENROOT_CONFIG (0700),
named by the environment of the service's own enroot children alone.

One connection, one request: a line of at most MAX_REQUEST bytes within REQUEST_TIMEOUT_S (IMAGE_REQUEST: the
reference as pyxis passes it and SLURM_JOB_ID), one answer line (IMAGE_ANSWER: the path or a one-line error). The
caller is who the kernel says (SO_PEERCRED: pid, uid, gid), never who the request says; the job check (injected: the
real one, jobcheck.py, reads the caller's cgroup) decides whether that caller runs that job on this node. The
reference is parsed by the contract and refused by name when malformed; it reaches enroot as one argv element, never
through a shell. A thread per connection (at most MAX_CLIENTS at once, the rest told the service is busy); callers of
one image share one import, since the cache's per-digest flock serialises them (cache.py). Each job's first use of an
image is recorded (IMAGE_USE, injected writer). A failure answers one line and is logged; no traceback reaches a
caller."""

from __future__ import annotations

import logging
import os
import socket
import stat
import struct
import subprocess
import threading
import time
from typing import Callable, Dict, NamedTuple, Optional, Set, Tuple

from hpcc_contract import containers as c
from hpcc_contract import formats
from hpcc_node.containers import local, locks
from hpcc_node.containers.cache import ImageCache, ImportFailed
from hpcc_node.containers.enroot import enroot_digest, enroot_import

MAX_CLIENTS = 256
SQUASHFS_MODE = 0o644  # enroot writes under umask 077 (src/common.sh); users' `enroot create` reads the file
_SEEN_MAX = 10000  # (job, image) pairs remembered so a job's steps record an image once

log = logging.getLogger("hpcc.containers.service")


class Peer(NamedTuple):
    pid: int
    uid: int
    gid: int


JobCheck = Callable[[Peer, str], bool]  # does this caller run this Slurm job on this node?
Ensure = local.JobEnsure  # (a reference, the job asking) -> the squashfs's path (local.prefer_local)
Recorder = Callable[[c.UsageRecord], None]


class Refused(Exception):
    """A request answered with an error: the message is the caller's one line."""


def peer_of(conn: socket.socket) -> Peer:
    """The connected process as the kernel saw it at connect(2): struct ucred {pid, uid, gid} (unix(7))."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return Peer(*struct.unpack("3i", raw))


def read_request(conn: socket.socket, limit: int = c.MAX_REQUEST) -> bytes:
    """The request line (without its newline; EOF ends it too); Refused when over `limit` or empty."""
    data = b""
    try:
        while b"\n" not in data and len(data) <= limit:
            chunk = conn.recv(limit + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        raise Refused("no whole request line in time") from None
    line = data.split(b"\n", 1)[0]
    if len(line) > limit:
        raise Refused(f"request over {limit} bytes")
    if not line.strip():
        raise Refused("empty request")
    return line


def _drain(conn: socket.socket, most: int = 16 * c.MAX_REQUEST) -> None:
    """Read what the caller sent beyond its request, without waiting: closing a Unix socket with unread data resets
    the connection (ECONNRESET), and the caller would lose the answer it was sent (an oversized request's refusal)."""
    try:
        conn.shutdown(socket.SHUT_WR)
        conn.setblocking(False)
        while most > 0:
            chunk = conn.recv(min(most, 65536))
            if not chunk:
                return
            most -= len(chunk)
    except OSError:  # BlockingIOError: nothing more now; or the caller has gone
        pass


class ImageService:
    def __init__(
        self,
        path: str,
        ensure: Ensure,
        job_check: JobCheck,
        record: Recorder,
        node: str,
        clock: Callable[[], float] = time.time,
        timeout_s: float = c.REQUEST_TIMEOUT_S,
        max_clients: int = MAX_CLIENTS,
    ) -> None:
        self.path, self.ensure, self.job_check, self.record = path, ensure, job_check, record
        self.node, self.clock, self.timeout_s = c.check_node(node), clock, timeout_s
        self._slots = threading.BoundedSemaphore(max_clients)
        self._seen: Set[Tuple[str, str]] = set()
        self._seen_lock = threading.Lock()
        self._sock: Optional[socket.socket] = None

    def bind(self) -> None:
        """Listen on the path (a stale socket replaced, anything else there refused), mode SERVICE_SOCKET_MODE."""
        os.makedirs(os.path.dirname(self.path) or ".", mode=0o755, exist_ok=True)
        try:
            if not stat.S_ISSOCK(os.lstat(self.path).st_mode):
                raise OSError(f"{self.path} exists and is not a socket: not replaced")
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(self.path)
        os.chmod(self.path, c.SERVICE_SOCKET_MODE)
        sock.listen(128)
        self._sock = sock

    def serve(self) -> None:
        """Accept until close(); each connection in its own thread."""
        sock = self._sock
        assert sock is not None, "bind() first"
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:  # closed
                return
            if not self._slots.acquire(blocking=False):
                self._answer(conn, c.ImageAnswer(None, "the image service is busy: try again"))
                conn.close()
                continue
            threading.Thread(target=self._serve_one, args=(conn,), name="hpcc-image", daemon=True).start()

    def start(self) -> threading.Thread:
        self.bind()
        thread = threading.Thread(target=self.serve, name="hpcc-image-accept", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        """Stop accepting (shutdown(2) wakes a thread blocked in accept(); close(2) alone does not, on Linux)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _serve_one(self, conn: socket.socket) -> None:
        try:
            self._answer(conn, self.handle(conn))
            _drain(conn)
        finally:
            conn.close()
            self._slots.release()

    def _answer(self, conn: socket.socket, answer: c.ImageAnswer) -> None:
        try:
            conn.settimeout(self.timeout_s)
            conn.sendall(c.dumps_answer(answer))
        except OSError as e:  # the caller went away (its step was cancelled): nothing to tell
            log.info("image service: answer not delivered: %s", e)

    def handle(self, conn: socket.socket) -> c.ImageAnswer:
        """One connection's answer; every refusal a line, every unexpected failure logged here and answered in one."""
        peer = Peer(-1, -1, -1)
        try:
            peer = peer_of(conn)
            conn.settimeout(self.timeout_s)
            request = c.loads_request(read_request(conn))
            return c.ImageAnswer(self._ensure(peer, request), None)
        except (Refused, c.BadRecord, c.BadReference, formats.NewerFormat) as e:
            why = str(e)
        except (ImportFailed, locks.LockTimeout, OSError, subprocess.SubprocessError) as e:
            why = f"importing failed: {e}"
        except Exception:
            log.exception("image service: pid %d uid %d: unexpected failure", peer.pid, peer.uid)
            return c.ImageAnswer(None, "the image service failed (its log on this node says why)")
        log.info("image service: pid %d uid %d refused: %s", peer.pid, peer.uid, why)
        return c.ImageAnswer(None, why)

    def _ensure(self, peer: Peer, request: c.ImageRequest) -> str:
        if not self.job_check(peer, request.job):
            raise Refused(f"uid {peer.uid} runs no Slurm job {request.job} on this node")
        ref = c.parse_reference(request.reference)
        log.info("image service: job %s (pid %d uid %d) wants %s", request.job, peer.pid, peer.uid, ref.canonical)
        path = self.ensure(request.reference, request.job)
        self._record(request.job, ref, path)
        return path

    def _record(self, job: str, ref: c.ImageRef, path: str) -> None:
        key = (job, ref.canonical)
        with self._seen_lock:
            if key in self._seen:
                return
            if len(self._seen) >= _SEEN_MAX:
                self._seen.clear()
            self._seen.add(key)
        digest = c.digest_of(os.path.basename(path))
        try:
            self.record(c.UsageRecord(job, ref.canonical, digest, self.node, self.clock()))
        except (OSError, c.BadRecord) as e:  # the record serves the spares' prewarm; the job has its image
            log.warning("image service: usage of %s by job %s not recorded: %s", ref.canonical, job, e)


# -- the real parts (what the node agent will wire) ----------------------------------------------------------------


def check_private(directory: str) -> str:
    """`directory`, if it is a directory this process owns that no one else may enter; else OSError."""
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise OSError(f"{directory}: not a directory of uid {os.geteuid()} with mode 0700: credentials not used")
    return directory


def root_enroot(
    config_path: str = c.ROOT_ENROOT_CONFIG, base_env: Optional[Dict[str, str]] = None
) -> Tuple[Callable[[c.ImageRef], str], Callable[[c.ImageRef, str, str], None]]:
    """The cache's resolver and importer: `enroot digest` and `enroot import` with ENROOT_CONFIG_PATH at root's
    private credentials (the variable wins over enroot.conf's key: enroot.in config::load), each squashfs then
    made readable by the users who run it."""
    env = dict(os.environ if base_env is None else base_env, ENROOT_CONFIG_PATH=check_private(config_path))

    def resolve(ref: c.ImageRef) -> str:
        return enroot_digest(ref, env=env)

    def import_(ref: c.ImageRef, digest: str, dest: str) -> None:
        enroot_import(ref, digest, dest, env=env)
        os.chmod(dest, SQUASHFS_MODE)

    return resolve, import_


def usage_appender(fsx_mount: str, node: str) -> Recorder:
    """Appends each record to `<fsx>/.hpcc/image-usage/<node>.jsonl` (one writer per file: this node's service)."""
    path = os.path.join(c.usage_dir(fsx_mount), f"{c.check_node(node)}.jsonl")
    lock = threading.Lock()

    def record(usage: c.UsageRecord) -> None:
        line = c.dumps_usage(usage).encode()
        with lock:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)

    return record


def make_service(
    fsx_mount: str, node: str, job_check: JobCheck, path: str = c.SERVICE_SOCKET, local_dir: Optional[str] = None
) -> ImageService:
    """The service as a node runs it: the node's local copy where it holds the image (local.py; `local_dir`, else
    the instance store's or the root volume's), else the shared cache on the cluster's file system; root's enroot."""
    resolve, import_ = root_enroot()
    resolve = local.remembered(resolve)  # one `enroot digest` for the local look and the shared cache's
    cache = ImageCache(c.cache_root(fsx_mount), resolve, import_, node=node, log=log.info)
    here = local.LocalImages(local_dir or local.default_dir(), log=log.info)
    ensure = local.prefer_local(cache.ensure, resolve, here, local.recorded_digests(fsx_mount))
    return ImageService(path, ensure, job_check, usage_appender(fsx_mount, node), node)
