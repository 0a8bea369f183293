"""The stack config's node models: the head node, `compute:` and `nodeGroups:` (infra/config/model.py composes them;
their limits and name rules are infra/facts/limits.py's)."""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from infra.facts.limits import GROUP_NAME, LEGACY_GROUP, MAX_NODES, RESERVED_GROUP_NAMES


class ConfigModel(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)


def root_volume(default: int = 200):
    """`rootVolumeGiB` as the README spells it (like `storageCapacityGiB`), and `rootVolumeGib`, the spelling
    this key was first read with: both are accepted; giving both is an unknown key."""
    return Field(
        default,
        ge=35,
        le=16384,
        validation_alias=AliasChoices("rootVolumeGiB", "rootVolumeGib"),
        serialization_alias="rootVolumeGiB",
    )


class HeadNode(ConfigModel):
    instance_type: str = "m6i.2xlarge"
    root_volume_gib: int = root_volume()


class ComputeNodes(ConfigModel):
    instance_type: str
    count: int = Field(ge=1, le=MAX_NODES)
    efa: bool | None = Field(None, description="default: on wherever the type supports EFA")
    # capacity-block: launch into the EC2 Capacity Block named by capacityReservationId (README "Getting capacity")
    market: Literal["on-demand", "spot", "capacity-block"] = "on-demand"
    capacity_reservation_id: str | None = Field(None, pattern=r"^cr-[0-9a-f]{8,17}$")
    # An existing placement group to launch into instead of a new one: the group a reservation was created in.
    placement_group: str | None = Field(None, pattern=r"^[A-Za-z0-9._:+=@-]{1,255}$")
    root_volume_gib: int = root_volume()
    # What the controller does with running nodes when a change needs new instances (type, image, EFA, root volume,
    # market, placement): `rolling` drains them (jobs finish) and replaces them once idle, `terminate` takes them
    # DOWN at once (ParallelCluster's QueueUpdateStrategy DRAIN and TERMINATE,
    # https://docs.aws.amazon.com/parallelcluster/latest/ug/using-pcluster-update-cluster-v3.html), `manual`
    # leaves them to `hpcc replace`. Default rolling, 1 at a time: no job is killed and at most one node of the
    # group is out (HyperPod's RollingDeploymentPolicy MaximumBatchSize,
    # https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_RollingDeploymentPolicy.html).
    update_strategy: Literal["rolling", "terminate", "manual"] = "rolling"
    max_unavailable: int = Field(1, le=MAX_NODES)

    @field_validator("max_unavailable")
    @classmethod
    def _bound(cls, v: int) -> int:
        if v < 1:
            raise ValueError(
                f"is how many nodes of the group a roll takes out at once: give 1 or more (default 1); for no "
                f"automatic replacement give updateStrategy: manual; got {v}"
            )
        return v


class NodeGroup(ComputeNodes):
    """One of `nodeGroups:`: the fields of `compute:` and a name. A group may be empty (count 0)."""

    name: str
    count: int = Field(ge=0, le=MAX_NODES)
    # Of `count` (launched with it): healthy nodes kept idle by the Slurm reservation hpcc-spares-<name>, taken
    # when a node fails (hpcc_node/controller/health/decide.py). With `scheduler: slurm` only.
    spares: int = Field(0, ge=0, le=MAX_NODES)

    @field_validator("name")
    @classmethod
    def _group_name(cls, v: str) -> str:
        if not GROUP_NAME.fullmatch(v):
            raise ValueError(
                "must be 1-12 lower-case letters and digits, starting with a letter (it begins its "
                f"nodes' names, <group>-000, and its Slurm partition); got {v!r}"
            )
        if v in RESERVED_GROUP_NAMES:
            raise ValueError(f"{v!r} is the head node's name; call the group something else, e.g. {v}s or gpu")
        return v

    @model_validator(mode="after")
    def _spares_within_count(self) -> NodeGroup:
        if self.spares > self.count:
            raise ValueError(
                f"spares ({self.spares}) are part of count ({self.count}), which launches them: give "
                "count >= spares (the nodes in use are count - spares)"
            )
        return self


def group_of(compute: ComputeNodes) -> NodeGroup:
    """`compute:` as the one group it means."""
    return NodeGroup(name=LEGACY_GROUP, **{k: getattr(compute, k) for k in ComputeNodes.model_fields})
