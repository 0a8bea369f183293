"""Parsing the stack config: the model validated (infra/config/model.py), then the config rules
(infra/config/validators/), every problem named with its field's path as the user wrote it. Above the model and
the rules, which import neither this module nor each other for it."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from infra.config.model import StackConfig
from infra.config.validators.check import check_config


class ConfigError(Exception):
    """Invalid stack config: `problems` are (field path, message) pairs, ready to print."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__("\n".join(f"{path}: {msg}" for path, msg in problems))


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _shown(value: Any, limit: int = 80) -> str:
    """The bad input as the message shows it: repr (so control characters are escaped), cut when long."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value)} characters)"
    return repr(value)


def _pydantic_problems(err: ValidationError) -> list[tuple[str, str]]:
    problems = []
    for e in err.errors():
        loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        path = _path(loc)
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key (check its spelling against examples/ and the README's config reference)"
        elif e["type"] == "missing":
            msg = "is required"
        elif e["type"] == "literal_error":
            msg = f"{msg}; got {e.get('input')!r}"
        elif "input" in e and not isinstance(e["input"], (dict, list)) and "got " not in msg:
            msg = f"{msg}; got {_shown(e['input'])}"
        problems.append(("aws:region" if path == "region" else path, msg))
    return problems


def parse(region: Any, cluster: Any) -> StackConfig:
    """Validate raw config values (the model, then the config rules); raise ConfigError naming every bad field."""
    if cluster is None:
        raise ConfigError([("hpcc:cluster", "is required: the stack config has no cluster (see examples/)")])
    if region is None:
        raise ConfigError([("aws:region", "is required, e.g. aws:region: us-east-1")])
    try:
        cfg = StackConfig.model_validate({"region": region, "cluster": cluster})
    except ValidationError as err:
        raise ConfigError(_pydantic_problems(err)) from None
    errors = [(f.field, f.message) for f in check_config(cfg) if f.is_error]
    if errors:
        raise ConfigError(errors)
    return cfg
