"""The settings text the nodes apply, parsed as the bootstrap's apply_settings does (templates/steps/settings.sh.j2),
with infra/settings_schema.py's patterns: a test runs both on the same texts. Also the pacing the text gives."""

from __future__ import annotations

import re
from typing import Dict, List, NamedTuple, Union

from infra.settings_schema import OPTIONAL_DEFAULTS, PATTERNS, REPEATED, SettingsError, check, check_scheduler

Settings = Dict[str, Union[str, List[str]]]
LINE = re.compile(r"([A-Z][A-Z0-9_]*)=(.*)")


def parse(text: str) -> Settings:
    """Every KEY=VALUE line checked; an unknown key, a bad value, a key given twice or missing refuses the whole
    text (SettingsError naming the key). Optional keys left out take their defaults; repeated keys are lists."""
    seen: Dict[str, str] = {}
    lists: Dict[str, List[str]] = {key: [] for key in REPEATED}
    for line in text.split("\n"):
        if not line:
            continue
        m = LINE.fullmatch(line)
        if not m:
            raise SettingsError(f"settings: {line[:80]!r} is not KEY=VALUE")
        key, value = m.group(1), m.group(2)
        check(key, value)
        if key in REPEATED:
            lists[key].append(value)
        elif key in seen:
            raise SettingsError(f"settings: {key} is given twice")
        else:
            seen[key] = value
    missing = [k for k in PATTERNS if k not in REPEATED and k not in OPTIONAL_DEFAULTS and k not in seen]
    if missing:
        raise SettingsError(f"settings: {missing[0]} is missing")
    check_scheduler(set(seen), seen.get("SCHEDULER"))
    out: Settings = dict(OPTIONAL_DEFAULTS)
    out.update(seen)
    out.update(lists)
    return out


class Pacing(NamedTuple):
    """What the settings say about the node's AWS calls (infra/bootstrap_pacing.py explains the arithmetic)."""

    interval_ms: int  # least time between two AWS calls of this node
    backoff_seconds: int  # first retry delay; doubles, at most 60 s
    attempts: int
    sync_seconds: int  # the agent's tick, plus up to a quarter of it again of jitter


def pacing(settings: Settings) -> Pacing:
    return Pacing(int(str(settings["API_INTERVAL_MS"])), int(str(settings["API_BACKOFF_SECONDS"])),
                  int(str(settings["API_ATTEMPTS"])), int(str(settings["SYNC_SECONDS"])))
