"""Checks on a cluster config: one small rule per check, each returning Findings.

`config_rules` need only the config; AWS-backed checks (preflight) live beside them and use
the same Finding type so every report looks alike.
"""

from infra.validators.findings import ERROR, INFO, WARNING, Finding
from infra.validators.config_rules import RULES as CONFIG_RULES


def check_config(cfg) -> list[Finding]:
    findings: list[Finding] = []
    for rule in CONFIG_RULES:
        findings.extend(rule(cfg))
    return findings


__all__ = ["ERROR", "WARNING", "INFO", "Finding", "check_config", "CONFIG_RULES"]
