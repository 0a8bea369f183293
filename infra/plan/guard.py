"""What an update does to each resource, and which of those changes hpcc stops without `--allow-replace`.

One vocabulary for both sides: the offline plan (`hpcc plan --previous`, infra/plan/changes.py) compares two
plans, and `hpcc up` reads Pulumi's own preview (infra/ops/up.py); both produce `Change`s and ask `guarded()`.
"""

from __future__ import annotations

from dataclasses import dataclass

ACTIONS = ("create", "update", "replace", "delete")

# Replacing or deleting these loses a running job, a node's disk, or the cluster's data.
GUARDED_TYPES = {
    "aws:ec2/instance:Instance": "instance",
    "aws:ec2/subnet:Subnet": "subnet",
    "aws:ec2/placementGroup:PlacementGroup": "placement group",
    "aws:fsx/lustreFileSystem:LustreFileSystem": "file system",
}


@dataclass(frozen=True)
class Change:
    name: str  # the resource's Pulumi name
    type: str  # its type token
    action: str  # one of ACTIONS
    properties: tuple[str, ...] = ()  # input paths that differ (empty for create and delete)

    def as_json(self) -> dict:
        return {"name": self.name, "type": self.type, "action": self.action, "properties": list(self.properties)}


def guarded(changes: list[Change]) -> list[Change]:
    """The changes that replace or delete an instance, a subnet, the placement group or the file system."""
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
