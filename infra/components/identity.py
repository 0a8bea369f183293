"""The nodes' IAM role: SSM Session Manager, and read (status: write) access to the cluster's own
parameters and its SSH-key secret only. The secret is created empty; the head node fills it at boot,
so the private key never passes through Pulumi state, user data or stack outputs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from infra.naming import Paths, tags

SSM_CORE = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"


@dataclass
class IdentityArgs:
    cluster: str
    region: str
    extra_tags: dict[str, str] = field(default_factory=dict)


def node_policy(region: str, account: str, paths: Paths, secret_arn: str) -> str:
    param_arn = f"arn:aws:ssm:{region}:{account}:parameter"
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "ReadClusterParameters", "Effect": "Allow",
             "Action": ["ssm:GetParameter", "ssm:GetParameters", "ssm:GetParametersByPath"],
             "Resource": [f"{param_arn}{paths.prefix}", f"{param_arn}{paths.prefix}/*"]},
            {"Sid": "ReportNodeStatus", "Effect": "Allow", "Action": ["ssm:PutParameter"],
             "Resource": [f"{param_arn}{paths.nodes}/*"]},
            {"Sid": "ClusterSshKey", "Effect": "Allow",
             "Action": ["secretsmanager:GetSecretValue", "secretsmanager:PutSecretValue", "secretsmanager:DescribeSecret"],
             "Resource": [secret_arn]},
            # AmazonSSMManagedInstanceCore allows reading every parameter in the account: narrow it to this cluster's.
            {"Sid": "OnlyClusterParameters", "Effect": "Deny",
             "Action": ["ssm:GetParameter", "ssm:GetParameters", "ssm:GetParametersByPath", "ssm:GetParameterHistory"],
             "NotResource": [f"{param_arn}{paths.prefix}", f"{param_arn}{paths.prefix}/*"]},
        ],
    }, sort_keys=True)


class Identity(pulumi.ComponentResource):
    instance_profile_arn: pulumi.Output[str]
    role_name: pulumi.Output[str]
    ssh_secret_arn: pulumi.Output[str]

    def __init__(self, name: str, args: IdentityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("hpcc:cluster:Identity", name, None, opts)
        c, t = args.cluster, args.extra_tags
        child = pulumi.ResourceOptions(parent=self)
        paths = Paths(c)

        secret = aws.secretsmanager.Secret(
            f"{c}-ssh-key", name=paths.ssh_secret, description=f"hpcc {c}: the cluster's SSH key, written by the head node",
            recovery_window_in_days=0,  # destroy leaves nothing, and the name is free for the next stack
            tags=tags(c, "ssh-key", t), opts=child)
        role = aws.iam.Role(f"{c}-node-role", name=f"hpcc-{c}-node", tags=tags(c, "node-role", t), opts=child,
                            assume_role_policy=json.dumps({
                                "Version": "2012-10-17",
                                "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                               "Principal": {"Service": "ec2.amazonaws.com"}}]}))
        aws.iam.RolePolicyAttachment(f"{c}-ssm-core", role=role.name, policy_arn=SSM_CORE, opts=child)
        account = aws.get_caller_identity_output(opts=pulumi.InvokeOutputOptions(parent=self)).account_id
        aws.iam.RolePolicy(f"{c}-node-policy", name="hpcc-cluster-access", role=role.name, opts=child,
                           policy=pulumi.Output.all(account, secret.arn).apply(
                               lambda a: node_policy(args.region, a[0], paths, a[1])))
        profile = aws.iam.InstanceProfile(f"{c}-node-profile", name=f"hpcc-{c}-node", role=role.name,
                                          tags=tags(c, "node-profile", t), opts=child)

        self.instance_profile_arn = profile.arn
        self.role_name = role.name
        self.ssh_secret_arn = secret.arn
        self.register_outputs({"instanceProfileArn": profile.arn, "sshSecretArn": secret.arn})
