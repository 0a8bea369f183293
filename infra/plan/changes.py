"""What a second `pulumi up` would do, from two offline plans: one `Change` per resource that differs.

Faithful to the engine (pulumi/pulumi pkg/resource/deploy/step_generator.go) and the provider:
- inputs are compared after generated values became symbols (infra/plan/symbols.py);
- an input that depends on a replaced (or created) resource is unknown at preview, so it counts as changed;
  one that reads an output the provider recomputes on an in-place update (a launch template's latest
  version) is unknown too;
- `ignoreChanges` paths never count; `replaceOnChanges` paths replace; otherwise the provider's rules
  (infra/plan/replacement_rules.py) say replace or update;
- resources only in the old plan are deleted, only in the new one created; components are not listed.
"""

from __future__ import annotations

from graphlib import TopologicalSorter

from infra.plan.guard import Change
from infra.plan.paths import MISSING, covers, get_path, leaf_differences, parse_path
from infra.plan.replacement_rules import forcing_paths, overlaps, recomputed_outputs
from infra.plan.rolls import LAUNCH_TEMPLATE, groups_doc, roll_note
from infra.plan.symbols import normalised, referenced

INSTANCE = "aws:ec2/instance:Instance"


def _key(r: dict) -> tuple[str, str]:
    return r["name"], r["type"]


def _custom(records: list[dict]) -> dict[tuple[str, str], dict]:
    return {_key(r): r for r in normalised(records) if r.get("custom", True)}


def unknown_paths(record: dict, status: dict[str, str], recomputed: dict[str, tuple[str, ...]]) -> list[str]:
    """Input paths whose value is unknown at preview because a resource they read is created, replaced,
    or updated with a recomputed output."""
    out = []
    for prop, deps in (record.get("propertyDependencies") or {}).items():
        value = (record.get("inputs") or {}).get(prop)
        for dep in deps:
            refs = referenced(value, dep)
            if status.get(dep) in ("create", "replace"):
                out += [_join(prop, path) for path, _ in refs] or [prop]
            elif recomputed.get(dep):
                out += [_join(prop, path) for path, attrs in refs if set(attrs) & set(recomputed[dep])]
    return out


def _join(prop: str, path: str) -> str:
    return prop + ("" if not path else path if path.startswith("[") else "." + path)


def _computed_before(old: dict | None, new: dict | None, path: str) -> bool:
    """An input the old plan did not set, now set to what the provider computed for it then (an Optional+Computed
    attribute, e.g. an instance's availabilityZone): the bridged provider diffs against the state, so no change."""
    if not old or not new:
        return False
    parts = parse_path(path)
    if get_path(old.get("inputs") or {}, parts) is not MISSING:
        return False
    value = get_path(new.get("inputs") or {}, parts)
    return value is not MISSING and get_path(old.get("outputs") or {}, parts) == value


def _replaces_on_change(options: dict, changed: list[str]) -> list[str]:
    wanted = options.get("replaceOnChanges") or []
    return [p for p in changed if any(w == "*" or overlaps(p, w) for w in wanted)]


def _order(new: dict[tuple[str, str], dict]) -> list[tuple[str, str]]:
    by_name = {}
    for key in new:
        by_name.setdefault(key[0], []).append(key)
    graph = {key: {d for dep in r.get("dependsOn") or [] for d in by_name.get(dep, [])} for key, r in new.items()}
    return list(TopologicalSorter(graph).static_order())


def plan_changes(
    old_records: list[dict], new_records: list[dict], replace: frozenset[str] = frozenset()
) -> list[Change]:
    """The changes, sorted by name, that turn the old plan's resources into the new plan's; `replace` names
    resources replaced on request (`pulumi up --replace`), whatever their inputs."""
    old, new = _custom(old_records), _custom(new_records)
    raw_old, raw_new = {_key(r): r for r in old_records}, {_key(r): r for r in new_records}
    status: dict[str, str] = {}
    recomputed: dict[str, tuple[str, ...]] = {}
    changes = []
    for key in _order(new):
        record = new[key]
        name, token = key
        if key not in old:
            status[name] = "create"
            changes.append(Change(name, token, "create"))
            continue
        before = old[key]
        options = record.get("options") or {}
        changed = [
            p
            for p in leaf_differences(before.get("inputs") or {}, record.get("inputs") or {})
            if not _computed_before(raw_old.get(key), raw_new.get(key), p)
        ]
        changed += unknown_paths(record, status, recomputed)
        ignored = options.get("ignoreChanges") or []
        changed = sorted({p for p in changed if not any(i == "*" or covers(i, p) for i in ignored)})
        if name in replace:
            status[name] = "replace"
            changes.append(Change(name, token, "replace", tuple(changed)))
            continue
        if not changed:
            continue
        forced = _replaces_on_change(options, changed) or forcing_paths(
            token, changed, before["inputs"], record["inputs"]
        )
        action = "replace" if forced else "update"
        status[name] = action
        if action == "update":
            recomputed[name] = recomputed_outputs(token, changed, record["inputs"])
        changes.append(Change(name, token, action, tuple(changed)))
    changes += [Change(name, token, "delete") for (name, token) in old if (name, token) not in new]
    return sorted(changes, key=lambda c: (c.name, c.type))


def refused(changes: list[Change], old_records: list[dict], new_records: list[dict]) -> list[Change]:
    """What Pulumi itself refuses: deleting a resource protected in the old state, replacing one protected
    in both (step.go DeleteStep; step_generator.go "unable to replace resource ... marked for protection")."""

    def protected(records, c):
        return any(_key(r) == (c.name, c.type) and (r.get("options") or {}).get("protect") for r in records)

    return [
        c
        for c in changes
        if (c.action == "delete" and protected(old_records, c))
        or (c.action == "replace" and protected(old_records, c) and protected(new_records, c))
    ]


def regions(records: list[dict]) -> set[str]:
    return {r["inputs"]["region"] for r in records if isinstance((r.get("inputs") or {}).get("region"), str)}


def region_change(old_records: list[dict], new_records: list[dict]) -> str:
    """What a new aws:region means, when the two plans are in different regions; empty otherwise."""
    before, after = regions(old_records), regions(new_records)
    if not before or not after or before == after:
        return ""
    old, new = ", ".join(sorted(before)), ", ".join(sorted(after))
    return (
        f"aws:region changed from {old} to {new}: this is a new cluster, not an update. Every resource but the "
        f"IAM roles is replaced, the file system with its data (Pulumi refuses while it is protected), and an "
        f"AMI is regional: the image kept from the first `pulumi up` (or image.amiId) must exist in {new}. "
        f"Create a new stack for {new} instead (`pulumi stack init`, then `hpcc up`), copy the data, then "
        f"`hpcc destroy` this one"
    )


GROUP_RESOURCE = "pulumi-python:dynamic:Resource"  # infra/program/components/groups.py


def launch_template_notes(changes: list[Change], new_records: list[dict], old_records: list[dict] = ()) -> list[str]:
    """A launch template updated in place is a new version that only nodes launched afterwards get: running nodes
    ignore it (`ignore_changes` on launchTemplate.version, infra/program/components/compute.py). Say so, per template,
    with what applies it to a running node: the controller's roll for a group whose updateStrategy is rolling or
    terminate, otherwise the command."""
    by_name = {c.name: c for c in changes}
    new_groups, old_groups = groups_doc(new_records), groups_doc(list(old_records))
    notes = []
    for c in changes:
        if c.type != LAUNCH_TEMPLATE or c.action != "update":
            continue
        nodes = sorted(
            r["name"]
            for r in new_records
            if r["type"] == INSTANCE
            and c.name in (r.get("propertyDependencies") or {}).get("launchTemplate", ())
            and by_name.get(r["name"], Change("", "", "update")).action not in ("create", "replace")
        )
        what = ", ".join(sorted({str(parse_path(p)[0]) for p in c.properties}))
        group = next(
            (
                r["inputs"].get("group")
                for r in new_records
                if r["type"] == GROUP_RESOURCE
                and c.name in (r.get("propertyDependencies") or {}).get("launch_template_id", ())
            ),
            None,
        )
        rolled = roll_note(group, new_groups[group], old_groups.get(group), what) if group in new_groups else None
        if rolled:
            notes.append(rolled)
        elif group:  # the controller launches this group's nodes: the plan does not know which are running
            notes.append(
                f"{c.name}: a new launch-template version ({what}) reaches only the nodes the controller "
                f"launches from now on (growth and replacements); group {group}'s running nodes keep the "
                "old setting until replaced: `hpcc replace NODE` for each"
            )
        elif nodes:
            notes.append(
                f"{c.name}: a new launch-template version ({what}) reaches only nodes launched from now on; "
                f"the {len(nodes)} running node(s) that use it ({', '.join(nodes[:3])}"
                f"{', ...' if len(nodes) > 3 else ''}) keep the old setting until replaced: "
                "`hpcc replace CONFIG --stack STACK NODE` for each"
            )
    return notes
