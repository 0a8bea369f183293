"""Helpers for the operator-command tests: clusters planned into moto, and faults injected into boto3 calls."""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import yaml

from infra.config.stackfile import read_raw

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def stack_file(tmp: Path, example: str, **cluster_changes) -> Path:
    """A copy of an example stack file with top-level cluster keys changed (e.g. name="other")."""
    config = copy.deepcopy(read_raw(EXAMPLES / f"{example}.yaml"))
    config["hpcc:cluster"].update(cluster_changes)
    path = tmp / f"Pulumi.{config['hpcc:cluster']['name']}.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


# Two node groups, as a new user writes them (README "Config reference", nodeGroups): GPUs for training, CPUs on
# spot for data preparation, Slurm. No placeholder left in: preflight and up take it as it is.
TWO_GROUPS = {
    "aws:region": "us-east-1",
    "hpcc:cluster": {
        "name": "duo",
        "availabilityZone": "us-east-1a",
        "headNode": {"instanceType": "c6i.xlarge"},
        "nodeGroups": [
            {"name": "gpu", "instanceType": "p5.48xlarge", "count": 2, "spares": 1},
            {"name": "cpu", "instanceType": "c6i.16xlarge", "count": 4, "market": "spot"},
        ],
        "scheduler": "slurm",
        # Until the stack pins enroot's .debs (containers.releaseDigests, `hpcc pin containers`), preflight refuses a
        # deploy with containers on (tests/ops/test_preflight.py): a new user writes this too, as the error says.
        "containers": {"enabled": False},
        "tags": {"team": "duo"},
    },
}


def two_groups(tmp: Path, **cluster_changes) -> Path:
    """TWO_GROUPS as a stack file, Pulumi.<name>.yaml, with top-level cluster keys changed."""
    config = copy.deepcopy(TWO_GROUPS)
    config["hpcc:cluster"].update(cluster_changes)
    path = tmp / f"Pulumi.{config['hpcc:cluster']['name']}.yaml"
    path.write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    return path


def _response(status: int, parsed: dict):
    return SimpleNamespace(status_code=status, headers={}, text="", content=b""), parsed


def inject_errors(client, operation: str, codes: list[str]) -> list[str]:
    """The next len(codes) calls of `operation` fail with these AWS error codes, before reaching moto
    (and past botocore's own retries, which hpcc turns off). Returns the codes not yet used."""
    event = f"before-call.{client.meta.service_model.service_id.hyphenize()}.{operation}"

    def handler(**_):
        if codes:
            code = codes.pop(0)
            return _response(
                400,
                {"Error": {"Code": code, "Message": f"injected {code}"}, "ResponseMetadata": {"HTTPStatusCode": 400}},
            )
        return None

    client.meta.events.register(event, handler)
    return codes


def inject_response(client, operation: str, parsed: dict) -> None:
    """Every call of `operation` answers `parsed` (for what moto does not model)."""
    event = f"before-call.{client.meta.service_model.service_id.hyphenize()}.{operation}"
    client.meta.events.register(
        event, lambda **_: _response(200, {**parsed, "ResponseMetadata": {"HTTPStatusCode": 200}})
    )


def edit_response(client, operation: str, edit) -> None:
    """Change moto's parsed answer to `operation` in place with `edit(parsed)`."""
    event = f"after-call.{client.meta.service_model.service_id.hyphenize()}.{operation}"
    client.meta.events.register(event, lambda parsed, **_: edit(parsed))


# -- a fake Pulumi stack: the Automation API's Stack, with the real program run against moto --------------------


def qualified_types(records: list[dict]) -> dict[str, str]:
    """Each resource's URN type part: its parents' types and its own, joined by `$` (as Pulumi writes URNs)."""
    by_name = {r["name"]: r for r in records}

    def chain(r: dict) -> str:
        parent = by_name.get(r.get("parent") or "")
        return f"{chain(parent)}${r['type']}" if parent else r["type"]

    return {r["name"]: chain(r) for r in records}


def fake_deployment(records: list[dict], stack: str = "dev", protected: tuple[str, ...] = ()) -> list[dict]:
    """Deployment resources for planned records, as `pulumi stack export` lists them."""
    types = qualified_types(records)
    return [
        {
            "urn": f"urn:pulumi:{stack}::hpcc::{types[r['name']]}::{r['name']}",
            "type": r["type"],
            "custom": True,
            "protect": r["type"] in protected,
        }
        for r in records
    ]


def pre_event(op: str, urn: str, type_: str, keys=None, diffs=None):
    """An engine ResourcePreEvent, built from the JSON the Pulumi CLI writes to its event log."""
    from pulumi.automation.events import EngineEvent

    metadata = {
        "op": op,
        "urn": urn,
        "type": type_,
        "provider": "",
        "keys": keys,
        "diffs": diffs,
        "detailedDiff": {d: {"diffKind": "update-replace" if d in (keys or []) else "update"} for d in diffs or []},
    }
    return EngineEvent.from_json(
        {"sequence": 1, "timestamp": 0, "resourcePreEvent": {"metadata": metadata, "planning": True}}
    )


def replacement_events(urn: str, type_: str, keys=None) -> list:
    """What a preview shows for one create-before-delete replacement."""
    return [
        pre_event(op, urn, type_, keys=keys, diffs=keys) for op in ("create-replacement", "replace", "delete-replaced")
    ]


class FakeStack:
    """Stands in for pulumi.automation.Stack. The first `up` (or `planned()`) runs the real program against
    moto (as the plan does) and keeps its resources as the state; every up then calls `on_up(kwargs)`. `preview` sends
    `events(kwargs)` (engine events) to on_event. Every call is recorded in `calls`."""

    def __init__(self, env, config_path, on_up=None, on_destroy=None, events=None, stack="dev"):
        self.env, self.config_path, self.on_up, self.on_destroy = env, config_path, on_up, on_destroy
        self.events, self.stack = events or (lambda kwargs: []), stack
        self.config, self.calls, self.result, self.state = {}, [], None, []

    def set_all_config(self, config, *, path=False):
        self.config.update({k: v.value for k, v in config.items()})

    def planned(self):
        from infra.plan.runner import plan_stack_file

        self.result = plan_stack_file(self.config_path, aws=self.env)
        self.state = fake_deployment(
            self.result.resources, self.stack, protected=("aws:fsx/lustreFileSystem:LustreFileSystem",)
        )
        return self

    def urn(self, name: str) -> str:
        return next(r["urn"] for r in self.state if r["urn"].rsplit("::", 1)[-1] == name)

    def preview(self, on_event=None, **kwargs):
        self.calls.append(("preview", kwargs))
        for event in self.events(kwargs):
            on_event(event)
        return SimpleNamespace(change_summary={})

    def up(self, on_output=None, **kwargs):
        self.calls.append(("up", kwargs))
        on_output("Updating (dev):\n")
        if self.result is None:
            self.planned()
        if self.on_up:
            self.on_up(kwargs)
        on_output(f"Resources: {len(self.result.resources)}\n")
        return SimpleNamespace(outputs={k: SimpleNamespace(value=v) for k, v in self.result.outputs.items()})

    def destroy(self, on_output=None, **kwargs):
        self.calls.append(("destroy", kwargs))
        on_output("Destroying (dev):\n")
        if self.on_destroy:
            self.on_destroy()

    def outputs(self):
        """The last up's outputs (none before the first)."""
        return {k: SimpleNamespace(value=v) for k, v in self.result.outputs.items()} if self.result else {}

    def export_stack(self):
        from pulumi.automation import Deployment

        self.calls.append(("export_stack", {}))
        return Deployment(version=3, deployment={"manifest": {}, "resources": [dict(r) for r in self.state]})

    def import_stack(self, state):
        self.calls.append(("import_stack", {"resources": state.deployment["resources"]}))
        self.state = [dict(r) for r in state.deployment["resources"]]


# -- nodes as the bootstrap and the membership agent would report them ---------------------------------------


def first_up(tmp_path_factory, config_map: dict):
    """A config planned as the first `pulumi up` leaves it: the plan, and the directory it was written to (what
    `--previous` reads for the next one)."""
    from infra.plan.runner import plan_config

    out = tmp_path_factory.mktemp("first-up")
    result = plan_config(config_map)
    result.write(out)
    return result, out
