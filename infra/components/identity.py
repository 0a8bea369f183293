"""The nodes' IAM roles, one per node role: SSM Session Manager, reads of the cluster's own parameters, and
- the head node's: read and write of the SSH-key secret (it generates the key at first boot);
- the compute nodes': read of the secret only, so a compute node cannot replace the key the others install.
Every node may write only its own status parameter, which Pulumi created and tagged with the ARN of the instance
it belongs to (`hpcc:instance`): PutParameter is allowed where that tag equals the caller's instance
(`ec2:SourceInstanceARN`, IAM User Guide "IAM policy elements: Variables and tags"), so a node can neither
mark another node ready nor create parameters (a new one has no tag). The secret is created empty, so the
private key never passes through Pulumi state, user data or stack outputs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from infra.naming import TAG_INSTANCE, Paths, role_name, tags

SSM_CORE = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
SECRET_READ = ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"]
SECRET_WRITE = ["secretsmanager:PutSecretValue"]


@dataclass
class IdentityArgs:
    cluster: str
    region: str
    extra_tags: dict[str, str] = field(default_factory=dict)


def node_policy(region: str, account: str, paths: Paths, secret_arn: str, role: str = "compute") -> str:
    param_arn = f"arn:aws:ssm:{region}:{account}:parameter"
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "ReadClusterParameters", "Effect": "Allow",
             "Action": ["ssm:GetParameter", "ssm:GetParameters", "ssm:GetParametersByPath"],
             "Resource": [f"{param_arn}{paths.prefix}", f"{param_arn}{paths.prefix}/*"]},
            {"Sid": "ReportOwnStatus", "Effect": "Allow", "Action": ["ssm:PutParameter"],
             "Resource": [f"{param_arn}{paths.nodes}/*"],
             "Condition": {"StringEquals": {f"aws:ResourceTag/{TAG_INSTANCE}": "${ec2:SourceInstanceARN}"}}},
            {"Sid": "ClusterSshKey", "Effect": "Allow",
             "Action": SECRET_READ + (SECRET_WRITE if role == "head" else []), "Resource": [secret_arn]},
            # AmazonSSMManagedInstanceCore allows reading every parameter in the account: narrow it to this cluster's.
            {"Sid": "OnlyClusterParameters", "Effect": "Deny",
             "Action": ["ssm:GetParameter", "ssm:GetParameters", "ssm:GetParametersByPath", "ssm:GetParameterHistory"],
             "NotResource": [f"{param_arn}{paths.prefix}", f"{param_arn}{paths.prefix}/*"]},
        ],
    }, sort_keys=True)


class Identity(pulumi.ComponentResource):
    instance_profile_arns: dict[str, pulumi.Output[str]]  # role -> instance profile ARN
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
        account = aws.get_caller_identity_output(opts=pulumi.InvokeOutputOptions(parent=self)).account_id
        self.instance_profile_arns = {}
        for role in ("head", "compute"):
            # The compute role keeps the resource names the single node role had (see naming.role_name).
            what = "head" if role == "head" else "node"
            iam_role = aws.iam.Role(f"{c}-{what}-role", name=role_name(c, role), tags=tags(c, f"{what}-role", t),
                                    opts=child, assume_role_policy=json.dumps({
                                        "Version": "2012-10-17",
                                        "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                       "Principal": {"Service": "ec2.amazonaws.com"}}]}))
            aws.iam.RolePolicyAttachment(f"{c}-ssm-core" if role == "compute" else f"{c}-head-ssm-core",
                                         role=iam_role.name, policy_arn=SSM_CORE, opts=child)
            aws.iam.RolePolicy(f"{c}-{what}-policy", name="hpcc-cluster-access", role=iam_role.name, opts=child,
                               policy=pulumi.Output.all(account, secret.arn).apply(
                                   lambda a, role=role: node_policy(args.region, a[0], paths, a[1], role)))
            profile = aws.iam.InstanceProfile(f"{c}-{what}-profile", name=role_name(c, role), role=iam_role.name,
                                              tags=tags(c, f"{what}-profile", t), opts=child)
            self.instance_profile_arns[role] = profile.arn

        self.ssh_secret_arn = secret.arn
        self.register_outputs({"instanceProfileArns": self.instance_profile_arns, "sshSecretArn": secret.arn})
