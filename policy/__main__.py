"""hpcc's policy pack: `pulumi up --policy-pack policy`. The rules live in rules.py and also run offline."""

import sys
from pathlib import Path

from pulumi_policy import EnforcementLevel, PolicyPack, StackValidationPolicy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rules import RULES  # noqa: E402


def _policy(rule):
    def validate(args, report_violation):
        graph = [{"type": r.resource_type, "name": r.name, "inputs": dict(r.props)} for r in args.resources]
        for message in rule.check(graph):
            report_violation(message)

    return StackValidationPolicy(name=rule.name, description=rule.description, validate=validate,
                                 enforcement_level=EnforcementLevel.MANDATORY)


PolicyPack(name="hpcc", enforcement_level=EnforcementLevel.MANDATORY, policies=[_policy(rule) for rule in RULES])
