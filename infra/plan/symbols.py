"""Generated values (moto's ids, random private IPs, DNS names) as symbols, so that two plans compare.

Each resource's id and the outputs its mock returned become `${name.attr}`; in another resource's input
property they are replaced only where that property depends on the resource (its property dependencies,
what Pulumi itself tracks), and only as whole tokens: `10.0.1.5` never matches inside `10.0.1.55`.
"""

from __future__ import annotations

import re
from functools import lru_cache

TOKEN_EDGE = r"A-Za-z0-9_.\-"  # a token is not part of a longer run of these
SYMBOL = re.compile(r"\$\{([^.}]+)\.([^}]+)\}")


def generated_values(record: dict) -> dict[str, str]:
    """value -> symbol for a resource's id and its mock outputs; attributes sharing a value share one
    symbol (`${x-lt.defaultVersion|latestVersion}`)."""
    found: dict[str, list[str]] = {}
    if record.get("id"):
        found.setdefault(str(record["id"]), []).append("id")
    for attr, value in sorted((record.get("outputs") or {}).items()):
        if isinstance(value, bool) or value in (None, ""):
            continue
        if isinstance(value, (str, int, float)):
            found.setdefault(str(value), []).append(attr)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, str) and item:
                    found.setdefault(item, []).append(f"{attr}[{i}]")
    return {value: f"${{{record['name']}.{'|'.join(attrs)}}}" for value, attrs in found.items()}


def symbol_attrs(symbol_body: str) -> list[str]:
    return symbol_body.split("|")


def referenced(value, name: str) -> list[tuple[str, list[str]]]:
    """Every `${name.attrs}` in a value, as (path below the value, attrs)."""
    out = []
    for path, text in _strings(value, ""):
        for m in SYMBOL.finditer(text):
            if m.group(1) == name:
                out.append((path, symbol_attrs(m.group(2))))
    return out


def _strings(value, path: str):
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{path}.{k}" if path else k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]")


RUN = rf"[{TOKEN_EDGE}]+"


@lru_cache(maxsize=512)
def _pattern(tokens: tuple[str, ...]) -> re.Pattern:
    """Tokens made of one run of token characters (ids, IPs, DNS names) are looked up run by run; only the
    others (ARNs) need an alternative of their own, tried first, longest first."""
    compound = sorted((t for t in tokens if not re.fullmatch(RUN, t)), key=lambda t: (-len(t), t))
    alternatives = "".join(re.escape(t) + "|" for t in compound)
    return re.compile(rf"(?<![{TOKEN_EDGE}])(?:{alternatives}{RUN})(?![{TOKEN_EDGE}])")


def replace_tokens(value, table: dict[str, str]):
    """`value` with every whole token found in `table` replaced by what it maps to; numbers that equal a
    token (an output version 1 read as `"1"`) only when they are the whole value."""
    if not table:
        return value
    if isinstance(value, str):
        if value in table:
            return table[value]
        pattern = _pattern(tuple(sorted(table)))
        return pattern.sub(lambda m: table.get(m.group(0), m.group(0)), value)
    if isinstance(value, dict):
        return {k: replace_tokens(v, table) for k, v in value.items()}
    if isinstance(value, list):
        return [replace_tokens(v, table) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and str(value) in table:
        return table[str(value)]
    return value


def normalised(records: list[dict]) -> list[dict]:
    """Records whose inputs carry symbols instead of the values other resources generated."""
    tokens = {r["name"]: generated_values(r) for r in records}
    out = []
    for r in records:
        deps = r.get("propertyDependencies") or {}
        inputs = {}
        for prop, value in (r.get("inputs") or {}).items():
            table: dict[str, str] = {}
            for dep in deps.get(prop, ()):
                for token, symbol in tokens.get(dep, {}).items():
                    table.setdefault(token, symbol)
            inputs[prop] = replace_tokens(value, table)
        out.append({**r, "inputs": inputs})
    return out


def translate(value, old_tokens: dict[str, str], new_values: dict[str, str]):
    """An old plan's value in the new plan's terms: each generated token of the old plan becomes what the
    same resource attribute generated in the new plan, where that resource exists there already."""
    table = {}
    for token, symbol in old_tokens.items():
        table[token] = new_values.get(symbol, token)
    return replace_tokens(value, table)
