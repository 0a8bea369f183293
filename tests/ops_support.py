"""Helpers for the operator-command tests: clusters planned into moto, and faults injected into boto3 calls."""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import yaml

from infra.stackfile import read_raw

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def stack_file(tmp: Path, example: str, **cluster_changes) -> Path:
    """A copy of an example stack file with top-level cluster keys changed (e.g. name="other")."""
    config = copy.deepcopy(read_raw(EXAMPLES / f"{example}.yaml"))
    config["hpcc:cluster"].update(cluster_changes)
    path = tmp / f"Pulumi.{config['hpcc:cluster']['name']}.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
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
            return _response(400, {"Error": {"Code": code, "Message": f"injected {code}"},
                                   "ResponseMetadata": {"HTTPStatusCode": 400}})
        return None

    client.meta.events.register(event, handler)
    return codes


def inject_response(client, operation: str, parsed: dict) -> None:
    """Every call of `operation` answers `parsed` (for what moto does not model)."""
    event = f"before-call.{client.meta.service_model.service_id.hyphenize()}.{operation}"
    client.meta.events.register(event, lambda **_: _response(200, {**parsed, "ResponseMetadata": {"HTTPStatusCode": 200}}))


def edit_response(client, operation: str, edit) -> None:
    """Change moto's parsed answer to `operation` in place with `edit(parsed)`."""
    event = f"after-call.{client.meta.service_model.service_id.hyphenize()}.{operation}"
    client.meta.events.register(event, lambda parsed, **_: edit(parsed))
