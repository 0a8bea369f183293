"""The one known gap between the program and the policy, shared by the policy and fuzz tests.

infra/components/identity.py attaches AmazonSSMManagedInstanceCore, which allows ssm:GetParameter and
ssm:GetParameters on every parameter in the account, and the nodes' inline policy has no Deny narrowing that to
the cluster's prefix: the nodes' role can read other clusters' (and anyone's) parameters. `iam-least-privilege`
reports it on every plan. Until identity.py adds the Deny below, the tests add it to a recorded graph with
`identity_fix` and check everything else; tests/test_policy.py::test_examples_need_no_identity_fix is a strict
xfail that turns into a failure once the program carries the fix, so this module can then be deleted.
"""

import json
import re

ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
KNOWN_GAP = "ssm:GetParameter, ssm:GetParameters on * through AmazonSSMManagedInstanceCore"


def deny_outside(own_parameter_arn: str) -> dict:
    """The statement identity.py's node_policy needs (own_parameter_arn: ...:parameter/hpcc/<cluster>)."""
    return {"Sid": "OnlyClusterParameters", "Effect": "Deny",
            "Action": ["ssm:GetParameter", "ssm:GetParameters", "ssm:GetParametersByPath", "ssm:GetParameterHistory"],
            "NotResource": [own_parameter_arn, f"{own_parameter_arn}/*"]}


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
