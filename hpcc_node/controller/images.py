"""Which images each node group's nodes keep on their own disks (issue 35, part 3): the controller's side of the
prewarm. Each loop with the lease, after reconciling (loop.py build_step's `after`):

1. UsageTail.read(): the nodes' usage records (`<fsx>/.hpcc/image-usage/<node>.jsonl`, a line per job and image,
   written by each node's image service) read incrementally: only the bytes each file grew by since the last loop
   (at most READ_BUDGET a file a loop), whole lines only, a file that shrank read again from its start. What it
   keeps is bounded: per job its (reference, digest, node) uses, at most MAX_JOBS jobs, the oldest dropped first,
   and a job Slurm no longer lists dropped once its last record is older than FORGET_S.
2. wanted_images(): pure. For each job Slurm runs now, its images are wanted by the group of each node it runs on;
   for a job pending after a requeue (Restarts > 0: health/decide.py requeues a failed node's jobs), by the groups
   of the nodes it ran on (the usage records name them). Most used first, at most MAX_IMAGES_PER_GROUP a group;
   each image's job ids with the requeued ones first, so the document keeps a restarting job's digest (a restart
   runs the image it ran: hpcc_node/containers/local.py prefer_local).
3. Publisher.publish(): `<fsx>/.hpcc/prewarm.json` (PREWARM), with each group's held spares (the reservation
   hpcc-spares-<group>: the nodes a requeued job lands on), written (temp + rename) only when what a group wants or
   which spares it holds changed, each change logged with its reason (which image, for which jobs, or that no job
   uses it any more; which spare).

The nodes act on it: hpcc_node/agent_images.py (a held spare), hpcc_node/containers/prewarm.py (a booting node,
before it reports ready)."""

from __future__ import annotations

import logging
import os
from typing import Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Set, Tuple

from hpcc_contract import containers as c
from hpcc_contract import formats
from hpcc_contract import prewarm as contract
from hpcc_contract.hosts import group_of
from hpcc_node.sshkeys import replace_file

from .health.spares import spare_reservation
from .model import SlurmJob, Snapshot

READ_BUDGET = 4 << 20  # bytes of one node's file a loop: a backlog is read over a few loops
MAX_JOBS = 20000
FORGET_S = 3600.0
RUNNING, PENDING = "RUNNING", "PENDING"

LOG = logging.getLogger("hpcc.controller")


class Use(NamedTuple):
    reference: str
    digest: str
    node: str


class UsageTail:
    """The usage records read so far, job -> its uses and the time of its last record."""

    def __init__(self, directory: str, log: Callable[[str], None] = LOG.info) -> None:
        self.directory, self.log = directory, log
        self.offsets: Dict[str, int] = {}  # file name -> bytes read (whole lines)
        self.jobs: Dict[str, Tuple[float, Set[Use]]] = {}

    def read(self) -> int:
        """New records read this time."""
        try:
            names = sorted(n for n in os.listdir(self.directory) if n.endswith(".jsonl") and not n.startswith("."))
        except FileNotFoundError:
            return 0
        new = 0
        for name in names:
            new += self._read_file(name)
        for gone in set(self.offsets) - set(names):
            del self.offsets[gone]
        return new

    def _read_file(self, name: str) -> int:
        path = os.path.join(self.directory, name)
        offset = self.offsets.get(name, 0)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < offset:  # truncated or replaced: read from its start
                    offset = 0
                f.seek(offset)
                data = f.read(min(READ_BUDGET, size - offset))
        except OSError as e:
            self.log(f"prewarm: {path} not read ({e})")
            return 0
        whole = data.rfind(b"\n") + 1
        if whole == 0 and len(data) >= READ_BUDGET:  # one line longer than the budget: no record, skipped
            whole = len(data)
        self.offsets[name] = offset + whole
        count = 0
        for line in data[:whole].splitlines():
            try:
                record = c.loads_usage(line.decode("utf-8", "replace"))
            except (c.BadRecord, formats.NewerFormat):
                continue  # a newer hpcc's record, or a damaged one: the rest still count
            if record.digest is not None:
                self.add(record)
                count += 1
        return count

    def add(self, record: c.UsageRecord) -> None:
        at, uses = self.jobs.get(record.job, (0.0, set()))
        uses.add(Use(record.reference, record.digest or "", record.node))
        self.jobs[record.job] = (max(at, record.time), uses)
        if len(self.jobs) > MAX_JOBS:  # down to nine tenths at once: one sort per MAX_JOBS / 10 new jobs
            keep = MAX_JOBS * 9 // 10
            for job, _ in sorted(self.jobs.items(), key=lambda kv: kv[1][0])[: len(self.jobs) - keep]:
                del self.jobs[job]

    def forget(self, listed: Set[str], now: float) -> None:
        """Drop jobs Slurm no longer lists whose last record is older than FORGET_S."""
        for job in [j for j, (at, _) in self.jobs.items() if j not in listed and now - at >= FORGET_S]:
            del self.jobs[job]

    def uses(self) -> Dict[str, Set[Use]]:
        return {job: uses for job, (_, uses) in self.jobs.items()}


def wanted_images(
    uses: Mapping[str, Set[Use]], jobs: Sequence[SlurmJob], group_names: Mapping[str, str]
) -> Dict[str, List[contract.Wanted]]:
    """Per group, the images its nodes should hold: the running jobs' on their nodes' groups, the requeued pending
    jobs' on the groups they ran on. `group_names`: node name -> group (the ledger's slots). Most jobs first."""
    per: Dict[str, Dict[str, Tuple[str, Set[str]]]] = {}
    requeued: Set[str] = set()
    for job in jobs:
        found = uses.get(job.job_id)
        if not found:
            continue
        if job.state == RUNNING:
            nodes = set(job.nodes) or {u.node for u in found}
            if job.restarts > 0:  # restarted already: kept first too, whether or not a loop saw it pending
                requeued.add(job.job_id)
        elif job.state == PENDING and job.restarts > 0:
            nodes = {u.node for u in found}
            requeued.add(job.job_id)
        else:
            continue
        groups = {group_names.get(n) or group_of(n) for n in nodes} - {""}
        for group in groups:
            images = per.setdefault(group, {})
            for use in found:
                ref, who = images.get(use.digest, (use.reference, set()))
                who.add(job.job_id)
                images[use.digest] = (ref, who)
    out: Dict[str, List[contract.Wanted]] = {}
    for group, images in per.items():
        ranked = sorted(images.items(), key=lambda kv: (-len(kv[1][1]), kv[0]))[: contract.MAX_IMAGES_PER_GROUP]
        out[group] = [
            contract.Wanted(
                d,
                ref,
                tuple(sorted(who, key=lambda j: (j not in requeued, _job_order(j)))[: contract.MAX_JOBS_PER_IMAGE]),
            )
            for d, (ref, who) in ranked
        ]
    return out


def _job_order(job: str) -> Tuple[int, str]:
    head = job.split("_", 1)[0].split("+", 1)[0]
    return (int(head) if head.isdigit() else 0, job)


def changes(old: contract.Prewarm, new: contract.Prewarm) -> List[str]:
    """One line per group whose wanted digests or held spares changed, with the reason for each change."""
    lines = []
    for group in sorted(set(old.groups) | set(new.groups) | set(old.spares) | set(new.spares)):
        before = {w.digest: w for w in old.groups.get(group, [])}
        after = {w.digest: w for w in new.groups.get(group, [])}
        said = [
            f"+{w.reference} ({d}) for jobs {', '.join(w.jobs)}" for d, w in sorted(after.items()) if d not in before
        ]
        said += [
            f"-{w.reference} ({d}): no running or requeued job of the group uses it"
            for d, w in sorted(before.items())
            if d not in after
        ]
        had, has = set(old.spares.get(group, ())), set(new.spares.get(group, ()))
        said += [f"spare {n} held (it copies the group's images)" for n in sorted(has - had)]
        said += [f"spare {n} released" for n in sorted(had - has)]
        if said:
            lines.append(f"prewarm: group {group}: {'; '.join(said)}")
    return lines


class Publisher:
    """Writes the document when a group's wanted digests or held spares change (not for a job id alone: nodes act
    on digests)."""

    def __init__(self, fsx: str, clock: Callable[[], float], log: Callable[[str], None] = LOG.info) -> None:
        self.path, self.clock, self.log = contract.prewarm_path(fsx), clock, log
        self.last: Optional[contract.Prewarm] = None

    def _current(self) -> contract.Prewarm:
        if self.last is None:
            try:
                with open(self.path) as f:
                    self.last = contract.loads_prewarm(f.read())
            except (OSError, c.BadRecord, formats.NewerFormat):
                self.last = contract.Prewarm({}, {})  # none, damaged or a newer hpcc's: written anew
        return self.last

    def publish(
        self, wanted: Dict[str, List[contract.Wanted]], spares: Optional[Mapping[str, Sequence[str]]] = None
    ) -> bool:
        new = contract.Prewarm(
            {g: list(w) for g, w in wanted.items()}, {g: tuple(sorted(n)) for g, n in (spares or {}).items() if n}
        )
        lines = changes(self._current(), new)
        if not lines:
            return False
        os.makedirs(os.path.dirname(self.path), mode=0o755, exist_ok=True)
        replace_file(self.path, contract.dumps_prewarm(new.groups, self.clock(), new.spares))  # whole, by rename
        self.last = new
        for line in lines:
            self.log(line)
        return True


def held_spares(snap: Snapshot) -> Dict[str, Tuple[str, ...]]:
    """Each group's nodes in its spares reservation (health/spares.py), as Slurm holds it."""
    groups = {s.group for s in snap.slots.values()}
    return {g: tuple(sorted(snap.reservations.get(spare_reservation(g), ()))) for g in sorted(groups)}


class Prewarm:
    """The loop's hook: `Prewarm(fsx, clock)(snapshot)` after each loop with the lease."""

    def __init__(self, fsx: str, clock: Callable[[], float], log: Callable[[str], None] = LOG.info) -> None:
        self.tail = UsageTail(c.usage_dir(fsx), log)
        self.publisher = Publisher(fsx, clock, log)
        self.log = log

    def __call__(self, snap: Snapshot) -> bool:
        if snap.slurm is None:
            return False
        self.tail.read()
        self.tail.forget({j.job_id for j in snap.jobs}, snap.now)
        names = {s.name: s.group for s in snap.slots.values()}
        return self.publisher.publish(wanted_images(self.tail.uses(), snap.jobs, names), held_spares(snap))


def fsx_mount(settings_text: str, env: Mapping[str, str]) -> str:
    """The cluster file system's mount point on the head: $HPCC_FSX_MOUNT, else the settings' MOUNT_POINT ("" for
    none: no prewarm)."""
    found = env.get("HPCC_FSX_MOUNT", "")
    for line in settings_text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key == "MOUNT_POINT" and value and not found:
            found = value
    return found


def hook(settings_text: str, env: Mapping[str, str], slurm: bool, clock: Callable[[], float]) -> Optional[Prewarm]:
    """The loop's `after` where the cluster runs Slurm and mounts a file system; else None."""
    fsx = fsx_mount(settings_text, env)
    return Prewarm(fsx, clock, LOG.info) if slurm and fsx else None
