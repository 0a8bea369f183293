"""A held spare keeps the images its group's jobs use on its own disk (issue 35, part 3): the node agent's side of
the prewarm, after the controller's document (`<fsx>/.hpcc/prewarm.json`, hpcc_node/controller/images.py, which names
each group's held spares). When the controller releases the spare for a failed node's requeued job, the job's image
is local already (hpcc_node/containers/local.py prefer_local answers it).

Each tick (images_due, pure): when the document changed since the last complete prewarm, or a prewarm that timed out
or failed is due again (RETRY_S), the document names this node a held spare, and no job runs on it, the copy runs in
a background thread (hpcc_node/containers/prewarm.py prewarm_node: copy within COPY_DEADLINE_S, then the local cap,
never evicting what the group wants), so the tick, the membership and the status go on meanwhile.

Why spares only, not every idle node: a requeued job lands on a spare by design (health/spares.py), and the copies
are read from the shared file system, whose throughput is the file system's, not the node's (FSx for Lustre: per TiB
of storage), shared with the running jobs' data and checkpoints; a new image copied to every idle node of a large
group would be (idle nodes x image size) of reads, 2 TB for 100 nodes and a 20 GB image. A replacement or a new node
copies its group's images at boot instead (prewarm.py, before it reports ready). Never while a job runs on the node
(a spare runs the controller's deep check now and then): the copy would compete with the job for the file system and
the local disk; the next tick after it ends copies. Which job runs is slurmd's step sockets on the node (prewarm.py
busy_job), no call to slurmctld from every node. Each decision is logged with its reason, a deferral once per job.

Entry point: the Agent's `follow_images()` (agent.py calls it each tick)."""

from __future__ import annotations

import os
import threading
from typing import Any, Dict, Optional, Tuple

from hpcc_contract import containers as c
from hpcc_contract import formats
from hpcc_contract import prewarm as contract
from hpcc_node.containers import prewarm
from hpcc_node.containers.local import LocalImages, default_dir

RETRY_S = 600.0
COPY_DEADLINE_S = 3600.0

Seen = Tuple[int, int]  # (mtime_ns, size) of the document


def images_due(
    seen: Optional[Seen],
    done: Optional[Seen],
    busy: Optional[str],
    running: bool,
    retry: Optional[bool],
    spare: bool,
) -> Tuple[Optional[str], Optional[str]]:
    """(why to prewarm now, why not): at most one of them set; both None when there is nothing to do. `seen`: the
    document now (None: there is none); `done`: the one the last complete prewarm followed; `retry`: None when no
    prewarm is incomplete, else whether its RETRY_S is over; `spare`: the document names this node a held spare."""
    if seen is None or running or seen == done or retry is False or not spare:
        return None, None  # nothing wanted, a copy under way, all done, an incomplete one not due yet, not a spare
    if busy is not None:
        return None, f"job {busy} runs on this node: the prewarm waits until it ends"
    if retry:
        return "the last prewarm did not finish (timed out or a copy failed): again", None
    return "the controller's prewarm document changed and names this node a held spare", None


def document_seen(path: str) -> Optional[Seen]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


class ImagesFollowing:
    """Agent's images method. What it uses of the agent: its config `c`, `node`, `settings`, `clock`, `log`."""

    images_thread: Optional[threading.Thread] = None
    images_done: Optional[Seen] = None
    images_retry_at: Optional[float] = None  # set while the last prewarm is incomplete
    images_deferred: Optional[str] = None
    images_local: Optional[LocalImages] = None
    images_spool: Tuple[str, ...] = prewarm.SLURMD_SPOOL_DIRS

    def follow_images(self) -> None:
        fsx = str(self.settings.get("MOUNT_POINT") or "")
        if self.c.role != "compute" or self.settings.get("SCHEDULER") != "slurm" or not fsx:
            return
        if not os.path.isdir(c.cache_root(fsx)):
            return  # no image was ever cached: nothing to keep
        seen = document_seen(contract.prewarm_path(fsx))
        running = self.images_thread is not None and self.images_thread.is_alive()
        retry = None if self.images_retry_at is None else self.clock() >= self.images_retry_at
        if seen is None or running or (seen == self.images_done and retry is None):
            return  # the document is read only when it changed or a retry is pending
        try:
            spare = prewarm.held_spare(prewarm.read_document(fsx), self.node.node)
        except (formats.NewerFormat, c.BadRecord, OSError) as e:
            spare = False
            self.log(f"prewarm: the controller's document is not read ({e})")
        busy = prewarm.busy_job(self.node.node, self.images_spool) if spare else None
        why, not_now = images_due(seen, self.images_done, busy, running, retry, spare)
        if not spare:  # nothing to copy under this document: read again when it changes
            self.images_done, self.images_retry_at = seen, None
        if not_now is not None and not_now != self.images_deferred:
            self.log(f"prewarm: {not_now}")
        self.images_deferred = not_now
        if why is None:
            return
        self.log(f"prewarm: {why}")
        if self.images_local is None:
            self.images_local = LocalImages(default_dir(), clock=self.clock, log=self.log)
        self.images_thread = threading.Thread(target=self._prewarm, args=(fsx, seen), name="hpcc-prewarm", daemon=True)
        self.images_thread.start()

    def _prewarm(self, fsx: str, seen: Seen) -> None:
        local = self.images_local
        assert local is not None
        try:
            out = prewarm.prewarm_node(fsx, self.node.node, local, self.clock() + COPY_DEADLINE_S, say=self.log)
            ok = not out.timed_out and not out.failed
            summary: Dict[str, Any] = {
                "copied": len(out.copied),
                "present": len(out.present),
                "missing": len(out.missing),
            }
        except Exception as e:  # the shared file system, a newer document: the next retry reads again
            ok, summary = False, {"error": str(e)[:300]}
        if ok:
            self.images_done, self.images_retry_at = seen, None
        else:
            self.images_retry_at = self.clock() + RETRY_S
        self.log(f"prewarm {'done' if ok else f'incomplete, again in {RETRY_S:.0f} s'}: {summary}")
