"""Every format that crosses between the program, the head and the nodes, each with the version its writer stamps
and its reader checks: JSON documents under FORMAT_KEY, the settings text in its FORMAT line. A document written
before versions were stamped has none and is version 1.

A reader that meets a version newer than its own refuses that document by name (NewerFormat: which format, which
version, which it reads, and that its writer is a newer hpcc) and keeps what it had, so a field it does not know is
never dropped silently; where it runs, the refusal reaches the node's status and `hpcc status`. Bump a version when
a reader of the old one would misread the new (a field whose absence changes meaning, a renamed field, a new unit);
a field old readers may leave aside needs no bump. Who writes and who reads each is beside its number."""

from __future__ import annotations

from typing import Any, Dict

FORMAT_KEY = "format"

NODE_GROUPS = 1  # /hpcc/<cluster>/groups: infra/render/groups_param.py -> the controller, the head's Slurm step
MEMBERSHIP = 1  # membership.json: the controller (hpcc_node/controller/membership.py) -> every agent, the bootstrap
MEMBERSHIP_DELTA = 1  # membership-deltas/<n>.json: the controller -> every agent (hpcc_node/controller/membership.py)
STATUS = 1  # status/<instance ARN>.json: each node's agent and bootstrap -> the controller, `hpcc status`
LEDGER_ITEM = 1  # the ledger's items: the controller, `hpcc replace` -> the controller
SETTINGS = 1  # /hpcc/<cluster>/settings: infra/render/node_settings.py -> every agent and bootstrap
# A bundle's manifest.json: infra/render/bundle.py -> the node agent (hpcc_node/upgrade.py). 2: `roles` is keyed by
# whose script it is, the head's or each node group's (hpcc_contract/names.py boot_key); 1 keyed it by role, one
# compute script for every group (a reader of 1 would take a group's key for a role): the agent reads both.
BUNDLE_MANIFEST = 2
DCGM_COUNTERS = 1  # the GPU nodes' dcgm-exporter counters file (its -f CSV): hpcc_contract/dcgm.py -> dcgm-exporter
# The image cache's entries, <fsx>/.hpcc/images/sha256-<hex>.json: every node's hpcc_node/containers/ -> the same,
# `hpcc images`
IMAGE_ENTRY = 1
IMAGE_USE = 1  # <fsx>/.hpcc/image-usage/<node>.jsonl, a line per job and image: the nodes -> the spares' prewarm
# One line each way on a node's image socket (/run/hpcc/images.sock): pyxis' importer as the job's user -> the root
# service (hpcc_node/containers/importer.py -> service.py), and its answer back
IMAGE_REQUEST = 1
IMAGE_ANSWER = 1
# <fsx>/.hpcc/prewarm.json, the images each node group keeps on its nodes' disks: the controller
# (hpcc_node/controller/images.py) -> every node (hpcc_node/containers/prewarm.py, hpcc_node/agent_images.py)
PREWARM = 1
# `python3 -m hpcc_node.containers list --json` on the head -> `hpcc images` (hpcc_contract/image_list.py)
IMAGE_LIST = 1

VERSIONS: Dict[str, int] = {
    "node groups": NODE_GROUPS,
    "membership": MEMBERSHIP,
    "membership delta": MEMBERSHIP_DELTA,
    "status": STATUS,
    "ledger item": LEDGER_ITEM,
    "settings": SETTINGS,
    "bundle manifest": BUNDLE_MANIFEST,
    "dcgm counters": DCGM_COUNTERS,
    "image cache entry": IMAGE_ENTRY,
    "image usage record": IMAGE_USE,
    "image request": IMAGE_REQUEST,
    "image answer": IMAGE_ANSWER,
    "prewarm": PREWARM,
    "image listing": IMAGE_LIST,
}


class NewerFormat(ValueError):
    """A document of a format version newer than this reader's: written by a newer hpcc."""


class BadFormat(ValueError):
    """A format stamp that is no version at all."""


def version_of(found: Any) -> int:
    """The version a stamp names: None (no stamp: written before stamps) is 1; a positive integer (or its digits,
    the settings text's) is itself; anything else raises BadFormat."""
    if found is None:
        return 1
    if isinstance(found, str) and found.isdigit() and not found.startswith("0"):
        return int(found)
    if isinstance(found, int) and not isinstance(found, bool) and found >= 1:
        return found
    raise BadFormat(f"{FORMAT_KEY} {str(found)[:20]!r} is not a version (1, 2, ...)")


def check(kind: str, found: Any, reads: int) -> int:
    """The version of a `kind` document stamped `found`, if this reader (of version `reads`) can read it; raises
    NewerFormat naming both versions when it is newer, BadFormat when the stamp is no version."""
    version = version_of(found)
    if version > reads:
        raise NewerFormat(
            f"{kind} format {version} is newer than this hpcc reads ({reads}): it was written by a newer hpcc; "
            "upgrade this side (nodes follow the cluster's bundle; the operator's hpcc: pip install -U)"
        )
    return version


def check_doc(kind: str, doc: Dict[str, Any], reads: int) -> int:
    """check() on a JSON document's FORMAT_KEY."""
    return check(kind, doc.get(FORMAT_KEY), reads)


def stamp(doc: Dict[str, Any], version: int) -> Dict[str, Any]:
    """`doc` with its format version, first among its keys."""
    return {FORMAT_KEY: version, **{k: v for k, v in doc.items() if k != FORMAT_KEY}}
