"""Checks on a cluster config: one small rule per check, each returning Findings.

`config_rules` need only the config (parsing runs them, with no AWS); `type_rules` need the instance types'
facts, so they run only when `facts` is given (the program, preflight, tests). The AWS-backed checks
(preflight, in infra/ops/preflight/rules.py) use the same Finding type so every report looks alike.
"""

from infra.config.validators.findings import ERROR, INFO, WARNING, Finding
from infra.config.validators.config_rules import RULES as CONFIG_RULES
from infra.config.validators.type_rules import TYPE_RULES, type_findings


def check_config(cfg, facts=None) -> list[Finding]:
    """The config rules; with `facts` (`.get(name, field)`, infra/facts/instance_types.py) the type rules too."""
    findings: list[Finding] = []
    for rule in CONFIG_RULES:
        findings.extend(rule(cfg))
    if facts is not None:
        findings.extend(type_findings(cfg, facts))
    return findings


__all__ = ["ERROR", "WARNING", "INFO", "Finding", "check_config", "CONFIG_RULES", "TYPE_RULES"]
