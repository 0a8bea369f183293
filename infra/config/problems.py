"""pydantic's validation errors as the (field path, message) pairs `hpcc` prints: the path as the user wrote it
(`cluster.nodeGroups[1].count`), the bad value shown escaped and cut, an unknown key answered with the closest key
the model knows (difflib over its aliases: `instanceTyp` -> "did you mean instanceType?")."""

from __future__ import annotations

import difflib
from typing import Any, get_args

from pydantic import BaseModel, ValidationError
from pydantic.alias_generators import to_camel

from infra.config.model import StackConfig
from infra.config.nodes import ConfigModel
from infra.config.validators.findings import NOT_SHOWN


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


def _keys_of(field: Any, name: str) -> list[str]:
    """A field's keys as the user writes them: its alias (camelCase, storageCapacityGiB) or alias choices."""
    return list(getattr(field.validation_alias, "choices", None) or [field.alias or to_camel(name)])


def _keys(model: type[BaseModel]) -> list[str]:
    return [key for name, field in model.model_fields.items() for key in _keys_of(field, name)]


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The config model whose keys `loc` (a pydantic error location, without its last part) points into."""
    model: Any = StackConfig
    for part in loc:
        if isinstance(part, int):
            continue
        field = next((f for n, f in model.model_fields.items() if part in (n, f.alias, *_keys_of(f, n))), None)
        if field is None:
            return None
        model = next(
            (t for t in _types_in(field.annotation) if isinstance(t, type) and issubclass(t, ConfigModel)), None
        )
        if model is None:
            return None
    return model


def _types_in(annotation: Any) -> list[Any]:
    """A field's annotation taken apart: `list[NodeGroup] | None` -> [NodeGroup, ...]."""
    found, todo = [], [annotation]
    while todo:
        t = todo.pop()
        inner = get_args(t)
        if inner:
            todo.extend(inner)
        else:
            found.append(t)
    return found


def did_you_mean(loc: tuple[Any, ...]) -> str | None:
    """The known key closest to an unknown one (difflib, over the model's aliases), or None."""
    if not loc or not isinstance(loc[-1], str):
        return None
    model = _model_at(loc[:-1])
    if model is None:
        return None
    known = _keys(model)
    close = difflib.get_close_matches(loc[-1], known, n=1, cutoff=0.6) or difflib.get_close_matches(
        loc[-1].lower(), [k.lower() for k in known], n=1, cutoff=0.6
    )
    if not close:
        return None
    return next((k for k in known if k.lower() == close[0].lower()), close[0])


def pydantic_problems(err: ValidationError) -> list[tuple[str, str]]:
    problems = []
    for e in err.errors():
        loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        path = _path(loc)
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            guess = did_you_mean(loc)
            msg = (
                f"unknown key; did you mean {guess}?"
                if guess
                else "unknown key (check its spelling against examples/ and the README's config reference)"
            )
        elif e["type"] == "missing":
            msg = "is required"
        elif e["type"] == "literal_error":
            msg = f"{msg}; got {e.get('input')!r}"
        elif "input" in e and not isinstance(e["input"], (dict, list)) and "got " not in msg and NOT_SHOWN not in msg:
            msg = f"{msg}; got {_shown(e['input'])}"
        problems.append(("aws:region" if path == "region" else path, msg))
    return problems
