"""The Deny to attach to every principal but the deployer (docs/security.md, "Only the deployer writes"; issue 33):
what the controller and the nodes trust (the parameters and secrets, the ledger tables, the state and bundle
buckets, the hpcc:* tags) is written by the deploying role and the nodes' own roles only. Shipped as
policy/only-the-deployer-writes.json (`python -m infra.ops.deployer_policy` re-writes it; `hpcc deployer-policy
--guard` prints it, filled in with --account and --deployer-role). IAM's policy evaluation: a Deny binds whatever
else allows (IAM User Guide, "Policy evaluation logic").
"""

from __future__ import annotations

import json

from infra.render.assets import asset

# What the nodes trust and only the deployer and the nodes' own roles may write (issue 33, docs/security.md "Only
# the deployer writes"): shipped as policy/only-the-deployer-writes.json, to attach to every other principal (an
# SCP, a permission boundary, or their own policies). A Deny binds whatever else allows.
GUARD_FILE = "only-the-deployer-writes.json"
GUARDED: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    # the settings, hosts, FSx, groups, bundle and rotation parameters: root on every node
    (
        "OnlyTheDeployerWritesHpccParameters",
        (
            "ssm:PutParameter",
            "ssm:DeleteParameter",
            "ssm:DeleteParameters",
            "ssm:LabelParameterVersion",
            "ssm:UnlabelParameterVersion",
            "ssm:AddTagsToResource",
            "ssm:RemoveTagsFromResource",
        ),
        ("arn:aws:ssm:*:{account}:parameter/hpcc/*",),
    ),
    # the cluster, login-user and munge keys and the host CA
    (
        "OnlyTheDeployerWritesHpccSecrets",
        (
            "secretsmanager:PutSecretValue",
            "secretsmanager:CreateSecret",
            "secretsmanager:RotateSecret",
            "secretsmanager:UpdateSecret",
            "secretsmanager:DeleteSecret",
            "secretsmanager:UpdateSecretVersionStage",
            "secretsmanager:RestoreSecret",
            "secretsmanager:PutResourcePolicy",
            "secretsmanager:DeleteResourcePolicy",
            "secretsmanager:TagResource",
            "secretsmanager:UntagResource",
        ),
        ("arn:aws:secretsmanager:*:{account}:secret:hpcc/*",),
    ),
    # the controller's ledger: slots, launches, requested replacements (hpcc replace)
    (
        "OnlyTheDeployerWritesHpccLedgers",
        (
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:DeleteItem",
            "dynamodb:BatchWriteItem",
            "dynamodb:PartiQLInsert",
            "dynamodb:PartiQLUpdate",
            "dynamodb:PartiQLDelete",
            "dynamodb:UpdateTable",
            "dynamodb:DeleteTable",
        ),
        ("arn:aws:dynamodb:*:{account}:table/hpcc-*-ledger",),
    ),
    # the state bucket (membership, statuses, host keys and certificates) and the bundle bucket (what nodes run)
    (
        "OnlyTheDeployerWritesHpccBuckets",
        (
            "s3:PutObject",
            "s3:DeleteObject",
            "s3:DeleteObjectVersion",
            "s3:PutObjectAcl",
            "s3:PutObjectTagging",
            "s3:RestoreObject",
            "s3:ReplicateObject",
            "s3:ReplicateDelete",
            "s3:ReplicateTags",
            "s3:PutBucketPolicy",
            "s3:DeleteBucketPolicy",
            "s3:PutBucketAcl",
            "s3:PutBucketVersioning",
            "s3:PutLifecycleConfiguration",
            "s3:PutBucketPublicAccessBlock",
            "s3:PutEncryptionConfiguration",
            "s3:DeleteBucket",
        ),
        (
            "arn:aws:s3:::hpcc-*-state-{account}",
            "arn:aws:s3:::hpcc-*-state-{account}/*",
            "arn:aws:s3:::hpcc-*-bundles-{account}",
            "arn:aws:s3:::hpcc-*-bundles-{account}/*",
        ),
    ),
    # the nodes' roles and instance profiles: every statement exempts `role/hpcc-*`, so whoever could create one
    # of that name, change who may assume one or what one may do, or pass one to an instance of theirs would be
    # exempt from all the rest
    (
        "OnlyTheDeployerChangesHpccRoles",
        (
            "iam:CreateRole",
            "iam:DeleteRole",
            "iam:UpdateRole",
            "iam:UpdateAssumeRolePolicy",
            "iam:PutRolePolicy",
            "iam:DeleteRolePolicy",
            "iam:AttachRolePolicy",
            "iam:DetachRolePolicy",
            "iam:PutRolePermissionsBoundary",
            "iam:DeleteRolePermissionsBoundary",
            "iam:TagRole",
            "iam:UntagRole",
            "iam:PassRole",
            "iam:CreateInstanceProfile",
            "iam:DeleteInstanceProfile",
            "iam:AddRoleToInstanceProfile",
            "iam:RemoveRoleFromInstanceProfile",
        ),
        ("arn:aws:iam::{account}:role/hpcc-*", "arn:aws:iam::{account}:instance-profile/hpcc-*"),
    ),
)
TAG_WRITES = ("ec2:CreateTags", "ec2:DeleteTags")  # at launch too: tag-on-create is authorized as ec2:CreateTags


def guard_policy(account: str = "<account>", deployer: str = "<deploying role>") -> dict:
    """The Deny of every write to what the nodes and the controller trust, for every principal but the deploying
    role and the nodes' own (`hpcc-*`, which write only their own part: the policy pack's node-writes-own-only):
    the parameters and secrets, the ledger tables, the state and bundle buckets, the nodes' roles themselves (their
    name is the exemption), and any `hpcc:*` tag (the controller finds its instances by hpcc:cluster, and `hpcc
    check fabric` reads names from hpcc:node)."""
    exempt = {
        "ArnNotLike": {
            "aws:PrincipalArn": [f"arn:aws:iam::{account}:role/{deployer}", f"arn:aws:iam::{account}:role/hpcc-*"]
        }
    }
    statements = [
        {
            "Sid": sid,
            "Effect": "Deny",
            "Action": list(actions),
            "Resource": [r.format(account=account) for r in resources],
            "Condition": exempt,
        }
        for sid, actions, resources in GUARDED
    ]
    statements.append(
        {
            "Sid": "OnlyTheDeployerWritesHpccTags",
            "Effect": "Deny",
            "Action": list(TAG_WRITES),
            "Resource": "*",
            "Condition": {**exempt, "ForAnyValue:StringLike": {"aws:TagKeys": ["hpcc:*"]}},
        }
    )
    return {"Version": "2012-10-17", "Statement": statements}


def render_guard(account: str = "<account>", deployer: str = "<deploying role>") -> str:
    return json.dumps(guard_policy(account, deployer), indent=2) + "\n"


def shipped_guard() -> str:
    """policy/only-the-deployer-writes.json (`hpcc deployer-policy --guard` prints it)."""
    return (asset("policy") / GUARD_FILE).read_text()
