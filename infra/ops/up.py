"""`hpcc up` and `hpcc destroy`: Pulumi's Automation API, with hpcc's checks around it.

up: preflight (stop on any error) -> `pulumi preview`, summarised in the user's terms (groups, nodes, cost per hour
before and after) and then per resource; stop when it would replace or delete an instance, subnet, placement group
or the file system, or make the controller roll a group's nodes, unless --allow-replace -> ask (the CLI: a prompt,
`--yes` for scripts) -> `pulumi up` with its progress streamed -> wait, a progress bar per node group, until the
head and as many nodes as each group asks are ready (the controller on the head launches and replaces them;
infra/ops/readiness.py) -> name failed nodes with their failing step, log tail and what the controller does ->
print the SSH (or SSM) command, write the hostfile.
destroy: name what goes, the file system and its data included, and ask -> unprotect the file system in the
state -> `pulumi destroy` streamed -> list anything still tagged for the cluster (and how to reap it).

The Pulumi call goes through a `stack_factory(stack_name) -> Stack-like`; by default a LocalWorkspace over
this project (needs the Pulumi CLI). Tests pass a fake; everything before and after is real boto3.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from botocore.exceptions import ClientError
from rich.console import Console
from rich.text import Text

from hpcc_contract.names import Paths, resource_name
from hpcc_node.controller.timers import DEFAULT as TIMERS
from infra.config.estimates import ready_timeout_minutes
from infra.config.model import StackConfig
from infra.config.stackfile import as_pulumi_config, load, read_raw
from infra.config.validators.placeholders import placeholder_errors
from infra.ops import OpsError, stackstate
from infra.ops import hostfile as ops_hostfile
from infra.ops.apply import NotConfirmed, current_shape, doomed, guarded_update, last_lines, run_pulumi
from infra.ops.aws import Aws
from infra.ops.preflight.context import Context
from infra.ops.preflight.groups import groups_of, per_minute
from infra.ops.preflight.rules import has_errors, preflight, print_findings
from infra.ops.project import ProjectError, find_project, policy_pack, project_for, stale_environment
from infra.ops.readiness import Readiness, report_failures, summary_line, wait_ready
from infra.ops.reap import report as reap_report
from infra.ops.reap import run as ops_reap
from infra.plan.shape import from_config

INSTALL_HINT = (
    "the Pulumi CLI is not installed (hpcc drives it through the Automation API). Install it: "
    "https://www.pulumi.com/docs/install/ (e.g. `curl -fsSL https://get.pulumi.com | sh`), "
    "then `pulumi login` and `pulumi plugin install resource aws`. "
    "`hpcc plan CONFIG` works without it"
)


class StackLike(Protocol):
    def set_all_config(self, config: dict, *, path: bool = False) -> None: ...
    def preview(self, **kwargs) -> Any: ...
    def up(self, **kwargs) -> Any: ...
    def destroy(self, **kwargs) -> Any: ...
    def outputs(self) -> dict: ...
    def export_stack(self) -> Any: ...
    def import_stack(self, state: Any) -> None: ...


def require_pulumi(which: Callable[[str], str | None] = shutil.which) -> str:
    found = which("pulumi")
    if not found:
        raise OpsError(INSTALL_HINT)
    return found


def local_stack(stack_name: str, project: Path) -> StackLike:
    """The stack in the user's own project (infra/ops/project.py), never in hpcc's installed tree."""
    from pulumi import automation as auto

    require_pulumi()
    return auto.create_or_select_stack(stack_name=stack_name, work_dir=str(project))


def stack_outputs(
    stack_name: str, which: Callable[[str], str | None] = shutil.which, project: Path | None = None
) -> dict:
    """A stack's outputs as plain values (for `status --stack`, run in the project's directory): needs the CLI."""
    from pulumi import automation as auto

    require_pulumi(which)
    project = project or find_project(Path.cwd())
    if project is None:
        raise OpsError("--stack needs the project: run it in the directory `hpcc init` made (or give --cluster)")
    try:
        stack = auto.select_stack(stack_name=stack_name, work_dir=str(project))
        return {k: v.value for k, v in stack.outputs().items()}
    except auto.errors.CommandError as e:
        raise OpsError(f"cannot read stack {stack_name!r}: {last_lines(str(e))}") from None


def _config_values(config_path: Path) -> dict:
    from pulumi.automation import ConfigValue

    return {k: ConfigValue(v) for k, v in as_pulumi_config(read_raw(config_path)).items()}


def configure(stack: StackLike, config_path: Path, stack_name: str, root: Path | None = None) -> bool:
    """Give the stack the config file's values, unless the file is the stack's own Pulumi.<stack>.yaml:
    Pulumi reads that itself, and setting it again would rewrite the user's file (structured values as
    JSON strings, comments gone). Returns whether config was set."""
    own = (root or _project(config_path)) / f"Pulumi.{stack_name}.yaml"
    if Path(config_path).resolve() == own.resolve():
        return False
    stack.set_all_config(_config_values(config_path))
    return True


def select(
    config_path: Path,
    stack_name: str,
    stack_factory: Callable[[str], StackLike] | None,
    which: Callable[[str], str | None] = shutil.which,
) -> StackLike:
    """The stack, given the config file's values."""
    project = _project(config_path)
    if stack_factory is None:
        require_pulumi(which)
        stack_factory = partial(local_stack, project=project)
    stack = run_pulumi("stack select", lambda: stack_factory(stack_name))
    run_pulumi("config set", lambda: configure(stack, config_path, stack_name, root=project))
    return stack


def _project(config_path: Path) -> Path:
    try:
        project = project_for(config_path)
    except ProjectError as e:
        raise OpsError(str(e)) from None
    stale = stale_environment(project)
    if stale:
        raise OpsError(stale)
    return project


def pack_for(config_path: Path) -> Path:
    """The policy pack for the project around the config file (infra/ops/project.py)."""
    try:
        return policy_pack(_project(config_path))
    except ProjectError as e:
        raise OpsError(str(e)) from None


def state(stack: StackLike) -> list[dict]:
    """The resources in the stack's state (empty before the first up)."""
    return stackstate.resources(run_pulumi("stack export", stack.export_stack))


# -- preview, guard, up, wait: shared by `hpcc up` and `hpcc replace` ------------------------------------


@dataclass
class UpReport:
    cluster: str
    outputs: dict
    readiness: Readiness | None  # None: --preview-only, nothing applied and nothing waited for
    hostfile: Path | None
    region: str | None = None

    @property
    def ok(self) -> bool:
        return self.readiness is None or self.readiness.ok


def asked_groups(cfg: StackConfig) -> dict[str, int]:
    """Each node group's count (preflight/groups.py groups_of: `nodeGroups`, or the `compute` block's one group)."""
    return {g.name: g.count for g in groups_of(cfg)}


def wait_timeout(cfg: StackConfig, asked: dict[str, int]) -> float:
    """Seconds `hpcc up` waits (infra/config/estimates.py): grows with the count through the controller's launch
    waves."""
    return 60 * ready_timeout_minutes(
        cfg.cluster.bootstrap.timeout_minutes, sum(asked.values()), per_minute(), TIMERS.boot_grace_seconds // 60
    )


def wait_and_report(
    cfg: StackConfig,
    aws: Aws,
    outputs: dict,
    console: Console,
    *,
    hostfile_path: Path,
    wait_seconds: float | None,
    poll: float,
    sleep: Callable[[float], None],
    replaced: dict[str, str] | None = None,
) -> UpReport:
    """Wait for the head and every group (as many nodes ready as asked, on the current membership, replacements
    included), name what failed and what the controller does about it, write the hostfile, print how to log in."""
    cluster = outputs.get("clusterName") or cfg.cluster.name
    asked = asked_groups(cfg)
    timeout = wait_seconds if wait_seconds is not None else wait_timeout(cfg, asked)
    console.print(
        f"waiting for the head and {sum(asked.values())} nodes in {len(asked)} group(s) "
        f"({', '.join(f'{g}: {n}' for g, n in asked.items())}) to be ready; the controller on the head "
        f"launches and replaces them (up to {timeout / 60:.0f} min)",
        highlight=False,
    )
    readiness = wait_ready(aws, cluster, asked, timeout, poll=poll, console=console, sleep=sleep, replaced=replaced)
    report_failures(console, readiness)

    written = None
    try:
        text = ops_hostfile.render(aws, cluster, "openmpi")
    except OpsError:
        text = None
    if text:
        hostfile_path.write_text(text)
        written = hostfile_path
        console.print(
            f"hostfile: {hostfile_path} ({len(text.splitlines())} ready compute nodes; per group: "
            f"`hpcc hostfile --cluster {cluster} --group NAME`)",
            highlight=False,
        )
    if outputs.get("sshCommand"):
        console.print(f"log in: {outputs['sshCommand']}", highlight=False)
    console.print(summary_line(readiness), highlight=False)
    return UpReport(cluster, outputs, readiness, written, getattr(aws, "region", None))


# -- up / destroy -----------------------------------------------------------------------------------------


def _load(config_path: Path) -> StackConfig:
    return load(config_path)


def image_kept_and_newest(aws: Aws, cfg: StackConfig) -> tuple[str | None, str | None]:
    """The AMI the cluster's image pin keeps (infra/program/components/pins.py) and the one the config resolves to today
    (preflight's resolution: the family's parameter, the newest match of a filter), each None when unknown."""
    try:
        kept = json.loads(
            aws.call("ssm", "get_parameter", Name=Paths(cfg.cluster.name).pinned_image)["Parameter"]["Value"]
        ).get("ami_id")
    except (ClientError, ValueError, AttributeError):
        kept = None
    newest = Context(aws, cfg).image
    return kept, (newest or {}).get("ImageId")


def up(
    config_path: Path,
    stack_name: str,
    *,
    aws: Aws | None = None,
    stack_factory: Callable[[str], StackLike] | None = None,
    console: Console | None = None,
    hostfile_path: Path = Path("hostfile"),
    wait_seconds: float | None = None,
    poll: float = 15.0,
    skip_preflight: bool = False,
    which: Callable[[str], str | None] = shutil.which,
    sleep: Callable[[float], None] = time.sleep,
    allow_replace: bool = False,
    update_image: bool = False,
    confirm: Callable[[str], bool] | None = None,
    preview_only: bool = False,
) -> UpReport:
    """`confirm(question)`: asked once the preview and the change in the user's terms are shown, before `pulumi up`
    (the CLI's prompt, or its refusal without a terminal); None applies without asking (a library caller's choice,
    `hpcc up --yes`)."""
    console = console or Console()
    cfg = _load(config_path)
    if skip_preflight:  # preflight refuses them itself (its first rule)
        left = placeholder_errors(cfg)
        if left:
            print_findings(console, left)
            raise OpsError("placeholders are left in the stack file (above): fill them in; nothing was created")
    if stack_factory is None:
        require_pulumi(which)
    aws = aws or Aws(cfg.region)
    if not skip_preflight:
        findings = preflight(aws, cfg)
        print_findings(console, findings)
        if has_errors(findings):
            raise OpsError("preflight found errors (above); nothing was created")

    stack = select(config_path, stack_name, stack_factory, which)
    replace = []
    if update_image:
        pin = resource_name(cfg.cluster.name, "image-pin")
        urn = stackstate.find_urn(state(stack), stackstate.PARAMETER, pin)
        if urn is None:
            raise OpsError(
                f"--update-image: stack {stack_name!r} has no {pin} ({stackstate.PARAMETER}) yet; "
                "the first `hpcc up` resolves the image itself: run it without --update-image"
            )
        kept, newest = image_kept_and_newest(aws, cfg)
        if kept and kept == newest:
            console.print(
                f"--update-image: no newer image; {kept} is still what the config resolves to, so the "
                "nodes keep it and nothing is replaced",
                highlight=False,
            )
        else:
            console.print(f"--update-image: replacing {pin}, so the program resolves the image again", highlight=False)
            replace = [urn]
    outputs = guarded_update(
        stack,
        console,
        replace=replace,
        allow_replace=allow_replace,
        policy_pack=pack_for(config_path),
        before=current_shape(stack),
        after=from_config(cfg),
        confirm=confirm,
        preview_only=preview_only,
        cluster=cfg.cluster,
    )
    if outputs is None:
        return UpReport(cfg.cluster.name, {}, None, None, cfg.region)
    return wait_and_report(
        cfg, aws, outputs, console, hostfile_path=hostfile_path, wait_seconds=wait_seconds, poll=poll, sleep=sleep
    )


def destroy(
    config_path: Path,
    stack_name: str,
    *,
    aws: Aws | None = None,
    stack_factory: Callable[[str], StackLike] | None = None,
    console: Console | None = None,
    which: Callable[[str], str | None] = shutil.which,
    confirm: Callable[[str], bool] | None = None,
) -> ops_reap.Inventory:
    """Say what goes (and ask `confirm`, when given), unprotect the file system, `pulumi destroy`, then what is
    still tagged for the cluster (empty when all went). The program protects the file system so no update can
    replace or delete it; destroy is the one command meant to, so it clears the flag in the state first."""
    console = console or Console()
    cfg = _load(config_path)
    if stack_factory is None:
        require_pulumi(which)
        project = _project(config_path)
        stack_factory = partial(local_stack, project=project)
    aws = aws or Aws(cfg.region)
    stack = run_pulumi("stack select", lambda: stack_factory(stack_name))
    console.print("hpcc destroy deletes:", highlight=False)
    for line in doomed(cfg, stack_name, current_shape(stack)):
        console.print(Text(f"  {line}"), highlight=False)
    if confirm is not None and not confirm(f"delete cluster {cfg.cluster.name} and its file system's data?"):
        raise NotConfirmed("not confirmed: nothing was deleted")
    fsx = resource_name(cfg.cluster.name, "fsx")
    if run_pulumi("state unprotect", lambda: stackstate.unprotect(stack, stackstate.FILE_SYSTEM, fsx)):
        console.print(
            f"unprotected {fsx} in the stack's state (as `pulumi state unprotect` does), so destroy "
            "deletes the file system and its data",
            highlight=False,
        )
    failure = None
    try:
        run_pulumi(
            "destroy",
            lambda: stack.destroy(
                on_output=lambda line: console.print(line.rstrip("\n"), markup=False, highlight=False)
            ),
        )
    except OpsError as e:
        failure = e  # still list what is left: that is what the operator needs next
    left = ops_reap.inventory(aws, cfg.cluster.name)
    if left.items:
        console.print(reap_report.table(left, f"still tagged hpcc:cluster={cfg.cluster.name} in {aws.region}"))
        console.print(
            f"remove them with: hpcc reap --cluster {cfg.cluster.name} --region {aws.region} --yes", highlight=False
        )
    else:
        console.print(f"nothing tagged hpcc:cluster={cfg.cluster.name} is left in {aws.region}", highlight=False)
    reap_report.print_notes(console, left)
    if failure:
        raise failure
    return left
