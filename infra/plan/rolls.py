"""A group's roll: after an update that changed a group's launch spec, the controller replaces the group's running
nodes (hpcc_node/controller/decide_rolling.py), a guarded change (infra/plan/guard.py ROLL). One rule, `rolls`, says
when; two sides find it:
- the offline plan (`hpcc plan --previous`) has both groups documents, the groups parameter's value in each plan:
  `roll_changes` compares them;
- `hpcc up` has Pulumi's preview, where that value cannot be read: pulumi-aws makes an ssm.Parameter's `value` a
  secret (the engine's events show `[secret]`), and while a launch template changes the value is unknown anyway (it
  carries the template's latest_version, which the provider recomputes). `launch_rolls` reads each group's launch
  template diff instead (the spec digests launch-template inputs alone: groups_param.SPEC_INPUTS) and the config's
  strategy and count, which the value copies as they are."""

from __future__ import annotations

import json

from hpcc_contract import groups as groups_format
from hpcc_contract.names import launch_template_resource
from infra.config.model import ClusterConfig
from infra.plan.guard import Change, roll
from infra.plan.paths import parse_path
from infra.render.groups_param import SPEC_INPUTS

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
# The document's fields that name what a spec change is about; an image or a root volume shows in `spec` alone.
SAID = ("instance_type", "efa", "market", "capacity_reservation_id", "placement_group")


def groups_doc(records: list[dict]) -> dict[str, dict]:
    """The groups value a plan writes (/hpcc/<c>/groups, infra/render/groups_param.py), by group name."""
    for r in records:
        if r["name"].endswith("-groups-param") and isinstance((r.get("inputs") or {}).get("value"), str):
            try:
                return {g["name"]: g for g in groups_format.loads(r["inputs"]["value"]) if isinstance(g, dict)}
            except (groups_format.GroupsFormatError, KeyError, TypeError, json.JSONDecodeError):
                return {}
    return {}


def acts_on(strategy: str, count: int) -> bool:
    """Whether the controller replaces a group's stale nodes itself: rolling or terminate, and nodes to replace."""
    return strategy in groups_format.ROLLING_STRATEGIES and count > 0


def rolls(old: dict | None, new: dict) -> bool:
    """Whether the controller replaces the group's running nodes: a group that was there (`old`), whose strategy
    acts, and whose spec changed. A spec not said before (a program before it) counts as changed; the hop limit
    alone is applied in place."""
    strategy = new.get("update_strategy", groups_format.DEFAULTS["update_strategy"])
    same = bool(old and old.get("spec") and old.get("spec") == new.get("spec"))
    return old is not None and acts_on(strategy, int(new.get("count", 0))) and not same


def roll_changes(old_doc: dict[str, dict], new_doc: dict[str, dict]) -> list[Change]:
    """Each group that rolls from the old groups document to the new one, with the fields behind it."""
    out = []
    for name, new in sorted(new_doc.items()):
        old = old_doc.get(name)
        if old is not None and rolls(old, new):
            out.append(roll(name, [f for f in SAID if old.get(f) != new.get(f)] or ["spec"]))
    return out


def launch_rolls(changes: list[Change], cluster: ClusterConfig) -> list[Change]:
    """Each group that rolls in a preview's changes: its launch template updated (not created: a new group has no
    running node) in an input its spec is made of, under a strategy that acts, with nodes."""
    by_name = {c.name: c for c in changes if c.type == LAUNCH_TEMPLATE and c.action in ("update", "replace")}
    out = []
    for group in cluster.node_groups:
        template = by_name.get(launch_template_resource(cluster.name, group.name))
        spec = [p for p in (template.properties if template else ()) if str(parse_path(p)[0]) in SPEC_INPUTS]
        if spec and acts_on(group.update_strategy, group.count):
            out.append(roll(group.name, spec))
    return out


def roll_note(group: str, new: dict, old: dict | None, what: str) -> str | None:
    """What the controller does with a group's running nodes after its launch changed, in the user's terms
    (hpcc_node/controller/decide_rolling.py); None when it leaves them (manual, or nothing to say)."""
    strategy, count = new.get("update_strategy", groups_format.DEFAULTS["update_strategy"]), int(new.get("count", 0))
    if old is None or not acts_on(strategy, count):
        return None
    if not rolls(old, new):
        hops = groups_format.DEFAULTS["metadata_hop_limit"]
        if old.get("metadata_hop_limit", hops) != new.get("metadata_hop_limit", hops):
            return f"{group}: the IMDS options are applied to the running instances in place; no node is replaced"
        return None
    types = old.get("instance_type"), new.get("instance_type")
    change = f"{types[0]} -> {types[1]}" if types[0] != types[1] else what
    when = "after their jobs" if strategy == "rolling" else "at once (their jobs are requeued or end)"
    bound = int(new.get("max_unavailable", groups_format.DEFAULTS["max_unavailable"]))
    unknown = "" if old.get("spec") else "; nodes launched before version tags are left to `hpcc replace`"
    return (
        f"{group}: {count} nodes replaced by the controller, {bound} at a time, {when} ({change}){unknown}; "
        f"`hpcc status` shows the progress"
    )
