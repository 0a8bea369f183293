"""What `pulumi preview` says an update will do, as `infra.plan.guard.Change`s, and hpcc's guard on it.

The engine emits a ResourcePreEvent per step (pulumi.automation.events.StepEventMetadata: `op`, `urn`,
`type`, `keys` = the properties forcing a replacement, `diffs` = the properties that changed). A replacement
is several steps on one URN (create-replacement, replace, delete-replaced; create before delete by default:
https://www.pulumi.com/docs/iac/concepts/options/deletebeforereplace/); they collapse into one `replace`. Reads,
refreshes and `same` steps change nothing and are left out. Given the config, a group whose running nodes the
controller replaces after the update is one more change, guarded (infra/plan/rolls.py launch_rolls: read from its
launch template's diff, since the groups parameter's value is a secret in these events)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from rich.console import Console
from rich.text import Text

from infra.config.model import ClusterConfig
from infra.ops import OpsError
from infra.plan.guard import ACTIONS, GUARDED_TYPES, ROLL, Change, guard_message, guarded, resources
from infra.plan.rolls import launch_rolls

# Engine step op -> hpcc action (pulumi.automation.events.OpType values).
OP_ACTIONS = {
    "create": "create",
    "update": "update",
    "replace": "replace",
    "create-replacement": "replace",
    "delete-replaced": "replace",
    "delete": "delete",
}
_RANK = {"create": 0, "update": 1, "delete": 2, "replace": 3}  # when one URN has several steps, the strongest wins


def resource_name(urn: str) -> str:
    """A URN's resource name: what follows its last `::` (https://www.pulumi.com/docs/iac/concepts/resources/names/#urns)."""
    return urn.rsplit("::", 1)[-1]


def step_change(metadata: Any) -> Change | None:
    """One engine step (StepEventMetadata) as a Change, or None for steps that change nothing."""
    op = getattr(metadata.op, "value", metadata.op)
    action = OP_ACTIONS.get(op)
    if action is None:
        return None
    if action == "replace":
        props = metadata.keys or metadata.diffs or []
    elif action == "update":
        props = metadata.diffs or list((metadata.detailed_diff or {}).keys())
    else:
        props = []
    return Change(resource_name(metadata.urn), metadata.type, action, tuple(sorted(set(props))))


def merge(changes: Iterable[Change]) -> Change:
    """Several steps on one resource as one change: the strongest action, the union of properties."""
    changes = list(changes)
    strongest = max(changes, key=lambda c: _RANK[c.action])
    props = sorted({p for c in changes for p in c.properties})
    return Change(strongest.name, strongest.type, strongest.action, tuple(props))


class ChangeCollector:
    """An `on_event` callback for Stack.preview that keeps one Change per URN."""

    def __init__(self) -> None:
        self.steps: dict[str, list[Change]] = {}
        self.urns: dict[str, str] = {}  # resource name -> URN, for `--replace`

    def __call__(self, event: Any) -> None:
        pre = getattr(event, "resource_pre_event", None)
        if pre is None or pre.metadata is None:
            return
        change = step_change(pre.metadata)
        if change is not None:
            self.steps.setdefault(pre.metadata.urn, []).append(change)
            self.urns[change.name] = pre.metadata.urn

    @property
    def changes(self) -> list[Change]:
        return sorted((merge(steps) for steps in self.steps.values()), key=lambda c: (c.type, c.name))


def preview(stack: Any, cluster: ClusterConfig | None = None, **kwargs) -> list[Change]:
    """Run Stack.preview with a collector; Pulumi's own text is not printed (the summary below is). With the config's
    `cluster`, the groups' rolls follow the resources' changes."""
    collector = ChangeCollector()
    stack.preview(on_event=collector, **kwargs)
    changes = collector.changes
    return changes + (launch_rolls(changes, cluster) if cluster is not None else [])


def blocking(changes: list[Change], allowed_replacements: Iterable[str] = ()) -> list[Change]:
    """The guarded changes, less the replacements the operator asked for by name (`hpcc replace NODE`): a node's,
    never a group's roll."""
    allowed = set(allowed_replacements)
    return [c for c in guarded(changes) if not (c.action == "replace" and c.type != ROLL and c.name in allowed)]


def summary(changes: list[Change]) -> list[str]:
    """A count per action of Pulumi's resources, then every guarded change (a roll too) on a line of its own."""
    counts = Counter(c.action for c in resources(changes))
    head = ", ".join(f"{counts[a]} to {a}" for a in ACTIONS if counts[a]) or "no changes"
    lines = [f"preview: {head}"]
    for c in guarded(changes):
        props = f" ({', '.join(c.properties)})" if c.properties else ""
        lines.append(f"  {c.action} {GUARDED_TYPES[c.type]} {c.name}{props}")
    return lines


def print_summary(console: Console, changes: list[Change]) -> None:
    for line in summary(changes):
        console.print(Text(line), highlight=False)


def check(
    changes: list[Change],
    allow_replace: bool,
    allowed_replacements: Iterable[str] = (),
    on_stop: Callable[[str], Exception] | None = None,
) -> None:
    """Raise (OpsError by default) with guard_message when a guarded change is not allowed."""
    stop = blocking(changes, allowed_replacements)
    if stop and not allow_replace:
        raise (on_stop or OpsError)(guard_message(stop))
