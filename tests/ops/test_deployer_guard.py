"""The Deny shipped for every principal but the deployer (policy/only-the-deployer-writes.json, infra/ops/
deployer_guard.py guard_policy; issue 33, finding 9): each write to what the controller and the nodes trust, on the
planned cluster's own resources, is denied to any other principal, the deployer and the nodes' roles exempt. No IAM
evaluator runs here: the statements are matched as IAM matches them (wildcards in actions, case-insensitive, and in
resources), with the planned ARNs."""

from __future__ import annotations

import fnmatch
import json

import pytest
from typer.testing import CliRunner

from hpcc_contract.names import Paths, bundle_bucket, ledger_table, role_name, state_bucket
from infra.ops.cli import app
from infra.ops.deployer_guard import GUARDED, guard_policy, render_guard, shipped_guard
from policy.write_rules import NEVER

ACCOUNT, DEPLOYER = "123456789012", "platform-deployer"
C = "llm"
REGION = "us-east-1"
LEDGER = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{ledger_table(C)}"
STATE = f"arn:aws:s3:::{state_bucket(C, ACCOUNT)}"
BUNDLES = f"arn:aws:s3:::{bundle_bucket(C, ACCOUNT)}"
WRITES = [
    ("dynamodb:PutItem", LEDGER),
    ("dynamodb:UpdateItem", LEDGER),
    ("dynamodb:DeleteItem", LEDGER),
    ("dynamodb:BatchWriteItem", LEDGER),
    ("dynamodb:PartiQLUpdate", LEDGER),
    ("dynamodb:DeleteTable", LEDGER),
    ("s3:PutObject", f"{STATE}/membership.json"),
    ("s3:PutObject", f"{STATE}/status/arn:aws:ec2:x.json"),
    ("s3:PutObject", f"{STATE}/certs/gpu-000.json"),
    ("s3:DeleteObject", f"{STATE}/membership.json"),
    ("s3:PutBucketPolicy", STATE),
    ("s3:DeleteBucketPolicy", STATE),
    ("s3:PutObject", f"{BUNDLES}/bundles/x.tar.gz"),
    ("ssm:PutParameter", f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter{Paths(C).settings}"),
    ("ssm:PutParameter", f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter{Paths(C).groups}"),
    (
        "secretsmanager:PutSecretValue",
        f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{Paths(C).host_ca_secret}-AbCdEf",
    ),
    # a rotation Lambda of someone else's choosing would write the key
    (
        "secretsmanager:RotateSecret",
        f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{Paths(C).host_ca_secret}-AbCdEf",
    ),
    ("s3:ReplicateObject", f"{BUNDLES}/bundles/x.tar.gz"),  # a replication rule of another bucket writing here
    # a role named like the nodes' is exempt from every statement: nobody else makes one, or changes or passes one
    ("iam:CreateRole", f"arn:aws:iam::{ACCOUNT}:role/hpcc-anything"),
    ("iam:UpdateAssumeRolePolicy", f"arn:aws:iam::{ACCOUNT}:role/{role_name(C, 'compute')}"),
    ("iam:PutRolePolicy", f"arn:aws:iam::{ACCOUNT}:role/{role_name(C, 'head')}"),
    ("iam:AttachRolePolicy", f"arn:aws:iam::{ACCOUNT}:role/{role_name(C, 'head')}"),
    ("iam:PassRole", f"arn:aws:iam::{ACCOUNT}:role/{role_name(C, 'head')}"),
    ("iam:AddRoleToInstanceProfile", f"arn:aws:iam::{ACCOUNT}:instance-profile/{role_name(C, 'compute')}"),
]
# What the policy pack never lets a node role do (policy/write_rules.py NEVER) that this Deny leaves to IAM, and why.
NOT_GUARDED = {
    "iam:CreateAccessKey": "keys are a user's, and no hpcc principal is a user",
    "iam:CreatePolicyVersion": "the nodes' policies are inline (iam:PutRolePolicy, guarded)",
    "secretsmanager:ReplicateSecretToRegions": "a replica is read-only and in another Region: no node reads it",
}


def deny_for(policy: dict, action: str, resource: str) -> list[dict]:
    return [
        s
        for s in policy["Statement"]
        if s["Effect"] == "Deny"
        and any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in s["Action"])
        and any(
            fnmatch.fnmatchcase(resource, r)
            for r in ([s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"])
        )
    ]


def exempt(statement: dict) -> list[str]:
    return statement["Condition"]["ArnNotLike"]["aws:PrincipalArn"]


@pytest.mark.parametrize("action, resource", WRITES)
def test_every_write_the_cluster_trusts_is_denied_to_all_but_the_deployer_and_the_node_roles(action, resource):
    policy = guard_policy(ACCOUNT, DEPLOYER)
    denies = deny_for(policy, action, resource)
    assert denies, f"{action} on {resource} is not denied"
    assert all(
        exempt(s) == [f"arn:aws:iam::{ACCOUNT}:role/{DEPLOYER}", f"arn:aws:iam::{ACCOUNT}:role/hpcc-*"] for s in denies
    )


def test_what_no_node_role_may_do_nobody_else_may_do_either():
    """The pack's NEVER (what no node role may be allowed) and this Deny name the same writes: each NEVER action is
    guarded here too, or left to IAM for the reason NOT_GUARDED gives."""
    guarded = {a for _, actions, _ in GUARDED for a in actions}
    assert [a for a in NEVER if a not in guarded and a not in NOT_GUARDED] == []
    assert [a for a in NOT_GUARDED if a not in NEVER or a in guarded] == []


def test_hpcc_tags_are_the_deployers_and_the_nodes_alone():
    """The controller finds its instances by hpcc:cluster (and names by hpcc:node): nobody else tags with hpcc:*,
    at launch (tag-on-create is ec2:CreateTags too) or after."""
    policy = guard_policy(ACCOUNT, DEPLOYER)
    for action in ("ec2:CreateTags", "ec2:DeleteTags"):
        [deny] = deny_for(policy, action, f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0abc")
        assert deny["Condition"]["ForAnyValue:StringLike"] == {"aws:TagKeys": ["hpcc:*"]}
        assert exempt(deny)[0] == f"arn:aws:iam::{ACCOUNT}:role/{DEPLOYER}"


def test_the_shipped_file_is_the_generated_one_and_the_command_prints_it():
    assert shipped_guard() == render_guard(), (
        "policy/only-the-deployer-writes.json is stale: python -m infra.ops.deployer_policy"
    )
    assert (
        json.loads(shipped_guard())["Statement"][0]["Condition"]["ArnNotLike"]["aws:PrincipalArn"][0]
        == "arn:aws:iam::<account>:role/<deploying role>"
    )
    out = CliRunner().invoke(app, ["deployer-policy", "--guard", "--account", ACCOUNT, "--deployer-role", DEPLOYER])
    assert out.exit_code == 0 and json.loads(out.output) == guard_policy(ACCOUNT, DEPLOYER)
    assert json.loads(CliRunner().invoke(app, ["deployer-policy", "--guard"]).output) == json.loads(shipped_guard())
    # IAM: a managed policy is at most 6,144 characters, whitespace not counted (an SCP 5,120)
    assert len(json.dumps(guard_policy(ACCOUNT, DEPLOYER), separators=(",", ":"))) <= 5120
