"""What the nodes' roles may write (issue 22 item 5): a node is root on itself only, so its role may change nothing
that other nodes trust. Allowed: its own status (ssm:PutParameter under /hpcc/<cluster>/nodes/, only where the
parameter's `hpcc:instance` tag is the caller's instance; likewise its host public keys under hostkeys/), the head's
writes of the cluster's SSH, munge and host-CA secrets (secretsmanager:PutSecretValue) and of the host certificates
(certs/), and instance or group changes only on resources tagged with its own
cluster (a controller's scaling). Never: the settings, hosts or FSx parameters, any parameter's tags or labels,
a secret's metadata or policy, an S3 object (the bundle) or IAM. All the role's policies together
(infra/components/identity.py writes them)."""

from __future__ import annotations

import fnmatch
import re

if __package__:
    from . import iam_rules, records
else:  # loaded by the Pulumi engine as a script directory
    import iam_rules  # type: ignore[no-redef]
    import records  # type: ignore[no-redef]

STATUS_WRITE = "ssm:PutParameter"
SECRET_WRITE = "secretsmanager:PutSecretValue"
# Never allowed to a node role: rewriting what the others read, or the trust around it.
NEVER = ("ssm:DeleteParameter", "ssm:DeleteParameters", "ssm:LabelParameterVersion", "ssm:UnlabelParameterVersion",
         "ssm:AddTagsToResource", "ssm:RemoveTagsFromResource",
         "secretsmanager:CreateSecret", "secretsmanager:UpdateSecret", "secretsmanager:DeleteSecret",
         "secretsmanager:RestoreSecret", "secretsmanager:UpdateSecretVersionStage", "secretsmanager:RotateSecret",
         "secretsmanager:PutResourcePolicy", "secretsmanager:DeleteResourcePolicy", "secretsmanager:TagResource",
         "secretsmanager:UntagResource", "secretsmanager:ReplicateSecretToRegions",
         "s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion", "s3:PutObjectAcl", "s3:PutObjectTagging",
         "s3:PutBucketPolicy", "s3:DeleteBucketPolicy", "s3:PutBucketAcl", "s3:PutBucketVersioning",
         "s3:PutLifecycleConfiguration", "s3:ReplicateObject", "s3:RestoreObject",
         "iam:PassRole", "iam:CreateRole", "iam:PutRolePolicy", "iam:AttachRolePolicy", "iam:UpdateAssumeRolePolicy",
         "iam:CreatePolicyVersion", "iam:CreateAccessKey")
# A controller's scaling: allowed only on its own cluster's instances and groups (a tag condition on hpcc:cluster).
FLEET = ("ec2:RunInstances", "ec2:TerminateInstances", "ec2:StopInstances", "ec2:StartInstances",
         "ec2:RebootInstances", "ec2:CreateTags", "ec2:DeleteTags", "ec2:ModifyInstanceAttribute", "ec2:CreateFleet",
         "autoscaling:SetDesiredCapacity", "autoscaling:UpdateAutoScalingGroup",
         "autoscaling:TerminateInstanceInAutoScalingGroup", "autoscaling:DetachInstances",
         "autoscaling:AttachInstances", "autoscaling:SetInstanceHealth", "autoscaling:CreateOrUpdateTags",
         "autoscaling:DeleteTags")
TAG_KEYS = ("aws:ResourceTag/hpcc:cluster", "aws:RequestTag/hpcc:cluster", "autoscaling:ResourceTag/hpcc:cluster",
            "ec2:ResourceTag/hpcc:cluster")
OWN_INSTANCE = {"StringEquals": {"aws:ResourceTag/hpcc:instance": "${ec2:SourceInstanceARN}"}}


def _allows(statement: dict, action: str) -> bool:
    if statement.get("Effect") != "Allow":
        return False
    if "NotAction" in statement:
        return not iam_rules._matches(action, records.as_list(statement["NotAction"]))
    return iam_rules._matches(action, records.as_list(statement.get("Action")))


def _targets(statement: dict) -> list[str]:
    if "NotResource" in statement:
        return ["* (NotResource)"]
    return [str(t) for t in records.as_list(statement.get("Resource"))]


def _status_target(arn: str, cluster: str) -> bool:
    """Its status, or its host public keys (hpcc_node/certs.py): both only where the tag names its instance."""
    return bool(re.fullmatch(rf"arn:aws[a-z-]*:ssm:[a-z0-9-]*:\d*:parameter/hpcc/{re.escape(cluster)}/(nodes|hostkeys)/\*",
                             arn))


def _certs_target(arn: str, cluster: str) -> bool:
    """The head's certificates for the nodes: written by the head's role only, with no condition."""
    return bool(re.fullmatch(rf"arn:aws[a-z-]*:ssm:[a-z0-9-]*:\d*:parameter/hpcc/{re.escape(cluster)}/certs/\*", arn))


def _secret_target(arn: str, cluster: str) -> bool:
    return bool(re.fullmatch(rf"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]*:\d*:secret:hpcc/{re.escape(cluster)}/"
                             r"(ssh-key|munge-key|host-ca|user-key)(-[A-Za-z0-9]{6})?", arn))


def _own_cluster_condition(condition: object, cluster: str) -> bool:
    equals = (condition or {}).get("StringEquals") if isinstance(condition, dict) else None
    return isinstance(equals, dict) and any(equals.get(k) == cluster for k in TAG_KEYS)


def statement_problems(cluster: str, head: bool, statement: dict) -> list[str]:
    """What one statement of a node role of `cluster` (the head's when `head`) lets it write beyond its own."""
    out = []
    targets = _targets(statement)
    if _allows(statement, STATUS_WRITE) and head and targets and all(_certs_target(t, cluster) for t in targets):
        pass  # the head certifies the nodes' host keys
    elif _allows(statement, STATUS_WRITE):
        bad = [t for t in targets if not _status_target(t, cluster)]
        if bad or statement.get("Condition") != OWN_INSTANCE:
            out.append(f"allows {STATUS_WRITE} on {', '.join(bad or targets)}"
                       f"{'' if statement.get('Condition') == OWN_INSTANCE else ' without the hpcc:instance condition'}: "
                       f"a node may write only its own status and host keys (parameter/hpcc/{cluster}/nodes/*, "
                       "hostkeys/*, where the tag hpcc:instance is ${ec2:SourceInstanceARN}), the head also the host "
                       "certificates (certs/*); the settings, hosts and FSx parameters are root on every node")
    if _allows(statement, SECRET_WRITE):
        bad = [t for t in targets if not _secret_target(t, cluster)]
        if not head or bad:
            out.append(f"allows {SECRET_WRITE} on {', '.join(bad or targets)}: only the head writes, and only its "
                       f"cluster's own secrets (secret:hpcc/{cluster}/ssh-key, munge-key, host-ca, user-key)")
    never = [a for a in NEVER if _allows(statement, a)]
    if never:
        out.append(f"allows {', '.join(never)} on {', '.join(targets)}: no node role may change what the other "
                   "nodes trust (parameters' tags and labels, secrets' metadata, the bundle, IAM)")
    fleet = [a for a in FLEET if _allows(statement, a)]
    if fleet and not _own_cluster_condition(statement.get("Condition"), cluster):
        out.append(f"allows {', '.join(fleet)} on {', '.join(targets)} without a condition that the resource is "
                   f"tagged hpcc:cluster={cluster}: only its own cluster's instances and groups")
    return out


def node_writes_graph(resources: list[dict]) -> list[str]:
    """Every write each node role's policies (all together) allow beyond its own."""
    out = []
    for role in resources:
        m = iam_rules.NODE_ROLE.match(str(role["inputs"].get("name") or "")) if role["type"] == records.ROLE else None
        if not m:
            continue
        head = str(role["inputs"]["name"]).endswith("-head")
        for source, statement in iam_rules._node_role_statements(role, resources):
            out += [f"{role['name']}: {source}: {p}" for p in statement_problems(m.group("cluster"), head, statement)]
    return out


def host_ca_graph(resources: list[dict]) -> list[str]:
    """The host CA signs who every node is: a compute role that can read it (any statement whose Resource matches
    the secret, wildcards included) lets one node's root certify any host at any address."""
    out = []
    for role in resources:
        m = iam_rules.NODE_ROLE.match(str(role["inputs"].get("name") or "")) if role["type"] == records.ROLE else None
        if not m or str(role["inputs"]["name"]).endswith("-head"):
            continue
        for source, statement in iam_rules._node_role_statements(role, resources):
            if _allows(statement, "secretsmanager:GetSecretValue") and (
                    "NotResource" in statement or any(_covers(t, m.group("cluster")) for t in _targets(statement))):
                out.append(f"{role['name']}: {source} lets the compute nodes read the host CA "
                           f"(secret:hpcc/{m.group('cluster')}/host-ca): only the head's role may")
    return out


def _covers(pattern: str, cluster: str) -> bool:
    """Whether an IAM Resource pattern (wildcards * and ?) matches the cluster's host-CA secret, whatever the
    region and account it names."""
    parts = pattern.split(":", 5)
    if pattern == "*" or len(parts) < 6:
        return pattern == "*"
    return fnmatch.fnmatchcase("secretsmanager", parts[2]) and \
        fnmatch.fnmatchcase(f"secret:hpcc/{cluster}/host-ca-AbCdEf", parts[5])
