"""Parsing the stack config: the model validated (infra/config/model.py), then the config rules
(infra/config/validators/), every problem named with its field's path as the user wrote it (infra/config/problems.py).
Above the model and the rules, which import neither this module nor each other for it."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from infra.config.model import StackConfig
from infra.config.problems import pydantic_problems
from infra.config.validators.check import check_config


class ConfigError(Exception):
    """Invalid stack config: `problems` are (field path, message) pairs, ready to print."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__("\n".join(f"{path}: {msg}" for path, msg in problems))


def parse(region: Any, cluster: Any) -> StackConfig:
    """Validate raw config values (the model, then the config rules); raise ConfigError naming every bad field."""
    if cluster is None:
        raise ConfigError([("hpcc:cluster", "is required: the stack config has no cluster (see examples/)")])
    if region is None:
        raise ConfigError([("aws:region", "is required, e.g. aws:region: us-east-1")])
    try:
        cfg = StackConfig.model_validate({"region": region, "cluster": cluster})
    except ValidationError as err:
        raise ConfigError(pydantic_problems(err)) from None
    errors = [(f.field, f.message) for f in check_config(cfg) if f.is_error]
    if errors:
        raise ConfigError(errors)
    return cfg
