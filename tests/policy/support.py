"""AmazonSSMManagedInstanceCore allows ssm:GetParameter(s) on every parameter in the account; the nodes' inline
policy (infra/program/components/identity.py) carries the Deny below to narrow reads to the cluster's prefix. The policy
tests use these helpers to take that Deny away from, or give it back to, a recorded graph.
"""

import json
import re

ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
KNOWN_GAP = "ssm:GetParameter, ssm:GetParameters on * through AmazonSSMManagedInstanceCore"


def deny_outside(own_parameter_arn: str) -> dict:
    """The statement identity.py's node_policy needs (own_parameter_arn: ...:parameter/hpcc/<cluster>)."""
    return {
        "Sid": "OnlyClusterParameters",
        "Effect": "Deny",
        "Action": ["ssm:GetParameter", "ssm:GetParameters", "ssm:GetParametersByPath", "ssm:GetParameterHistory"],
        "NotResource": [own_parameter_arn, f"{own_parameter_arn}/*"],
    }


def identity_fix(graph: list[dict]) -> list[dict]:
    """Add the Deny to the nodes' inline policy in a list of records, unless a Deny is already there."""
    for policy in (r for r in graph if r["type"] == ROLE_POLICY):
        doc = json.loads(policy["inputs"]["policy"])
        if any(s.get("Effect") == "Deny" for s in doc["Statement"]):
            continue
        own = next(t for s in doc["Statement"] for t in s["Resource"] if re.search(r":parameter/hpcc/[^/]+$", t))
        doc["Statement"].append(deny_outside(own))
        policy["inputs"] = dict(policy["inputs"], policy=json.dumps(doc))
    return graph
