"""All the config rules together: `config_rules`, `metrics` (the observability section's) and `containers` (the
containers section's) need only the config (parsing runs them, with no AWS); `type_rules` need the instance types'
facts, so they run only when `facts` is given (the program, preflight, tests)."""

from __future__ import annotations

from infra.config.validators import config_rules, containers, metrics
from infra.config.validators.findings import Finding
from infra.config.validators.type_rules import type_findings

CONFIG_RULES = [*config_rules.RULES, *metrics.RULES, *containers.RULES]


def check_config(cfg, facts=None) -> list[Finding]:
    """The config rules; with `facts` (`.get(name, field)`, infra/facts/instance_types.py) the type rules too."""
    findings: list[Finding] = []
    for rule in CONFIG_RULES:
        findings.extend(rule(cfg))
    if facts is not None:
        findings.extend(type_findings(cfg, facts))
    return findings
