"""`/hpcc/<cluster>/groups`: the node groups as the program writes them (infra/render/groups_param.py) and the head
reads them, its controller every loop (hpcc_node/controller/__main__.py) and its Slurm step (hpcc_node/slurm.py).
One definition of the format: its number, the document's keys, each group's fields and its Slurm node definition's,
and which Slurm partition is the default (the head's slurm.conf and the plan's outputs say the same).

`{"format": FORMAT, "groups": [{FIELDS..., "slurm": {SLURM_FIELDS...}}]}`, compact with sorted keys. A reader
refuses a document of a newer format (hpcc_contract/formats.py) or of no known shape; within a group it takes the
fields it knows and leaves the others."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hpcc_contract import formats

FORMAT = formats.NODE_GROUPS
FORMAT_KEY = formats.FORMAT_KEY
GROUPS_KEY = "groups"
# Each group's fields: hpcc_node.controller.model.Group's (snake_case), but its Capacity Block's window (EC2's).
FIELDS = (
    "name",
    "instance_type",
    "count",
    "launch_template",
    "subnet_id",
    "availability_zone",
    "market",
    "capacity_reservation_id",
    "placement_group",
    "efa",
    "max_count",
    "spares",
    # Rolling replacement (hpcc_node/controller/decide_rolling.py). Absent (a program before them), a group is
    # `manual` with no version: an old reader ignores them and launches `$Latest`, as before, so no format bump.
    "lt_version",  # the launch template's latest_version: the one the controller launches
    "spec",  # the digest of what needs a new instance (names.TAG_LAUNCH_SPEC): nodes whose tag differs roll
    "metadata_hop_limit",  # IMDS hop limit, applied to running instances in place (ModifyInstanceMetadataOptions)
    "update_strategy",  # UPDATE_STRATEGIES
    "max_unavailable",  # nodes of the group out for a roll at once (draining, replacing, booting)
)
# A field at its default is left out (the parameter holds 8 KB, 16 groups at their longest), and a reader takes
# these for an absent one (model.Group's defaults: tests/contract). Without `spec` nothing rolls, so a program
# before these fields means `manual` whatever update_strategy's default.
DEFAULTS = {"max_count": 0, "spares": 0, "metadata_hop_limit": 1, "update_strategy": "rolling", "max_unavailable": 1}
# rolling: drain (jobs finish), then replace; terminate: DOWN and replace now; manual: `hpcc replace NODE` each.
UPDATE_STRATEGIES = ("rolling", "terminate", "manual")
# The strategies whose stale nodes the controller replaces itself (hpcc_node/controller/decide_rolling.py): a change of
# a group's spec under them is a roll, which the plan and `hpcc up` guard (infra/plan/rolls.py).
ROLLING_STRATEGIES = ("rolling", "terminate")
SLURM = "slurm"  # the group's Slurm node definition, with scheduler slurm only
SLURM_FIELDS = ("cpus", "sockets_per_board", "cores_per_socket", "threads_per_core", "real_memory", "gres")
# Slurm: one partition per group, named after it, and `all` of every node, for a job that may run anywhere
# (`sbatch -p all`), unless a group took that name.
ALL_PARTITION = "all"


class GroupsFormatError(ValueError):
    """The text is not a groups document of this format."""


class NewerGroups(GroupsFormatError):
    """A groups document of a newer format than this reader's: written by a newer hpcc's program."""


class NotJson(GroupsFormatError):
    """The text is not JSON at all."""


def dumps(groups: Sequence[Dict[str, Any]]) -> str:
    """The parameter's value: compact, keys sorted, fields at their DEFAULTS left out, so the same groups write the
    same bytes (no diff)."""
    lean = [{k: v for k, v in g.items() if k not in DEFAULTS or DEFAULTS[k] != v} for g in groups]
    return json.dumps({FORMAT_KEY: FORMAT, GROUPS_KEY: lean}, sort_keys=True, separators=(",", ":"))


def loads(text: str) -> List[Any]:
    """The groups of a document of this format, unchecked within (each reader checks what it takes);
    GroupsFormatError (NotJson when it is not JSON) otherwise."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise NotJson(f"is not JSON ({e})") from None
    if isinstance(doc, dict) and FORMAT_KEY in doc:
        try:
            formats.check_doc("node groups", doc, FORMAT)
        except formats.NewerFormat as e:
            raise NewerGroups(str(e)) from None
        except formats.BadFormat as e:
            raise GroupsFormatError(str(e)) from None
    if not isinstance(doc, dict) or doc.get(FORMAT_KEY) != FORMAT or not isinstance(doc.get(GROUPS_KEY), list):
        raise GroupsFormatError(f'is not {{"{FORMAT_KEY}": {FORMAT}, "{GROUPS_KEY}": [...]}}')
    return doc[GROUPS_KEY]


def default_partition(groups: Sequence[Tuple[str, int, bool, str]]) -> Optional[str]:
    """The partition a job without `-p` lands on, from each group's (name, size, whether its nodes have GPUs, its
    instance type) in the config's order: the first group with GPUs and nodes, so a GPU job never lands on CPU nodes
    nor across GPU types; but `all` when two or more groups have nodes and all of them are GPU nodes of one type (a
    Capacity Block group beside an On-Demand one: one pool, a job may take nodes of both), and in a cluster without
    GPUs (every node a CPU node). The first group instead of `all` when a group took that name. None when no group
    has a node."""
    sized = [(name, gpus, itype) for name, size, gpus, itype in groups if size > 0]
    if not sized:
        return None
    gpu = [name for name, gpus, _ in sized if gpus]
    one_gpu_pool = len(sized) > 1 and len(gpu) == len(sized) and len({itype for _, _, itype in sized}) == 1
    if gpu and not one_gpu_pool:
        return gpu[0]
    return ALL_PARTITION if not any(name == ALL_PARTITION for name, _, _, _ in groups) else sized[0][0]
