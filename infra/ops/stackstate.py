"""Reading and editing a stack's state through the Automation API (Stack.export_stack / import_stack).

Resources are found by type and by the name after the URN's last `::`, never by building URNs by hand
(the type part of a URN carries the parent chain). State format: https://www.pulumi.com/docs/iac/concepts/state-and-backends/#editing-state-files
"""

from __future__ import annotations

from typing import Any

from hpcc_contract.names import resource_name
from infra.ops.preview import resource_name as urn_name

INSTANCE = "aws:ec2/instance:Instance"
FILE_SYSTEM = "aws:fsx/lustreFileSystem:LustreFileSystem"
PARAMETER = "aws:ssm/parameter:Parameter"


def resources(deployment: Any) -> list[dict]:
    """The resources of an exported Deployment (empty for a stack never updated)."""
    body = getattr(deployment, "deployment", None) or {}
    return list(body.get("resources") or [])


def find_urn(found: list[dict], type_: str, name: str) -> str | None:
    """The URN of the live resource of this type and name (pending deletions left out)."""
    for r in found:
        if r.get("type") == type_ and urn_name(r.get("urn", "")) == name and not r.get("delete"):
            return r["urn"]
    return None


def instance_nodes(found: list[dict], cluster: str) -> dict[str, str]:
    """Node name (`head`, `compute-000` ...) -> its instance's URN, from `<cluster>-<node>` instances."""
    prefix = resource_name(cluster, "")
    out = {}
    for r in found:
        name = urn_name(r.get("urn", ""))
        if r.get("type") == INSTANCE and name.startswith(prefix) and not r.get("delete"):
            out[name.removeprefix(prefix)] = r["urn"]
    return out


def unprotect(stack: Any, type_: str, name: str) -> str | None:
    """Clear `protect` on one resource in the stack's state (what `pulumi state unprotect <urn>` does:
    https://www.pulumi.com/docs/iac/cli/commands/pulumi_state_unprotect/). Returns the URN when something
    was unprotected, None when the resource is absent or not protected."""
    from pulumi.automation import Deployment

    exported = stack.export_stack()
    body = dict(getattr(exported, "deployment", None) or {})
    changed = None
    edited = []
    for r in body.get("resources") or []:
        if r.get("type") == type_ and urn_name(r.get("urn", "")) == name and r.get("protect"):
            r = {**r, "protect": False}
            changed = r["urn"]
        edited.append(r)
    if changed:
        body["resources"] = edited
        stack.import_stack(Deployment(version=exported.version, deployment=body))
    return changed
