"""`hpcc plan`: run the real Pulumi program (infra/__main__.py) under the mock runtime, against moto."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import runpy
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pulumi

from infra.config.model import StackConfig
from infra.config.parse import parse
from infra.config.stackfile import as_pulumi_config, read_raw
from infra.config.validators.check import check_config
from infra.config.validators.findings import Finding
from infra.facts.instance_types import ec2_facts
from infra.plan.aws_rules import AwsRejected, decode_user_data
from infra.plan.changes import launch_template_notes, plan_changes, refused, region_change
from infra.plan.embedded_aws import EmbeddedAws, embedded_aws
from infra.plan.guard import Change
from infra.plan.internals import event_loop, fresh_stack, root_resource, run_program
from infra.plan.mocks import MotoMocks
from infra.plan.order import refusals as order_refusals
from infra.plan.order import update_steps
from infra.plan.previous import PreviousPlan
from infra.plan.recorder import RecordingMonitor
from infra.plan.rolls import groups_doc, roll_changes
from infra.render.bundle import role_script, unpack, write_unpacked

PROGRAM = Path(__file__).resolve().parent.parent / "__main__.py"
PROJECT = "hpcc"


class PlanError(Exception):
    """The emulated AWS refused the program, or the program failed: a message, never a traceback."""


@dataclass
class PlanResult:
    config: StackConfig
    resources: list[dict]
    outputs: dict
    warnings: list[Finding]
    seconds: float
    user_data: dict[str, str] = field(default_factory=dict)
    changes: list[Change] | None = None  # with a previous plan: what a second `pulumi up` would do
    refused: list[Change] = field(default_factory=list)  # of those, what Pulumi refuses (protected resources)
    steps: list = field(default_factory=list)  # the order the update would take (infra/plan/order.py)
    aws_refusals: list[str] = field(default_factory=list)  # what AWS would refuse on the way
    notes: list[str] = field(default_factory=list)  # what the counts alone would not tell the user
    rolls: list[Change] = field(default_factory=list)  # the groups whose running nodes the controller replaces
    facts: object = None  # the embedded AWS's instance facts (infra/facts/instance_types.py), for the summary
    bundle_files: dict[str, bytes] = field(default_factory=dict)  # the bundle the program stores, unpacked
    bundle_sha256: str = ""

    def role_scripts(self) -> dict[str, str]:
        """`head` and each node group's name -> the bootstrap the loader of its launch template runs, read from the
        planned bundle (infra/render/bundle.py role_script)."""
        keys = json.loads(self.bundle_files["manifest.json"])["roles"]
        return {key: role_script(self.bundle_files, key) for key in keys}

    def of_type(self, token: str) -> list[dict]:
        return [r for r in self.resources if r["type"] == token]

    def named(self, name: str) -> dict:
        return next(r for r in self.resources if r["name"] == name)

    def write(self, out: Path) -> None:
        out = Path(out)
        (out / "user-data").mkdir(parents=True, exist_ok=True)
        for stale in (out / "user-data").iterdir():
            stale.unlink()
        (out / "resources.json").write_text(json.dumps(self.resources, indent=2, sort_keys=True) + "\n")
        (out / "outputs.json").write_text(json.dumps(self.outputs, indent=2, sort_keys=True) + "\n")
        for name, script in sorted(self.user_data.items()):
            (out / "user-data" / name).write_text(script)
        if self.bundle_files:
            write_unpacked(self.bundle_files, self.bundle_sha256, out)
        changes = out / "changes.json"
        if self.changes is None:
            changes.unlink(missing_ok=True)  # never leave an earlier comparison beside this plan
        else:
            changes.write_text(json.dumps([c.as_json() for c in self.changes], indent=2) + "\n")


def _root_cause(exc: BaseException) -> BaseException | None:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (AwsRejected, pulumi.RunError)):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def _execute(
    config_map: dict, cfg: StackConfig, stack: str, previous: PreviousPlan | None = None
) -> tuple[list[dict], dict]:
    mocks = MotoMocks(cfg.region)
    for group in cfg.cluster.node_groups:  # the account's placement group: offline it is taken to exist (preflight)
        if group.placement_group:
            mocks.placement_groups[group.placement_group] = "cluster"
    monitor = RecordingMonitor(mocks, kept=previous.kept_inputs if previous else None)
    executor = ThreadPoolExecutor(thread_name_prefix="hpcc-plan")
    event_loop().set_default_executor(executor)  # registrations run here; drained below
    fresh_stack()  # also when several plans run in one process (as pulumi.runtime.test does)
    pulumi.runtime.set_all_config(as_pulumi_config(config_map))
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor)
    outputs: dict = {}

    async def program() -> None:
        runpy.run_path(str(PROGRAM), run_name="__main__")
        outputs.update(await pulumi.Output.from_input(root_resource().outputs).future() or {})

    try:
        run_program(program)
    except Exception as exc:  # noqa: BLE001 - turned into a message below, or re-raised
        cause = _root_cause(exc)
        if cause is None:
            raise
        raise PlanError(str(cause)) from None
    finally:
        _drain(executor)
        mocks.close()
    return sorted(monitor.records, key=lambda r: r["name"]), outputs


def _drain(executor: ThreadPoolExecutor) -> None:
    """After a failure Pulumi leaves registrations queued; finish them here, while the embedded AWS
    is still up, so none runs later against whatever AWS a stale client would reach."""
    loop = event_loop()
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    executor.shutdown(wait=True)
    loop.set_default_executor(ThreadPoolExecutor())  # for whatever runs on this loop next


def _type_warnings(cfg: StackConfig):
    """The rules' warnings, type rules included, with facts from the embedded AWS (the program refused the errors)."""
    facts = ec2_facts(cfg.region)
    return facts, [f for f in check_config(cfg, facts) if not f.is_error]


def plan_config(
    config_map: dict, stack: str = "dev", aws: EmbeddedAws | None = None, previous: PreviousPlan | None = None
) -> PlanResult:
    """Plan a stack config map ({"aws:region": ..., "hpcc:cluster": {...}}). Inside an active
    `embedded_aws` block (pass it as `aws`) the created resources stay readable with boto3. With an
    earlier plan (`previous`), ignored inputs keep its values and `changes` says what an update would do."""
    cfg = parse(config_map.get("aws:region"), config_map.get("hpcc:cluster"))
    started = time.perf_counter()
    if aws is None:
        with embedded_aws(cfg.region):
            resources, outputs = _execute(config_map, cfg, stack, previous)
            facts, warnings = _type_warnings(cfg)
    else:
        resources, outputs = _execute(config_map, cfg, stack, previous)
        facts, warnings = _type_warnings(cfg)
    user_data = {
        r["name"]: decode_user_data(r["inputs"]["userData"])
        for r in resources
        if r["type"] in ("aws:ec2/launchTemplate:LaunchTemplate", "aws:ec2/instance:Instance")
        and r["inputs"].get("userData")
    }
    result = PlanResult(cfg, resources, outputs, warnings, time.perf_counter() - started, user_data, facts=facts)
    result.bundle_files, result.bundle_sha256 = planned_bundle(resources)
    if previous is not None:
        result.changes = plan_changes(previous.resources, resources, previous.replace)
        result.refused = refused(result.changes, previous.resources, resources)
        result.steps = update_steps(result.changes, previous.resources, resources)
        result.aws_refusals = order_refusals(result.steps, result.changes, previous.resources, resources)
        result.notes = [n for n in (region_change(previous.resources, resources),) if n] + launch_template_notes(
            result.changes, resources, previous.resources
        )
        result.rolls = roll_changes(groups_doc(previous.resources), groups_doc(resources))
    return result


def plan_update_image(
    config_map: dict, previous: PreviousPlan, pin: str, stack: str = "dev", aws: EmbeddedAws | None = None
) -> PlanResult:
    """`--update-image`: the image resolved again first; when it is the one the earlier plan kept, nothing is
    replaced (replacing the pin would leave every node's `ami` unknown at preview: a guarded replacement of all)."""
    moved = plan_config(config_map, stack=stack, aws=aws, previous=previous.replacing([pin]))
    kept = next((r for r in previous.resources if r["name"] == pin), None)
    now = moved.named(pin)["inputs"].get("insecureValue")
    if kept is None or _ami(kept["inputs"].get("insecureValue")) != _ami(now):
        return moved
    result = plan_config(config_map, stack=stack, aws=aws, previous=previous)
    result.notes.insert(
        0,
        f"--update-image: no newer image; {_ami(now)} is still what the config resolves to, "
        "so the nodes keep it and nothing is replaced",
    )
    return result


def _ami(pin_value) -> str | None:
    try:
        return json.loads(pin_value)["ami_id"]
    except (TypeError, ValueError, KeyError):
        return None


def planned_bundle(resources: list[dict]) -> tuple[dict[str, bytes], str]:
    """The bundle object the program stores (infra/program/components/bundle.py): its files and its archive's sha256."""
    objects = [r for r in resources if r["type"] == "aws:s3/bucketObjectv2:BucketObjectv2"]
    if not objects:
        return {}, ""
    archive = base64.b64decode(objects[0]["inputs"]["contentBase64"])
    return unpack(archive), hashlib.sha256(archive).hexdigest()


def plan_stack_file(
    path: str | Path, stack: str = "dev", aws: EmbeddedAws | None = None, previous: PreviousPlan | None = None
) -> PlanResult:
    return plan_config(read_raw(path), stack=stack, aws=aws, previous=previous)
