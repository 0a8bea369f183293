"""`/hpcc/<cluster>/groups`: the node groups the controller keeps, as JSON it reads every loop and turns into
hpcc_node.controller.model.Group values (`Group(**fields)`, snake_case). Written by Pulumi: a count change is an
in-place update of this value and nothing else, so resizing a group never touches an instance through Pulumi.

Each group carries what the controller cannot know by itself: its launch template, the subnet and AZ EC2 Fleet's
override supplies (the template's interfaces carry no subnet), its placement group, and its Slurm node definition
(infra/facts/slurm.py) for the fixed node range it declares."""

from __future__ import annotations

import hashlib
import json

from hpcc_contract import groups
from infra.config.model import ClusterConfig
from infra.config.nodes import NodeGroup
from infra.facts.instance_types import InstanceType
from infra.facts.slurm import gres_gpus, slurm_node

# The parameter's tier takes 8 KB (Intelligent-Tiering moves it to Advanced above 4 KB); a group's entry is about
# 450 bytes, 510 at its longest (a 60-character placement group, a Capacity Block, a 3-digit template version),
# so MAX_GROUPS (infra/config/model.py) keeps the value inside it (fields at their defaults are left out:
# hpcc_contract/groups.py), and the plan checks it (aws_rules; tests/plan/test_groups.py at the longest).
GROUPS_LIMIT = 8192


def slurm_fields(itype: InstanceType, field: str) -> dict:
    """The node definition of a group's type, as the controller's slurm.conf writer takes it."""
    node = slurm_node(itype, field)
    return {
        "cpus": node.cpus,
        "sockets_per_board": node.sockets_per_board,
        "cores_per_socket": node.cores_per_socket,
        "threads_per_core": node.threads_per_core,
        "real_memory": node.real_memory_mib,
        "gres": f"gpu:{node.gpus}" if node.gpus else "",
    }


def partitions(cfg: ClusterConfig, itypes: list[InstanceType]) -> tuple[list[str], str | None]:
    """The Slurm partitions slurm.conf will have (hpcc_node/slurm.py writes it) and the default one
    (hpcc_contract/groups.py, the one place that decides it), for each group's type in the order of cfg.node_groups;
    ([], None) without Slurm."""
    if cfg.scheduler != "slurm":
        return [], None
    sized = [(g.name, g.count, gres_gpus(t) > 0, t.name) for g, t in zip(cfg.node_groups, itypes, strict=True)]
    names = [name for name, count, _, _ in sized if count > 0]
    if names and groups.ALL_PARTITION not in names:
        names.append(groups.ALL_PARTITION)
    return names, groups.default_partition(sized)


# The launch template's inputs (infra/program/components/compute.py) each of launch_spec's parts is set from, in its
# order: `hpcc up` cannot read the groups value at preview (a secret, unknown while a template changes), so a change
# to these in a group's template is how it tells the group's spec changes (infra/plan/rolls.py launch_rolls).
SPEC_INPUTS = (
    "instanceType",
    "imageId",
    "networkInterfaces",  # EFA: the interfaces' type
    "blockDeviceMappings",  # the root volume
    "instanceMarketOptions",
    "capacityReservationSpecification",
    "placement",  # its groupName
)


def launch_spec(group: NodeGroup, efa: bool, image_id: str, placement_group: str | None) -> str:
    """A digest of what a running instance cannot take and only a new one gets (type, image, EFA, root volume,
    market, reservation, placement): the controller rolls the nodes whose hpcc:launch-spec differs. The IMDS
    options are left out (applied in place) and so is the user data (read at boot: it reaches new nodes)."""
    what = [
        group.instance_type,
        image_id,
        efa,
        group.root_volume_gib,
        group.market,
        group.capacity_reservation_id or "",
        placement_group or "",
    ]
    return hashlib.sha256(json.dumps(what).encode()).hexdigest()[:10]  # 40 bits: it tells a change, guards no secret


def group_entry(
    cfg: ClusterConfig,
    index: int,
    group: NodeGroup,
    itype: InstanceType,
    launch_template: str,
    subnet_id: str,
    availability_zone: str,
    placement_group: str | None,
    template_version: int = 0,
    image_id: str = "",
    hop_limit: int = 0,
) -> dict:
    """One group's fields (hpcc_contract/groups.py FIELDS) plus its `slurm` definition (with scheduler slurm).
    `template_version` is the launch template's latest_version (0: not known), `image_id` the AMI it launches,
    `hop_limit` its IMDS hop limit."""
    efa = group.efa is not False and itype.efa_supported
    entry = {
        "name": group.name,
        "instance_type": group.instance_type,
        "count": group.count,
        "launch_template": launch_template,
        "subnet_id": subnet_id,
        "availability_zone": availability_zone,
        "market": group.market,
        "capacity_reservation_id": group.capacity_reservation_id or "",
        "placement_group": placement_group or "",
        "efa": efa,
        "max_count": 0,
        "spares": group.spares,
        "lt_version": template_version,
        "spec": launch_spec(group, efa, image_id, placement_group) if image_id else "",
        "metadata_hop_limit": hop_limit,
        "update_strategy": group.update_strategy,
        "max_unavailable": group.max_unavailable,
    }
    if cfg.scheduler == "slurm":
        entry["slurm"] = slurm_fields(itype, cfg.group_field(index, "instanceType"))
    return entry


def groups_value(entries: list[dict]) -> str:
    """The parameter's value (hpcc_contract/groups.py): the same config writes the same bytes (no diff)."""
    return groups.dumps(entries)
