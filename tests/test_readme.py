"""The README's config reference against the config model: every documented key is accepted under its documented
spelling, and every key the model accepts is documented."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from pydantic import BaseModel

from infra.config.model import ClusterConfig
from infra.config.parse import ConfigError, parse

ROOT = Path(__file__).resolve().parent.parent


def documented_keys() -> set[str]:
    """The first column of the table: `a.b`, and `.c` for a sibling of the key before it in the same cell."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Config reference", 1)[1].split("\n## ", 1)[0]
    keys = set()
    for row in (line for line in section.splitlines() if line.startswith("| `")):
        parent = ""
        for token in re.findall(r"`([^`]+)`", row.split("|")[1]):
            key = parent + token if token.startswith(".") else token
            parent = key.rsplit(".", 1)[0] if "." in key else ""
            keys.add(key)
    return keys


def _model(annotation) -> type[BaseModel] | None:
    for t in (annotation, *typing.get_args(annotation)):
        if isinstance(t, type) and issubclass(t, BaseModel):
            return t
    return None


def accepted_keys(model: type[BaseModel] = ClusterConfig, prefix: str = "") -> set[str]:
    keys = set()
    for name, field in model.model_fields.items():
        alias = field.serialization_alias or field.alias or model.model_config["alias_generator"](name)
        nested = _model(field.annotation)
        keys |= accepted_keys(nested, f"{prefix}{alias}.") if nested else {prefix + alias}
    return keys


def test_every_documented_key_is_accepted_and_every_accepted_key_documented():
    documented, accepted = documented_keys(), accepted_keys()
    assert documented - accepted == set(), "documented but not accepted (wrong spelling?)"
    assert accepted - documented == set(), "accepted but not in the README's config reference"


def test_each_documented_spelling_parses_as_a_known_key():
    for key in documented_keys():
        cluster: dict = {"name": "docs", "compute": {"instanceType": "p5.48xlarge", "count": 1}}
        *parents, leaf = key.split(".")
        d = cluster
        for p in parents:
            d = d.setdefault(p, {})
        d[leaf] = None  # a wrong value is fine here; an unknown key is not
        try:
            parse("us-east-1", cluster)
        except ConfigError as e:
            unknown = [p for p, msg in e.problems if "unknown key" in msg]
            assert not unknown, f"{key}: {unknown}"


def test_each_key_has_one_row_and_the_contents_link_every_section():
    """A key documented twice drifts apart (issue 32: nodeGroups had two rows with different text); the contents
    line at the top names every section, training and operating before the source files."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Config reference", 1)[1].split("\n## ", 1)[0]
    firsts = [row.split("|")[1].strip() for row in section.splitlines() if row.startswith("| `")]
    assert len(firsts) == len(set(firsts)), [k for k in firsts if firsts.count(k) > 1]
    sections = re.findall(r"^## (.+)$", readme, re.M)
    contents = readme.split("**Contents.**", 1)[1].split("\n\n", 1)[0]
    assert all(f"[{s.split(' (')[0]}]" in contents for s in sections), sections
    assert sections.index("Operating a cluster") < sections.index("Layout")
    assert sections.index("Training on the cluster") < sections.index("Layout")
