"""A node keeps the images its group's jobs use on its own disk (issue 35, part 3), so a job that lands here after a
failure elsewhere (on a spare the controller released, on a replacement it launched) starts from a local squashfs.

What the group wants is the controller's document, `<fsx>/.hpcc/prewarm.json` (hpcc_contract/prewarm.py; written by
hpcc_node/controller/images.py). plan() says what to copy: the wanted digests this node lacks that the shared cache
holds (a wanted image the shared cache lacks is logged, never pulled from a registry here). run() copies them in
order within a deadline, progress logged, and stops at the deadline with a warning: a node that cannot copy in time
still becomes ready (an image start from the shared cache is slower, never broken).

Entry points:
  - the boot, before the node reports ready (a replacement or a new node):
      `python3 -m hpcc_node.containers.prewarm --fsx /fsx --node gpu-007 --deadline 600 [--local DIR] [--cap SIZE]`
    prints one JSON document ({"copied", "present", "missing", "failed", "timedOut", "local"}) and exits 0 whether
    or not it finished in time (the warning is on stderr); 2 for a bad argument. Nothing to do (no document, no
    image wanted) is a quick 0.
  - the node agent of a held spare (hpcc_node/agent_images.py): `prewarm_node(...)`, the same in a thread.
  - tests and the box: plan(), run(), busy_job(), held_spare(read_document(fsx), node)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Callable, Collection, List, Mapping, NamedTuple, Optional, Sequence, TextIO, Tuple

from hpcc_contract import containers as c
from hpcc_contract import formats
from hpcc_contract import prewarm as contract
from hpcc_contract.hosts import group_of
from hpcc_node.containers.__main__ import UsageError, parse_size
from hpcc_node.containers.local import CopyTimeout, LocalImages, default_cap, default_dir

DEADLINE_S = 600.0  # the boot's bound: a 20 GB image at FSx's per-client rates is well within it
PROGRESS_EVERY_S = 30.0
# slurmd's step sockets, `<SlurmdSpoolDir>/<node>_<job>.<step>` (Slurm's src/common/stepd_api.c); SlurmdSpoolDir's
# default (slurm.conf(5)) and Debian's packaged one
SLURMD_SPOOL_DIRS = ("/var/spool/slurmd", "/var/lib/slurm/slurmd")

log = logging.getLogger("hpcc.containers.prewarm")
Progress = Callable[[int, int], None]


class Plan(NamedTuple):
    copy: List[contract.Wanted]  # wanted, not here, in the shared cache: in the document's order
    present: List[str]  # wanted and here already
    missing: List[contract.Wanted]  # wanted, but the shared cache does not hold it (evicted, or never imported)


class Outcome(NamedTuple):
    copied: List[str]
    present: List[str]
    missing: List[str]
    failed: List[Tuple[str, str]]  # (digest, why)
    timed_out: bool


def wanted_for(groups: Mapping[str, Sequence[contract.Wanted]], node: str) -> List[contract.Wanted]:
    """What the document asks of this node: its group's images (a node name is `<group>-NNN`)."""
    return list(groups.get(group_of(node), []))


def plan(wanted: Sequence[contract.Wanted], have: Collection[str], shared_has: Callable[[str], bool]) -> Plan:
    copy, present, missing = [], [], []
    for w in wanted:
        if w.digest in have:
            present.append(w.digest)
        elif shared_has(w.digest):
            copy.append(w)
        else:
            missing.append(w)
    return Plan(copy, present, missing)


def read_document(fsx: str) -> Optional[contract.Prewarm]:
    """The controller's document; None when it wrote none yet. NewerFormat, BadRecord, OSError."""
    try:
        with open(contract.prewarm_path(fsx)) as f:
            return contract.loads_prewarm(f.read())
    except FileNotFoundError:
        return None


def read_wanted(fsx: str, node: str) -> List[contract.Wanted]:
    """This node's wanted images; [] when the controller wrote no document yet."""
    doc = read_document(fsx)
    return wanted_for(doc.groups, node) if doc else []


def held_spare(doc: Optional[contract.Prewarm], node: str) -> bool:
    """Is this node one of its group's held spares, as the document says?"""
    return doc is not None and node in doc.spares.get(group_of(node), ())


def run(
    local: LocalImages,
    shared_root: str,
    wanted: Sequence[contract.Wanted],
    deadline: float,
    clock: Callable[[], float] = time.time,
    say: Callable[[str], None] = log.info,
) -> Outcome:
    """Copy what plan() says, in order, until done or `deadline`; every step said through `say`."""
    p = plan(
        wanted, {i.digest for i in local.list()}, lambda d: os.path.isfile(os.path.join(shared_root, c.image_name(d)))
    )
    for w in p.missing:
        say(f"prewarm: {w.reference} ({w.digest}) is not in the shared cache: not copied (its job imports it)")
    copied: List[str] = []
    failed: List[Tuple[str, str]] = []
    for n, w in enumerate(p.copy, 1):
        start = clock()
        progress = _progress(w.reference, start, clock, say)
        say(f"prewarm: copying {w.reference} ({w.digest}), {n} of {len(p.copy)}, for jobs {', '.join(w.jobs) or '?'}")
        try:
            local.copy(w.digest, os.path.join(shared_root, c.image_name(w.digest)), deadline, progress)
        except CopyTimeout as e:
            rest = [x.reference for x in p.copy[n - 1 :]]
            say(f"prewarm: warning: the deadline came first ({e}); not local: {', '.join(rest)}")
            return Outcome(copied, p.present, [m.digest for m in p.missing], failed, True)
        except OSError as e:  # evicted from the shared cache meanwhile, a full disk: the next image is tried
            failed.append((w.digest, str(e)[:300]))
            say(f"prewarm: copying {w.reference} failed: {e}")
            continue
        copied.append(w.digest)
        say(f"prewarm: {w.reference} is local ({clock() - start:.0f} s)")
    return Outcome(copied, p.present, [m.digest for m in p.missing], failed, False)


def _progress(reference: str, start: float, clock: Callable[[], float], say: Callable[[str], None]) -> Progress:
    """A copy's progress, said at most every PROGRESS_EVERY_S."""
    said = [start]

    def progress(done: int, total: int) -> None:
        now = clock()
        if now - said[0] >= PROGRESS_EVERY_S:
            said[0] = now
            say(f"prewarm: copying {reference}: {done >> 20} of {total >> 20} MiB ({now - start:.0f} s)")

    return progress


def busy_job(node: str, spool_dirs: Sequence[str] = SLURMD_SPOOL_DIRS) -> Optional[str]:
    """A job with a step running on this node (from slurmd's step sockets, no call to slurmctld), else None."""
    prefix = f"{node}_"
    for spool in spool_dirs:
        try:
            names = os.listdir(spool)
        except OSError:
            continue
        for name in sorted(names):
            if name.startswith(prefix) and "." in name[len(prefix) :]:
                return name[len(prefix) :].split(".", 1)[0]
    return None


def prewarm_node(
    fsx: str,
    node: str,
    local: LocalImages,
    deadline: float,
    cap: Optional[int] = None,
    clock: Callable[[], float] = time.time,
    say: Callable[[str], None] = log.info,
) -> Outcome:
    """The whole of it for one node: read the document, copy within the deadline, then keep the local directory
    within its cap (never evicting what the group wants)."""
    wanted = read_wanted(fsx, node)
    outcome = run(local, c.cache_root(fsx), wanted, deadline, clock, say)
    local.evict(default_cap(local.root) if cap is None else cap, keep={w.digest for w in wanted})
    return outcome


def main(argv: Optional[List[str]] = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    p = argparse.ArgumentParser(prog="python3 -m hpcc_node.containers.prewarm", description=__doc__.split("\n")[0])
    p.add_argument("--fsx", default=os.environ.get("HPCC_FSX_MOUNT") or "/fsx")
    p.add_argument("--node", default=os.environ.get("HPCC_NODE") or "")
    p.add_argument("--local", help="the local image directory (default: on the instance store, else the root volume)")
    p.add_argument("--deadline", type=float, default=DEADLINE_S, help="seconds")
    p.add_argument("--cap", help="the local directory's cap (bytes, or K/M/G/T); default half its file system")

    def say(line: str) -> None:
        err.write(line + "\n")
        err.flush()

    try:
        args = p.parse_args(argv)
        node = c.check_node(args.node)
        cap = parse_size(args.cap) if args.cap else None
    except SystemExit as e:
        return int(e.code or 0) and 2
    except (c.BadRecord, UsageError) as e:
        say(f"hpcc prewarm: {e}")
        return 2
    local = LocalImages(args.local or default_dir(), log=say)
    try:
        outcome = prewarm_node(args.fsx, node, local, time.time() + args.deadline, cap, say=say)
    except (formats.NewerFormat, c.BadRecord, OSError) as e:  # the node becomes ready all the same
        say(f"hpcc prewarm: warning: nothing prewarmed: {e}")
        outcome = Outcome([], [], [], [], False)
    doc = dict(outcome._asdict(), local=local.root)
    doc["timedOut"] = doc.pop("timed_out")
    out.write(json.dumps(doc) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
