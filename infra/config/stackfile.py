"""Read a Pulumi stack config file (Pulumi.<stack>.yaml) the way `pulumi up` would see it."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import yaml

from infra.config.hooks import absolute
from infra.config.model import StackConfig
from infra.config.parse import ConfigError, parse


def read_raw(path: str | Path) -> dict:
    """The file's `config:` map; ConfigError for anything that is not a readable stack file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError([(str(p), f"cannot read the stack config: {e.strerror or e}")]) from None
    except UnicodeDecodeError as e:
        raise ConfigError([(str(p), f"is not UTF-8 text (byte {e.start}); save the stack config as UTF-8")]) from None
    try:
        doc = yaml.safe_load(text)
    except RecursionError:
        raise ConfigError([(str(p), "nests too deeply to be a stack config; compare it with examples/")]) from None
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        raise ConfigError([(str(p), f"is not valid YAML{at}: {getattr(e, 'problem', None) or e}")]) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
        raise ConfigError(
            [(str(p), "needs a top-level `config:` map with aws:region and hpcc:cluster, as in examples/")]
        )
    config = doc["config"]
    unknown = sorted(
        k
        for k in config
        if not str(k).startswith(("aws:", "hpcc:")) or (str(k).startswith("hpcc:") and k != "hpcc:cluster")
    )
    if unknown:
        raise ConfigError([(str(k), _unknown(str(k))) for k in unknown])
    return absolute(config, p.resolve().parent)


KEYS = ("aws:region", "hpcc:cluster")


def _unknown(key: str) -> str:
    """An unknown top-level key's message: the closest key hpcc reads (`hpcc:clustr` -> hpcc:cluster), if any."""
    close = difflib.get_close_matches(key, KEYS, n=1, cutoff=0.6)
    return f"unknown key; did you mean {close[0]}?" if close else "unknown key; hpcc reads aws:region and hpcc:cluster"


def load(path: str | Path) -> StackConfig:
    config = read_raw(path)
    return parse(config.get("aws:region"), config.get("hpcc:cluster"))


def as_pulumi_config(config: dict) -> dict[str, str]:
    """Config values as the Pulumi engine hands them to a program: structured values as JSON strings, which
    pulumi.Config.get_object parses (as it does `pulumi config set --path` maps). Used by `hpcc up` (the stack's
    config) and `hpcc plan` (the mocked runtime's), so both runs of the program see the same values."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}
