"""The settings text the nodes apply, parsed as the bootstrap's apply_settings does (templates/steps/settings.sh.j2),
with hpcc_contract/settings.py's patterns: a test runs both on the same texts. Also the pacing the text gives."""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Tuple, Union

from hpcc_contract.names import ledger_table, state_bucket
from hpcc_contract.settings import OPTIONAL_DEFAULTS, REPEATED, parse_text

Settings = Dict[str, Union[str, List[str]]]


def parse(text: str) -> Settings:
    """The schema's parse (every rule the nodes keep; SettingsError naming the key) as the agent uses it: optional
    keys left out take their defaults, repeated keys are lists, the others single values."""
    found = parse_text(text)
    out: Settings = dict(OPTIONAL_DEFAULTS)
    out.update({key: values if key in REPEATED else values[0] for key, values in found.items()})
    for key in REPEATED:
        out.setdefault(key, [])
    return out


class Pacing(NamedTuple):
    """What the settings say about the node's AWS calls (infra/render/pacing.py explains the arithmetic)."""

    interval_ms: int  # least time between two AWS calls of this node
    backoff_seconds: int  # first retry delay; doubles, at most 60 s
    attempts: int
    sync_seconds: int  # the agent's tick, plus up to a quarter of it again of jitter


def pacing(settings: Settings) -> Pacing:
    return Pacing(
        int(str(settings["API_INTERVAL_MS"])),
        int(str(settings["API_BACKOFF_SECONDS"])),
        int(str(settings["API_ATTEMPTS"])),
        int(str(settings["SYNC_SECONDS"])),
    )


def state_names(text: str, cluster: str, account: str) -> Tuple[str, str]:
    """(state bucket, ledger table): the settings' STATE_BUCKET and LEDGER_TABLE, else the program's names for them
    (hpcc_contract/names.py state_bucket, ledger_table). Read from the text's lines alone, so
    a settings text this bundle's schema does not know yet still names them. identify.sh.j2's state_bucket is the
    bash side (a test runs both)."""
    found: Dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key in ("STATE_BUCKET", "LEDGER_TABLE") and value:
            found[key] = value
    return found.get("STATE_BUCKET", state_bucket(cluster, account)), found.get("LEDGER_TABLE", ledger_table(cluster))
