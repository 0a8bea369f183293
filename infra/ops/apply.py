"""Applying a change the way `hpcc up` and `hpcc destroy` do it: the preview summarised in the user's terms first
(groups, nodes, cost per hour before and after: infra/plan/shape.py) and per resource below, hpcc's guard, a
confirmation asked through `confirm(question)` (the CLI's prompt, or its refusal without a terminal and `--yes`),
then `pulumi up`; and what destroy deletes, said before it asks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from hpcc_contract.names import resource_name
from infra.config.model import ClusterConfig, StackConfig
from infra.ops import OpsError
from infra.ops import preview as ops_preview
from infra.plan.shape import Shape, change_lines, from_config, from_outputs


def last_lines(text: str, n: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def run_pulumi(action: str, fn: Callable[[], Any]) -> Any:
    """The one translation of the Automation API's errors (they carry the Pulumi CLI's stderr): an OpsError naming
    the action and the last lines, never a traceback."""
    try:
        return fn()
    except OpsError:
        raise
    except Exception as e:  # noqa: BLE001 - Automation API errors carry the CLI's stderr
        raise OpsError(f"pulumi {action} failed: {last_lines(str(e))}") from None


class NotConfirmed(OpsError):
    """The operator said no (or could not be asked): nothing was changed."""


def guarded_update(
    stack,
    console: Console,
    *,
    replace: list[str],
    allow_replace: bool,
    policy_pack: Path,
    allowed_replacements: tuple[str, ...] = (),
    before: Shape | None = None,
    after: Shape | None = None,
    confirm: Callable[[str], bool] | None = None,
    preview_only: bool = False,
    cluster: ClusterConfig | None = None,
) -> dict | None:
    """Preview; the change in the user's terms first (groups, nodes, cost: infra/plan/shape.py, when `after` is
    given), the resources below (and, given the config's `cluster`, the groups the controller rolls after it); stop
    on a guarded change that was not allowed; with `preview_only` stop there (None); else ask `confirm` (when given
    and something changes) and `pulumi up`, streamed, with the same options and hpcc's policy pack (mandatory).
    Returns the stack's outputs as plain values."""
    kwargs: dict = {"replace": list(replace)} if replace else {}
    kwargs["policy_packs"] = [str(policy_pack)]
    changes = run_pulumi("preview", lambda: ops_preview.preview(stack, cluster, **kwargs))
    if after is not None:
        console.print("the cluster:" if before is not None else "the cluster (none yet):", highlight=False)
        for line in change_lines(before, after):
            console.print(Text(f"  {line}"), highlight=False)
    ops_preview.print_summary(console, changes)
    ops_preview.check(changes, allow_replace, allowed_replacements)
    if preview_only:
        console.print("--preview-only: nothing was changed", highlight=False)
        return None
    if ops_preview.blocking(changes, allowed_replacements):
        console.print("--allow-replace given: going ahead with the guarded changes above", highlight=False)
    if confirm is not None and changes and not confirm("apply these changes (`pulumi up`)?"):
        raise NotConfirmed("not confirmed: nothing was changed")
    result = run_pulumi(
        "up",
        lambda: stack.up(
            on_output=lambda line: console.print(line.rstrip("\n"), markup=False, highlight=False), **kwargs
        ),
    )
    return {k: getattr(v, "value", v) for k, v in (getattr(result, "outputs", None) or {}).items()}


def current_shape(stack) -> Shape | None:
    """The cluster as the stack's last `up` left it (its outputs), or None (a new stack, or outputs unreadable)."""
    try:
        outputs = stack.outputs()
    except Exception:  # noqa: BLE001 - no outputs only loses the "before" side of the summary
        return None
    return from_outputs({k: getattr(v, "value", v) for k, v in (outputs or {}).items()})


def doomed(cfg: StackConfig, stack_name: str, shape: Shape | None) -> list[str]:
    """What `hpcc destroy` deletes, in the user's terms: the nodes (as the stack last left them, else as the config
    asks), the file system with its data, the stores."""
    c, fsx = cfg.cluster, cfg.cluster.fsx
    shape = shape or from_config(cfg)
    groups = "; ".join(f"{g.name}: {g.words()}" for g in shape.groups) or "no group"
    link = f", linked to {fsx.data_repository_path} (the S3 objects stay)" if fsx.data_repository_path else ""
    return [
        f"cluster {c.name} in {cfg.region} (stack {stack_name}): every resource of the stack",
        f"the head ({shape.head_type or c.head_node.instance_type}) and {shape.nodes} node(s): {groups}",
        f"the file system {resource_name(c.name, 'fsx')} (FSx for Lustre {fsx.deployment_type}, "
        f"{fsx.storage_capacity} GiB) and ALL ITS DATA on {fsx.mount_point}{link}: copy what you need first",
        "the controller's ledger and state bucket, the bundle bucket, the cluster's parameters, key and secrets",
    ]
