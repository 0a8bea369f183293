"""The policy pack's policies, built from the rule table in rules.py. Kept apart from __main__.py because
constructing a PolicyPack starts its gRPC server and never returns; the tests import this module instead.

- Each rule's per-resource check is a ResourceValidationPolicy: the engine calls it with the resource's inputs
  before creating or updating it, so a mandatory violation stops `pulumi up` before anything bad exists.
- Each rule's graph check is a StackValidationPolicy (`<rule>-graph`): it runs over every resource's outputs
  once the stack is known (after the update; during preview it is skipped where values are still unknown).

`args.props` are the provider's wire names (camelCase) wrapped in read-only proxies; `records.normalise` turns
them (or snake_case keys, should an engine send those) into the plain records the rules read (records.py).
"""

from __future__ import annotations

from pulumi_policy import EnforcementLevel, ResourceValidationPolicy, StackValidationPolicy

if __package__:  # imported as the package `policy` (the tests)
    from . import records, rules
else:  # loaded by the Pulumi engine as a script directory (__main__.py puts it on sys.path)
    import records  # type: ignore[no-redef]
    import rules  # type: ignore[no-redef]


def record(resource) -> dict:
    """A pulumi-policy PolicyResource as the rules' record."""
    return {
        "type": resource.resource_type,
        "name": resource.name,
        "urn": resource.urn,
        "parent": resource.parent.name if getattr(resource, "parent", None) is not None else None,
        "dependsOn": [d.name for d in getattr(resource, "dependencies", None) or []],
        "inputs": records.normalise(resource.props),
    }


def _resource_policy(rule: rules.Rule) -> ResourceValidationPolicy:
    def validate(args, report_violation):
        for message in rule.resource_check(args.resource_type, records.normalise(args.props)):
            report_violation(message)

    return ResourceValidationPolicy(
        name=rule.name, description=rule.description, validate=validate, enforcement_level=EnforcementLevel.MANDATORY
    )


def _stack_policy(rule: rules.Rule) -> StackValidationPolicy:
    def validate(args, report_violation):
        graph = [record(r) for r in args.resources]
        urns = {r["name"]: r["urn"] for r in graph}
        for message in rule.graph_check(graph):
            report_violation(message, urns.get(message.split(":", 1)[0]))

    return StackValidationPolicy(
        name=f"{rule.name}-graph",
        description=rule.description,
        validate=validate,
        enforcement_level=EnforcementLevel.MANDATORY,
    )


def policies() -> list:
    out = []
    for rule in rules.RULES:
        if rule.resource_check is not None:
            out.append(_resource_policy(rule))
        if rule.graph_check is not None:
            out.append(_stack_policy(rule))
    return out
