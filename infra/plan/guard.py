"""What an update does to each resource, and which of those changes hpcc stops without `--allow-replace`.

One vocabulary for both sides: the offline plan (`hpcc plan --previous`, infra/plan/changes.py) compares two
plans, and `hpcc up` reads Pulumi's own preview (infra/ops/up.py); both produce `Change`s and ask `guarded()`.
One change is no resource's: a group's roll, the controller replacing the group's running nodes after the update
(`ROLL`, infra/plan/rolls.py says when).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

ACTIONS = ("create", "update", "replace", "delete")

# Not a Pulumi type: the controller replacing a group's running nodes once the update changed their launch spec
# (hpcc_node/controller/decide_rolling.py), named by the group. Its nodes go as a replaced instance does.
ROLL = "hpcc:group/roll"
# Replacing or deleting these loses a running job, a node's disk, or the cluster's data.
GUARDED_TYPES = {
    "aws:ec2/instance:Instance": "instance",
    "aws:ec2/subnet:Subnet": "subnet",
    "aws:ec2/placementGroup:PlacementGroup": "placement group",
    "aws:fsx/lustreFileSystem:LustreFileSystem": "file system",
    ROLL: "nodes of group",
}


@dataclass(frozen=True)
class Change:
    name: str  # the resource's Pulumi name
    type: str  # its type token
    action: str  # one of ACTIONS
    properties: tuple[str, ...] = ()  # input paths that differ (empty for create and delete)

    def as_json(self) -> dict:
        return {"name": self.name, "type": self.type, "action": self.action, "properties": list(self.properties)}


def roll(group: str, properties: Iterable[str]) -> Change:
    """The controller replacing `group`'s running nodes because of what changed in their launch (`properties`)."""
    return Change(group, ROLL, "replace", tuple(sorted(set(properties))))


def resources(changes: Iterable[Change]) -> list[Change]:
    """The changes Pulumi makes, a roll left out (the controller's, once the update is done)."""
    return [c for c in changes if c.type != ROLL]


def guarded(changes: list[Change]) -> list[Change]:
    """The changes that replace or delete an instance, a subnet, the placement group or the file system, and the
    groups whose running nodes the controller replaces."""
    return sorted(
        (c for c in changes if c.type in GUARDED_TYPES and c.action in ("replace", "delete")),
        key=lambda c: (c.type, c.name),
    )


def guard_message(changes: list[Change]) -> str:
    """Why hpcc stops, naming every guarded change; empty when nothing is guarded."""
    found = guarded(changes)
    if not found:
        return ""
    lines = [
        f"  {c.action} {GUARDED_TYPES[c.type]} {c.name}" + (f" ({', '.join(c.properties)})" if c.properties else "")
        for c in found
    ]
    return (
        "this update would destroy what a running cluster needs:\n"
        + "\n".join(lines)
        + "\nnothing was changed; run again with --allow-replace if that is what you want"
    )
