"""Pulumi property paths (`launchTemplate.version`, `networkInterfaces[0].subnetId`, `tags["hpcc:cluster"]`)
over plain input values, as `ignoreChanges` and `replaceOnChanges` name them
(https://www.pulumi.com/docs/iac/concepts/options/ignorechanges/), and the leaf paths where two values differ."""

from __future__ import annotations

import re

MISSING = object()  # no value at a path
_TOKEN = re.compile(r'\.?([A-Za-z_$*][\w$:-]*)|\[(\d+)\]|\["((?:[^"\\]|\\.)*)"\]|\[(\*)\]')


def parse_path(path: str) -> list:
    """`a.b[0]["c.d"]` -> ["a", "b", 0, "c.d"]; a malformed path raises ValueError naming it."""
    parts, pos = [], 0
    while pos < len(path):
        m = _TOKEN.match(path, pos)
        if not m or (pos == 0 and path.startswith(".")):
            raise ValueError(f"cannot read property path {path!r} at {pos}")
        name, index, quoted, star = m.groups()
        parts.append(int(index) if index is not None else next(p for p in (name, quoted, star) if p is not None))
        pos = m.end()
    if not parts:
        raise ValueError("empty property path")
    return parts


def format_path(parts: list) -> str:
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif re.fullmatch(r"[A-Za-z_$][\w$:-]*", p):
            out += ("." if out else "") + p
        else:
            out += f'["{p}"]'
    return out


def get_path(value, parts: list):
    for p in parts:
        if isinstance(p, int) and isinstance(value, list) and 0 <= p < len(value):
            value = value[p]
        elif isinstance(p, str) and isinstance(value, dict) and p in value:
            value = value[p]
        else:
            return MISSING
    return value


def set_path(value, parts: list, new):
    """`value` with `new` at `parts` (MISSING removes it); containers on the way are created."""
    if not parts:
        return new
    head, rest = parts[0], parts[1:]
    if isinstance(head, int):
        items = list(value) if isinstance(value, list) else []
        if head >= len(items):
            if new is MISSING:
                return items
            items.extend([None] * (head + 1 - len(items)))
        child = set_path(items[head], rest, new)
        if child is MISSING:
            del items[head]
        else:
            items[head] = child
        return items
    obj = dict(value) if isinstance(value, dict) else {}
    child = set_path(obj.get(head, MISSING), rest, new)
    if child is MISSING:
        obj.pop(head, None)
    else:
        obj[head] = child
    return obj


def leaf_differences(old, new, prefix: tuple = ()) -> list[str]:
    """Paths of the leaves that differ; a value present on one side only is one path."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            out += leaf_differences(old.get(key, MISSING), new.get(key, MISSING), prefix + (key,))
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        out = []
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            out += leaf_differences(a, b, prefix + (i,))
        return out
    return [] if old == new else [format_path(list(prefix))]


def normal(path: str) -> tuple:
    """One form for a path however it is written: `tags.hpcc:interfaces` and `tags["hpcc:interfaces"]` (as
    `replaceOnChanges` names it) are the same path, as the engine's parser reads both (pulumi/pulumi
    sdk/go/common/resource/properties_path.go ParsePropertyPath). A path it cannot read stays as written."""
    try:
        return tuple(parse_path(path))
    except ValueError:
        return (path,)


def covers(outer: str, inner: str) -> bool:
    """Is `inner` at, or inside, `outer`? (`tags.*` covers every tag)"""
    out, inn = normal(outer), normal(inner)
    if out[-1:] == ("*",):
        return len(inn) > len(out) - 1 and inn[: len(out) - 1] == out[:-1]
    return inn[: len(out)] == out
