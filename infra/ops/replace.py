"""`hpcc replace CONFIG --stack S NODE...`: new instances for named nodes (dead, stopped, failed bootstrap).

The stack's state names the nodes (`<cluster>-head`, `<cluster>-compute-NNN` instances); the update is
`pulumi up --replace <urn>` for exactly those instances (https://www.pulumi.com/docs/iac/cli/commands/pulumi_up/),
previewed first: the guard lets those replacements through and still stops anything else it guards unless
--allow-replace. Then it waits until each named node is ready on its new instance and every node has applied
the new /hosts version (the replacement has a new IP).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Callable

from rich.console import Console

from infra.naming import resource_name
from infra.ops import OpsError
from infra.ops import stackstate
from infra.ops.aws import Aws
from infra.ops.status import instances
from infra.ops.up import UpReport, _load, guarded_update, pack_for, select, state, wait_and_report


class UnknownNodes(OpsError):
    """A NODE argument that is not a node of the stack (a usage error: exit 2)."""


def node_urns(known: dict[str, str], wanted: list[str], stack_name: str) -> dict[str, str]:
    """The URNs of the wanted nodes, in the order given; unknown names raise UnknownNodes naming the known."""
    if not wanted:
        raise UnknownNodes("name at least one node to replace, e.g. compute-001")
    unknown = [n for n in wanted if n not in known]
    if unknown:
        listed = ", ".join(sorted(known, key=lambda n: (n != "head", n))) or "none (the stack has no instances yet)"
        raise UnknownNodes(f"not a node of stack {stack_name!r}: {', '.join(unknown)}; its nodes are: {listed}")
    return {n: known[n] for n in dict.fromkeys(wanted)}


def replace(config_path: Path, stack_name: str, nodes: list[str], *, aws: Aws | None = None,
            stack_factory=None, console: Console | None = None, hostfile_path: Path = Path("hostfile"),
            wait_seconds: float | None = None, poll: float = 15.0, allow_replace: bool = False,
            which: Callable[[str], str | None] = shutil.which,
            sleep: Callable[[float], None] = time.sleep) -> UpReport:
    console = console or Console()
    cfg = _load(config_path)
    cluster = cfg.cluster.name
    stack = select(config_path, stack_name, stack_factory, which)
    urns = node_urns(stackstate.instance_nodes(state(stack), cluster), nodes, stack_name)
    aws = aws or Aws(cfg.region)
    live = {i.node: i.instance_id for i in instances(aws, cluster, include_terminated=True)}
    leaving = {n: live[n] for n in urns if n in live}
    console.print("replacing " + ", ".join(f"{n} ({leaving.get(n, 'no instance')})" for n in urns), highlight=False)
    outputs = guarded_update(stack, console, replace=list(urns.values()), allow_replace=allow_replace,
                             policy_pack=pack_for(config_path), allowed_replacements=tuple(resource_name(cluster, n) for n in urns))
    return wait_and_report(cfg, aws, outputs, console, hostfile_path=hostfile_path, wait_seconds=wait_seconds,
                           poll=poll, sleep=sleep, replaced=leaving)

