"""The policy pack's rules: every example passes; a graph broken in one place fails that rule, with its message."""

import base64
import copy
import json

import pytest

from policy.rules import RULES, check

RULE_NAMES = {r.name for r in RULES}


def _graph(planned):
    result, _ = planned
    return copy.deepcopy([{"type": r["type"], "name": r["name"], "inputs": r["inputs"]} for r in result.resources])


def test_every_example_passes_every_rule(planned):
    assert check(_graph(planned)) == {}


def _first(graph, token, pred=lambda r: True):
    return next(r for r in graph if r["type"] == token and pred(r))


def _compute_lt(graph):
    return _first(graph, "aws:ec2/launchTemplate:LaunchTemplate", lambda r: r["name"].endswith("compute-lt"))


def break_imds(g):
    _compute_lt(g)["inputs"]["metadataOptions"]["httpTokens"] = "optional"


def break_encryption(g):
    _compute_lt(g)["inputs"]["blockDeviceMappings"][0]["ebs"]["encrypted"] = "false"


def break_world_ingress(g):
    rule = _first(g, "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", lambda r: "lustre-in" in r["name"])
    rule["inputs"].pop("referencedSecurityGroupId", None)
    rule["inputs"]["cidrIpv4"] = "0.0.0.0/0"


def break_public_compute(g):
    _compute_lt(g)["inputs"]["networkInterfaces"][0]["associatePublicIpAddress"] = "true"


def break_efa_egress(g):
    g[:] = [r for r in g if not r["name"].endswith("-efa-out")]


def break_iam_star(g):
    policy = _first(g, "aws:iam/rolePolicy:RolePolicy")
    doc = json.loads(policy["inputs"]["policy"])
    doc["Statement"].append({"Effect": "Allow", "Action": "*", "Resource": "*"})
    policy["inputs"]["policy"] = json.dumps(doc)


def break_iam_other_cluster(g):
    policy = _first(g, "aws:iam/rolePolicy:RolePolicy")
    doc = json.loads(policy["inputs"]["policy"])
    doc["Statement"][0]["Resource"].append("arn:aws:ssm:us-east-1:123456789012:parameter/hpcc/someone-else/*")
    policy["inputs"]["policy"] = json.dumps(doc)


def break_user_data(g):
    lt = _compute_lt(g)
    script = "#!/bin/bash\ncat > /root/.ssh/id <<'K'\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn...\nK\n"
    lt["inputs"]["userData"] = base64.b64encode(script.encode()).decode()


BREAKS = [
    ("imdsv2-required", break_imds, "httpTokens"),
    ("volumes-encrypted", break_encryption, "encrypted must be true"),
    ("no-world-ingress", break_world_ingress, "whole internet"),
    ("compute-nodes-private", break_public_compute, "public IP"),
    ("efa-group-self-referencing", break_efa_egress, "both from and to itself"),
    ("iam-least-privilege", break_iam_star, "every action on every resource"),
    ("iam-least-privilege", break_iam_other_cluster, "someone-else"),
    ("no-secrets-in-user-data", break_user_data, "secret material"),
]


@pytest.mark.parametrize("rule,breaker,words", BREAKS, ids=[f"{b[0]}:{b[1].__name__}" for b in BREAKS])
def test_a_broken_graph_fails_the_rule_with_its_message(planned, rule, breaker, words):
    graph = _graph(planned)
    breaker(graph)
    found = check(graph)
    assert set(found) == {rule}, found
    assert any(words in m for m in found[rule]), found[rule]


def test_every_rule_has_a_breaking_case():
    assert {b[0] for b in BREAKS} == RULE_NAMES


def test_policy_pack_declares_every_rule_as_mandatory():
    text = open("policy/__main__.py").read()
    assert "EnforcementLevel.MANDATORY" in text and "for rule in RULES" in text
