"""`hpcc up` and `hpcc destroy`: Pulumi's Automation API, with hpcc's checks around it.

up: preflight (stop on any error) -> `pulumi up` with its progress streamed -> wait for every node's
bootstrap status (/hpcc/<c>/nodes/<node>) to reach `ready`, a progress bar per phase -> name failed nodes
with their failing step and log tail -> print the SSH (or SSM) command and write the hostfile locally.
destroy: `pulumi destroy` streamed -> list anything still tagged for the cluster (and how to reap it).

The Pulumi call goes through a `stack_factory(stack_name) -> Stack-like`; by default a LocalWorkspace over
this project (needs the Pulumi CLI). Tests pass a fake; everything before and after is real boto3.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from infra.config import StackConfig
from infra.ops import OpsError
from infra.ops import hostfile as ops_hostfile
from infra.ops import reap as ops_reap
from infra.ops.aws import Aws
from infra.ops.preflight import has_errors, preflight, print_findings
from infra.ops.status import PHASES, STEPS, NodeStatus, cluster_status, print_failures
from infra.stackfile import load, read_raw

ROOT = Path(__file__).resolve().parents[2]  # Pulumi.yaml lives here
POLICY_PACK = ROOT / "policy"
INSTALL_HINT = ("the Pulumi CLI is not installed (hpcc drives it through the Automation API). Install it: "
                "https://www.pulumi.com/docs/install/ (e.g. `curl -fsSL https://get.pulumi.com | sh`), "
                "then `pulumi login` and `pulumi plugin install resource aws`. "
                "`hpcc plan CONFIG` works without it")
LOG_TAIL_LINES = 10


class StackLike(Protocol):
    def set_all_config(self, config: dict, *, path: bool = False) -> None: ...
    def up(self, **kwargs) -> Any: ...
    def destroy(self, **kwargs) -> Any: ...
    def outputs(self) -> dict: ...


def require_pulumi(which: Callable[[str], str | None] = shutil.which) -> str:
    found = which("pulumi")
    if not found:
        raise OpsError(INSTALL_HINT)
    return found


def local_stack(stack_name: str) -> StackLike:
    from pulumi import automation as auto

    require_pulumi()
    return auto.create_or_select_stack(stack_name=stack_name, work_dir=str(ROOT))


def stack_outputs(stack_name: str, which: Callable[[str], str | None] = shutil.which) -> dict:
    """A stack's outputs as plain values (for `status --stack`): needs the CLI."""
    from pulumi import automation as auto

    require_pulumi(which)
    try:
        stack = auto.select_stack(stack_name=stack_name, work_dir=str(ROOT))
        return {k: v.value for k, v in stack.outputs().items()}
    except auto.errors.CommandError as e:
        raise OpsError(f"cannot read stack {stack_name!r}: {_last_lines(str(e))}") from None


def _last_lines(text: str, n: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def _config_values(config_path: Path) -> dict:
    from pulumi.automation import ConfigValue

    raw = read_raw(config_path)
    # Structured values as JSON strings: pulumi.Config.get_object parses them, as it does `config set --path` maps.
    return {k: ConfigValue(v if isinstance(v, str) else json.dumps(v)) for k, v in raw.items()}


def configure(stack: StackLike, config_path: Path, stack_name: str, root: Path | None = None) -> bool:
    """Give the stack the config file's values, unless the file is the stack's own Pulumi.<stack>.yaml:
    Pulumi reads that itself, and setting it again would rewrite the user's file (structured values as
    JSON strings, comments gone). Returns whether config was set."""
    own = (root or ROOT) / f"Pulumi.{stack_name}.yaml"
    if Path(config_path).resolve() == own.resolve():
        return False
    stack.set_all_config(_config_values(config_path))
    return True


def _pulumi(action: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except OpsError:
        raise
    except Exception as e:  # noqa: BLE001 - Automation API errors carry the CLI's stderr
        raise OpsError(f"pulumi {action} failed: {_last_lines(str(e))}") from None


# -- waiting for the bootstrap ----------------------------------------------------------------------------

@dataclass
class Readiness:
    nodes: dict[str, NodeStatus] = field(default_factory=dict)
    timed_out: bool = False

    @property
    def ready(self) -> list[str]:
        return sorted(n for n, r in self.nodes.items() if r.ready)

    @property
    def failed(self) -> list[NodeStatus]:
        return [r for _, r in sorted(self.nodes.items()) if r.failed]

    @property
    def waiting(self) -> list[NodeStatus]:
        return [r for _, r in sorted(self.nodes.items()) if not r.ready and not r.failed]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.waiting


def passed(row: NodeStatus, phase: str) -> bool:
    """Has this node got through `phase` (a bootstrap step, or `ready`)?"""
    if row.phase == "ready":
        return True
    if row.phase not in PHASES:  # failed / unknown: through every step before the failing one
        return row.step in STEPS and phase in STEPS and STEPS.index(phase) < STEPS.index(row.step)
    return phase in STEPS and PHASES.index(row.phase) > PHASES.index(phase)


def wait_ready(aws: Aws, cluster: str, nodes: list[str], timeout: float, poll: float = 15.0,
               console: Console | None = None, sleep: Callable[[float], None] = time.sleep,
               clock: Callable[[], float] = time.monotonic) -> Readiness:
    """Poll the nodes' status parameters until every node is ready or failed, or `timeout` passes."""
    console = console or Console()
    deadline = clock() + timeout
    result = Readiness()
    with Progress(TextColumn("{task.description:>11}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        tasks = {phase: progress.add_task(phase, total=len(nodes)) for phase in (*STEPS, "ready")}
        while True:
            rows = {r.node: r for r in cluster_status(aws, cluster)}
            result.nodes = {n: rows.get(n) or NodeStatus(n) for n in nodes}
            for phase, task in tasks.items():
                progress.update(task, completed=sum(passed(r, phase) for r in result.nodes.values()))
            if not result.waiting:
                return result
            if clock() >= deadline:
                result.timed_out = True
                return result
            sleep(poll)


def report_failures(console: Console, result: Readiness) -> None:
    print_failures(console, result.failed, LOG_TAIL_LINES)
    if result.timed_out:
        for r in result.waiting:
            console.print(f"[yellow]{r.node} not ready[/]: instance {r.state}, bootstrap phase {r.phase}"
                          f"{' (step ' + r.step + ')' if r.step and r.step != r.phase else ''}"
                          f"{'; ' + r.message if r.message else ''}", highlight=False)


# -- up / destroy -----------------------------------------------------------------------------------------

@dataclass
class UpReport:
    cluster: str
    outputs: dict
    readiness: Readiness
    hostfile: Path | None

    @property
    def ok(self) -> bool:
        return self.readiness.ok


def _load(config_path: Path) -> StackConfig:
    return load(config_path)


def up(config_path: Path, stack_name: str, *, aws: Aws | None = None,
       stack_factory: Callable[[str], StackLike] | None = None, console: Console | None = None,
       hostfile_path: Path = Path("hostfile"), wait_seconds: float | None = None, poll: float = 15.0,
       skip_preflight: bool = False, which: Callable[[str], str | None] = shutil.which,
       sleep: Callable[[float], None] = time.sleep) -> UpReport:
    console = console or Console()
    cfg = _load(config_path)
    if stack_factory is None:
        require_pulumi(which)
        stack_factory = local_stack
    aws = aws or Aws(cfg.region)
    if not skip_preflight:
        findings = preflight(aws, cfg)
        print_findings(console, findings)
        if has_errors(findings):
            raise OpsError("preflight found errors (above); nothing was created")

    stack = _pulumi("stack select", lambda: stack_factory(stack_name))
    _pulumi("config set", lambda: configure(stack, config_path, stack_name))
    kwargs: dict = {"on_output": lambda line: console.print(line.rstrip("\n"), markup=False, highlight=False)}
    if POLICY_PACK.is_dir():
        kwargs["policy_packs"] = [str(POLICY_PACK)]
    result = _pulumi("up", lambda: stack.up(**kwargs))
    outputs = {k: getattr(v, "value", v) for k, v in (getattr(result, "outputs", None) or {}).items()}

    cluster = outputs.get("clusterName") or cfg.cluster.name
    compute = [n["name"] for n in outputs.get("computeNodes") or []] or \
        [f"compute-{i:03d}" for i in range(cfg.cluster.compute.count)]
    nodes = ["head", *compute]
    timeout = wait_seconds if wait_seconds is not None else (cfg.cluster.bootstrap.timeout_minutes + 5) * 60
    console.print(f"waiting for {len(nodes)} nodes to finish their bootstrap (up to {timeout / 60:.0f} min)",
                  highlight=False)
    readiness = wait_ready(aws, cluster, nodes, timeout, poll=poll, console=console, sleep=sleep)
    report_failures(console, readiness)

    written = None
    try:
        text = ops_hostfile.render(aws, cluster, "openmpi")
    except OpsError:
        text = outputs.get("hostfile")
    if text:
        hostfile_path.write_text(text)
        written = hostfile_path
        console.print(f"hostfile: {hostfile_path} ({len(text.splitlines())} compute nodes)", highlight=False)
    if outputs.get("sshCommand"):
        console.print(f"log in: {outputs['sshCommand']}", highlight=False)
    ready = len(readiness.ready)
    console.print(f"{ready}/{len(nodes)} nodes ready" + ("" if readiness.ok else
                  f"; failed: {', '.join(r.node for r in readiness.failed) or '-'}; "
                  f"not ready: {', '.join(r.node for r in readiness.waiting) or '-'}"), highlight=False)
    return UpReport(cluster, outputs, readiness, written)


def destroy(config_path: Path, stack_name: str, *, aws: Aws | None = None,
            stack_factory: Callable[[str], StackLike] | None = None, console: Console | None = None,
            which: Callable[[str], str | None] = shutil.which) -> ops_reap.Inventory:
    """`pulumi destroy`, then what is still tagged for the cluster (empty when all went)."""
    console = console or Console()
    cfg = _load(config_path)
    if stack_factory is None:
        require_pulumi(which)
        stack_factory = local_stack
    aws = aws or Aws(cfg.region)
    stack = _pulumi("stack select", lambda: stack_factory(stack_name))
    failure = None
    try:
        _pulumi("destroy", lambda: stack.destroy(
            on_output=lambda line: console.print(line.rstrip("\n"), markup=False, highlight=False)))
    except OpsError as e:
        failure = e  # still list what is left: that is what the operator needs next
    left = ops_reap.inventory(aws, cfg.cluster.name)
    if left.items:
        console.print(ops_reap.table(left, f"still tagged hpcc:cluster={cfg.cluster.name} in {aws.region}"))
        console.print(f"remove them with: hpcc reap --cluster {cfg.cluster.name} --region {aws.region} --yes",
                      highlight=False)
    else:
        console.print(f"nothing tagged hpcc:cluster={cfg.cluster.name} is left in {aws.region}", highlight=False)
    for note in left.notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    if failure:
        raise failure
    return left
