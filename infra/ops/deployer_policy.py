"""The IAM policy the identity running `hpcc up` needs: built from the resource types the program creates.

Each Pulumi type maps to the API calls the AWS provider makes to create, update, tag and delete it (terraform-
provider-aws, which pulumi-aws wraps); IAM, SSM and Secrets Manager writes are scoped to hpcc's own names
(hpcc_contract/names.py: roles and profiles `hpcc-*`, parameters `/hpcc/*`, secrets `hpcc/*`), PassRole to EC2 only.
Reads (Describe*, the public DLAMI parameters, prices, quotas) cannot be scoped by resource in IAM and are
read-only. Shipped as policy/deployer-policy.json (`hpcc deployer-policy` prints it; the Deny for every other
principal is infra/ops/deployer_guard.py's); tests/ops/test_examples.py
checks the file against this function and every type the plan creates. IAM's JSON grammar:
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_grammar.html
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from infra.render.assets import asset

FILE = "deployer-policy.json"

EC2_TAGS = ("ec2:CreateTags", "ec2:DeleteTags")
DYNAMIC = "pulumi-python:dynamic:Resource"
# Pulumi type -> the calls its create, update and delete make (beyond the read-only statement below).
WRITES: dict[str, tuple[str, ...]] = {
    "aws:ec2/vpc:Vpc": ("ec2:CreateVpc", "ec2:DeleteVpc", "ec2:ModifyVpcAttribute", *EC2_TAGS),
    "aws:ec2/subnet:Subnet": ("ec2:CreateSubnet", "ec2:DeleteSubnet", "ec2:ModifySubnetAttribute", *EC2_TAGS),
    "aws:ec2/internetGateway:InternetGateway": (
        "ec2:CreateInternetGateway",
        "ec2:AttachInternetGateway",
        "ec2:DetachInternetGateway",
        "ec2:DeleteInternetGateway",
        *EC2_TAGS,
    ),
    "aws:ec2/eip:Eip": ("ec2:AllocateAddress", "ec2:ReleaseAddress", "ec2:DisassociateAddress", *EC2_TAGS),
    "aws:ec2/natGateway:NatGateway": ("ec2:CreateNatGateway", "ec2:DeleteNatGateway", *EC2_TAGS),
    "aws:ec2/routeTable:RouteTable": ("ec2:CreateRouteTable", "ec2:DeleteRouteTable", *EC2_TAGS),
    "aws:ec2/route:Route": ("ec2:CreateRoute", "ec2:ReplaceRoute", "ec2:DeleteRoute"),
    "aws:ec2/routeTableAssociation:RouteTableAssociation": (
        "ec2:AssociateRouteTable",
        "ec2:DisassociateRouteTable",
        "ec2:ReplaceRouteTableAssociation",
    ),
    "aws:ec2/vpcEndpoint:VpcEndpoint": (
        "ec2:CreateVpcEndpoint",
        "ec2:ModifyVpcEndpoint",
        "ec2:DeleteVpcEndpoints",
        *EC2_TAGS,
    ),
    "aws:ec2/securityGroup:SecurityGroup": (
        "ec2:CreateSecurityGroup",
        "ec2:DeleteSecurityGroup",
        "ec2:RevokeSecurityGroupEgress",
        "ec2:RevokeSecurityGroupIngress",
        *EC2_TAGS,
    ),
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": (
        "ec2:AuthorizeSecurityGroupIngress",
        "ec2:RevokeSecurityGroupIngress",
        "ec2:ModifySecurityGroupRules",
        "ec2:UpdateSecurityGroupRuleDescriptionsIngress",
        *EC2_TAGS,
    ),
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": (
        "ec2:AuthorizeSecurityGroupEgress",
        "ec2:RevokeSecurityGroupEgress",
        "ec2:ModifySecurityGroupRules",
        "ec2:UpdateSecurityGroupRuleDescriptionsEgress",
        *EC2_TAGS,
    ),
    "aws:ec2/placementGroup:PlacementGroup": ("ec2:CreatePlacementGroup", "ec2:DeletePlacementGroup", *EC2_TAGS),
    "aws:ec2/launchTemplate:LaunchTemplate": (
        "ec2:CreateLaunchTemplate",
        "ec2:CreateLaunchTemplateVersion",
        "ec2:ModifyLaunchTemplate",
        "ec2:DeleteLaunchTemplate",
        "ec2:DeleteLaunchTemplateVersions",
        *EC2_TAGS,
    ),
    "aws:ec2/instance:Instance": (
        "ec2:RunInstances",
        "ec2:TerminateInstances",
        "ec2:StopInstances",
        "ec2:StartInstances",
        "ec2:ModifyInstanceAttribute",
        "ec2:ModifyInstanceMetadataOptions",
        *EC2_TAGS,
    ),
    "aws:fsx/lustreFileSystem:LustreFileSystem": (
        "fsx:CreateFileSystem",
        "fsx:UpdateFileSystem",
        "fsx:DeleteFileSystem",
        "fsx:TagResource",
        "fsx:UntagResource",
    ),
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": (
        "fsx:CreateDataRepositoryAssociation",
        "fsx:UpdateDataRepositoryAssociation",
        "fsx:DeleteDataRepositoryAssociation",
        "fsx:TagResource",
        "fsx:UntagResource",
    ),
    "aws:iam/role:Role": (
        "iam:CreateRole",
        "iam:DeleteRole",
        "iam:UpdateRole",
        "iam:UpdateAssumeRolePolicy",
        "iam:TagRole",
        "iam:UntagRole",
    ),
    "aws:iam/rolePolicy:RolePolicy": ("iam:PutRolePolicy", "iam:DeleteRolePolicy"),
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": ("iam:AttachRolePolicy", "iam:DetachRolePolicy"),
    "aws:iam/instanceProfile:InstanceProfile": (
        "iam:CreateInstanceProfile",
        "iam:DeleteInstanceProfile",
        "iam:AddRoleToInstanceProfile",
        "iam:RemoveRoleFromInstanceProfile",
        "iam:TagInstanceProfile",
        "iam:UntagInstanceProfile",
    ),
    "aws:secretsmanager/secret:Secret": (
        "secretsmanager:CreateSecret",
        "secretsmanager:UpdateSecret",
        "secretsmanager:DeleteSecret",
        "secretsmanager:TagResource",
        "secretsmanager:UntagResource",
    ),
    "aws:ssm/parameter:Parameter": (
        "ssm:PutParameter",
        "ssm:DeleteParameter",
        "ssm:AddTagsToResource",
        "ssm:RemoveTagsFromResource",
    ),
    # The bundle store (infra/program/components/bundle.py): force_destroy empties the bucket's versions on delete.
    "aws:s3/bucket:Bucket": (
        "s3:CreateBucket",
        "s3:DeleteBucket",
        "s3:PutBucketTagging",
        "s3:ListBucketVersions",
        "s3:DeleteObjectVersion",
        "s3:DeleteObject",
    ),
    "aws:s3/bucketPolicy:BucketPolicy": ("s3:PutBucketPolicy", "s3:DeleteBucketPolicy"),
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": ("s3:PutBucketPublicAccessBlock",),
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": (
        "s3:PutEncryptionConfiguration",
    ),
    "aws:s3/bucketVersioning:BucketVersioning": ("s3:PutBucketVersioning",),
    "aws:s3/bucketObjectv2:BucketObjectv2": ("s3:PutObject", "s3:PutObjectTagging"),
    # The controller's ledger (infra/program/components/state.py).
    "aws:dynamodb/table:Table": (
        "dynamodb:CreateTable",
        "dynamodb:DeleteTable",
        "dynamodb:UpdateTable",
        "dynamodb:UpdateContinuousBackups",
        "dynamodb:TagResource",
        "dynamodb:UntagResource",
    ),
    # A group's resource (infra/program/components/groups.py): its delete terminates the instances the controller
    # launched.
    DYNAMIC: ("ec2:TerminateInstances",),
}
# Calls of the operator commands themselves: reap deletes what a failed destroy left (infra/ops/reap/kinds.py).
# `hpcc replace` and `hpcc status` read and mark a slot in the ledger (scoped to hpcc's tables below); status
# and `up`'s wait read the whole ledger in one Scan (infra/ops/store.py).
OPERATOR_WRITES = (
    "ec2:DetachNetworkInterface",
    "ec2:DeleteNetworkInterface",
    "dynamodb:GetItem",
    "dynamodb:Query",
    "dynamodb:UpdateItem",
    "dynamodb:Scan",
)
# Logging in (README "Real use"): Session Manager to the cluster's instances only, with the session documents
# hpcc prints (a shell as the login user, SSH over SSM); a user may end or resume only their own sessions.
LOGIN_DOCUMENTS = [
    "arn:aws:ssm:*::document/AWS-StartInteractiveCommand",
    "arn:aws:ssm:*::document/AWS-StartSSHSession",
    "arn:aws:ssm:*:*:document/SSM-SessionManagerRunShell",
]
# Where a service's writes may land: hpcc's own names (hpcc_contract/names.py). Services not listed: any resource.
SCOPES: dict[str, list[str]] = {
    "iam": ["arn:aws:iam::*:role/hpcc-*", "arn:aws:iam::*:instance-profile/hpcc-*"],
    "ssm": ["arn:aws:ssm:*:*:parameter/hpcc/*"],
    "secretsmanager": ["arn:aws:secretsmanager:*:*:secret:hpcc/*"],
    "s3": [
        "arn:aws:s3:::hpcc-*-bundles-*",
        "arn:aws:s3:::hpcc-*-bundles-*/*",  # naming.bundle_bucket
        "arn:aws:s3:::hpcc-*-state-*",
        "arn:aws:s3:::hpcc-*-state-*/*",
    ],  # naming.state_bucket
    "dynamodb": ["arn:aws:dynamodb:*:*:table/hpcc-*-ledger"],  # naming.ledger_table
}
# Read-only calls: the provider's refreshes, the program's lookups, preflight, status, reap and destroy's check.
READS = (
    "ec2:Describe*",
    "ec2:GetLaunchTemplateData",
    "fsx:Describe*",
    "fsx:ListTagsForResource",
    "iam:GetRole",
    "iam:GetRolePolicy",
    "iam:GetInstanceProfile",
    "iam:ListRolePolicies",
    "iam:ListAttachedRolePolicies",
    "iam:ListInstanceProfilesForRole",
    "ssm:DescribeParameters",
    "ssm:GetParameter",
    "ssm:GetParameters",
    "ssm:GetParametersByPath",
    "ssm:ListTagsForResource",
    "secretsmanager:DescribeSecret",
    "secretsmanager:GetResourcePolicy",
    "secretsmanager:ListSecrets",
    "s3:GetBucket*",
    "s3:GetEncryptionConfiguration",
    "s3:GetObject*",
    "s3:ListBucket",
    "dynamodb:DescribeTable",
    "dynamodb:DescribeContinuousBackups",
    "dynamodb:DescribeTimeToLive",
    "dynamodb:ListTagsOfResource",
    "pricing:GetProducts",
    "servicequotas:GetServiceQuota",
    "sts:GetCallerIdentity",
)
# The managed policy the nodes' roles get (infra/program/components/identity.py): the SSM agent's.
ATTACHABLE = ["arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"]
# FSx creates its own service-linked roles on first use, and for an S3 link gives its S3 role a policy (as the
# managed policy AmazonFSxFullAccess allows: https://docs.aws.amazon.com/aws-managed-policy/latest/reference/AmazonFSxFullAccess.html).
FSX_SERVICES = ["fsx.amazonaws.com", "s3.data-source.lustre.fsx.amazonaws.com"]
FSX_S3_ROLE = "arn:aws:iam::*:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/*"


def _service(action: str) -> str:
    return action.split(":", 1)[0]


def deployer_policy(types: Iterable[str]) -> dict:
    """The policy document for a program that creates these Pulumi types (components are not AWS calls)."""
    types = sorted({t for t in types if t.startswith(("aws:", "aws-native:")) or t == DYNAMIC})
    unknown = [t for t in types if t not in WRITES]
    if unknown:
        raise KeyError(
            f"no IAM actions known for {', '.join(unknown)}: add them to infra/ops/deployer_policy.py WRITES"
        )
    writes = sorted({a for t in types for a in WRITES[t]} | set(OPERATOR_WRITES))
    by_scope: dict[tuple[str, ...], list[str]] = {}
    for action in writes:
        if action == "iam:AttachRolePolicy" or action == "iam:DetachRolePolicy":
            continue  # below, limited to the one managed policy
        by_scope.setdefault(tuple(SCOPES.get(_service(action), ["*"])), []).append(action)
    statements = [{"Sid": "Read", "Effect": "Allow", "Action": sorted(READS), "Resource": "*"}]
    for resources, actions in sorted(by_scope.items(), key=lambda kv: kv[1][0]):
        sid = (
            "Write"
            if resources == ("*",)
            else ("Write" + _service(actions[0]).title().replace("manager", "Manager").replace("db", "DB") + "Hpcc")
        )
        statements.append(
            {
                "Sid": sid,
                "Effect": "Allow",
                "Action": actions,
                "Resource": list(resources) if len(resources) > 1 else resources[0],
            }
        )
    if "iam:AttachRolePolicy" in writes:
        statements.append(
            {
                "Sid": "AttachSsmCore",
                "Effect": "Allow",
                "Action": ["iam:AttachRolePolicy", "iam:DetachRolePolicy"],
                "Resource": SCOPES["iam"][0],
                "Condition": {"ArnEquals": {"iam:PolicyARN": ATTACHABLE}},
            }
        )
    if any(_service(a) == "iam" for a in writes):
        statements.append(
            {
                "Sid": "PassNodeRoles",
                "Effect": "Allow",
                "Action": "iam:PassRole",
                "Resource": SCOPES["iam"][0],
                "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
            }
        )
    if any(t.startswith("aws:fsx/") for t in types):
        statements.append(
            {
                "Sid": "FsxServiceLinkedRoles",
                "Effect": "Allow",
                "Action": "iam:CreateServiceLinkedRole",
                "Resource": "*",
                "Condition": {"StringEquals": {"iam:AWSServiceName": FSX_SERVICES}},
            }
        )
    if "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation" in types:
        statements.append(
            {
                "Sid": "FsxS3LinkRole",
                "Effect": "Allow",
                "Action": ["iam:AttachRolePolicy", "iam:PutRolePolicy"],
                "Resource": FSX_S3_ROLE,
            }
        )
    statements.append(
        {
            "Sid": "LoginToClusterNodes",
            "Effect": "Allow",
            "Action": "ssm:StartSession",
            "Resource": "arn:aws:ec2:*:*:instance/*",
            "Condition": {"StringLike": {"ssm:resourceTag/hpcc:cluster": "*"}},
        }
    )
    statements.append(
        {"Sid": "LoginDocuments", "Effect": "Allow", "Action": "ssm:StartSession", "Resource": LOGIN_DOCUMENTS}
    )
    statements.append(
        {
            "Sid": "OwnSessions",
            "Effect": "Allow",
            "Action": ["ssm:TerminateSession", "ssm:ResumeSession"],
            "Resource": "arn:aws:ssm:*:*:session/${aws:userid}-*",
        }
    )
    return {"Version": "2012-10-17", "Statement": statements}


def render(types: Iterable[str]) -> str:
    return json.dumps(deployer_policy(types), indent=2) + "\n"


def shipped() -> str:
    """The policy file shipped with hpcc (policy/deployer-policy.json)."""
    return (asset("policy") / FILE).read_text()


def planned_types(results) -> set[str]:
    """Every resource type some plan creates (infra/plan/runner.PlanResult)."""
    return {r["type"] for result in results for r in result.resources}


if __name__ == "__main__":  # python -m infra.ops.deployer_policy: re-write the shipped file from the examples' plans
    from infra.plan.runner import plan_stack_file

    plans = [plan_stack_file(p) for p in sorted(asset("examples").glob("*.yaml"))]
    (asset("policy") / FILE).write_text(render(planned_types(plans)))
    from infra.ops.deployer_guard import GUARD_FILE, render_guard

    (asset("policy") / GUARD_FILE).write_text(render_guard())
