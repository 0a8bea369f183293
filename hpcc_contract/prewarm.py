"""Spares and replacements prewarmed (issue 35, part 3): which images each node group's nodes keep on their own disk,
and where. Standard library only, like the rest of the contract.

The controller on the head writes one document, `<fsx mount>/.hpcc/prewarm.json` (PREWARM, versioned in
formats.py): per node group, the image digests that jobs running on that group's nodes use now (and jobs requeued
from it, pending), each with the reference they asked for and a few of their job ids, from the nodes' usage records
(hpcc_contract/containers.py IMAGE_USE) and Slurm's jobs (hpcc_node/controller/images.py); and per group its held
spares (the nodes of the reservation hpcc-spares-<group>). A held spare copies what its group wants from the shared
cache to its local image directory (hpcc_node/agent_images.py); a booting node (a replacement, a new node) does the
same before it reports ready (hpcc_node/containers/prewarm.py).

The local copy. `sha256-<hex>.sqsh` (the shared cache's own name: a digest-named file is the image) in
`local_images_dir()`: beside enroot's own data, on the instance store where the type has one (the DLAMI mounts it at
containers.py's INSTANCE_STORE_MOUNT; infra/render/containers.py puts enroot's paths there too), else on the root
volume. The shared cache stays on Lustre; a job started from the local copy reads its 20 GB from NVMe, not from the
file system that a hundred other nodes read at the same time."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from hpcc_contract import formats
from hpcc_contract.containers import BadRecord, BadReference, check_digest, parse_reference

PREWARM_SUBPATH = os.path.join(".hpcc", "prewarm.json")
ROOT_VOLUME_DIR = "/var/lib/hpcc/images"  # beside enroot's root-volume base, /var/lib/hpcc/enroot
LOCAL_DIR_NAME = "hpcc-images"
MAX_IMAGES_PER_GROUP = 16  # bounds the document and every node's copying; the most used first beyond it
MAX_JOBS_PER_IMAGE = 8  # job ids kept per image: the reason a line of the log gives, not an inventory


def prewarm_path(fsx_mount: str) -> str:
    return os.path.join(fsx_mount, PREWARM_SUBPATH)


def local_images_dir(instance_store: Optional[str]) -> str:
    """The node's local image directory: `<instance store>/hpcc-images` when the node has one mounted (pass the
    mount point), else ROOT_VOLUME_DIR."""
    return os.path.join(instance_store, LOCAL_DIR_NAME) if instance_store else ROOT_VOLUME_DIR


class Wanted(NamedTuple):
    digest: str  # sha256:<hex>, the shared cache's key
    reference: str  # canonical, as the jobs asked for it
    jobs: Sequence[str]  # some of the jobs that use it (at most MAX_JOBS_PER_IMAGE), sorted


class Prewarm(NamedTuple):
    groups: Dict[str, List[Wanted]]  # group -> the images its nodes keep, most used first
    spares: Dict[str, Tuple[str, ...]]  # group -> its held spares (hpcc-spares-<group>), the nodes that copy them


def dumps_prewarm(
    groups: Mapping[str, Sequence[Wanted]], updated: float, spares: Optional[Mapping[str, Sequence[str]]] = None
) -> str:
    doc = {
        "updated": updated,
        "groups": {
            g: [
                {"digest": check_digest(w.digest), "reference": w.reference, "jobs": list(w.jobs)[:MAX_JOBS_PER_IMAGE]}
                for w in wanted[:MAX_IMAGES_PER_GROUP]
            ]
            for g, wanted in sorted(groups.items())
        },
        "spares": {g: sorted(names) for g, names in sorted((spares or {}).items()) if names},
    }
    return json.dumps(formats.stamp(doc, formats.PREWARM), indent=1) + "\n"


def _strings(value: Any, what: str) -> Tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRecord(f"prewarm: {what} is not a list of strings")
    return tuple(value)


def loads_prewarm(text: str) -> Prewarm:
    """The document; NewerFormat for a newer one, BadRecord for a malformed one."""
    try:
        doc: Any = json.loads(text)
    except ValueError as e:
        raise BadRecord(f"prewarm: not JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("groups"), dict):
        raise BadRecord("prewarm: not an object with groups")
    formats.check_doc("prewarm", doc, formats.PREWARM)
    out: Dict[str, List[Wanted]] = {}
    for group, items in doc["groups"].items():
        if not isinstance(items, list):
            raise BadRecord(f"prewarm: group {str(group)[:20]!r} is not a list")
        wanted = []
        for item in items[:MAX_IMAGES_PER_GROUP]:
            if not isinstance(item, dict):
                raise BadRecord(f"prewarm: group {str(group)[:20]!r} holds a non-object")
            jobs = _strings(item.get("jobs", []), "jobs")
            try:
                digest = check_digest(item.get("digest", ""))
                reference = parse_reference(item.get("reference", "")).canonical
            except BadReference as e:
                raise BadRecord(f"prewarm: {e}") from None
            wanted.append(Wanted(digest, reference, jobs[:MAX_JOBS_PER_IMAGE]))
        out[str(group)] = wanted
    spares = doc.get("spares", {})
    if not isinstance(spares, dict):
        raise BadRecord("prewarm: spares is not an object")
    return Prewarm(out, {str(g): _strings(names, "a group's spares") for g, names in spares.items()})


def job_digest(doc: Prewarm, job: str, reference: str) -> Optional[str]:
    """The digest the document records for `job`'s use of `reference` (canonical), else None: what a requeued job
    ran before, so that its restart runs the same image (a tag moved since is not followed by a restart)."""
    for wanted in doc.groups.values():
        for w in wanted:
            if w.reference == reference and job in w.jobs:
                return w.digest
    return None
