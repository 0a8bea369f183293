"""What the nodes' roles may write (issue 22 item 5): a node is root on itself only, so its role may change nothing
that other nodes trust. Allowed: its own status (ssm:PutParameter under /hpcc/<cluster>/nodes/, only where the
parameter's `hpcc:instance` tag is the caller's instance), the head's writes of the cluster's SSH, munge, login-user
and host-CA secrets (secretsmanager:PutSecretValue; the labels of the SSH and login-user keys, to rotate them), and
instance or group changes only on resources tagged with its own cluster (a controller's scaling). Never: the settings,
hosts or FSx parameters, any parameter's tags or labels, a secret's metadata or policy, an S3 object (the bundle) or
IAM. All the role's policies together (infra/program/components/identity.py writes them).

The controller's store (issue 19): a compute node writes only its own status object in the state bucket
(`status/${ec2:SourceInstanceARN}.json`) and its own host public keys (`hostkeys/` likewise), and nothing in
DynamoDB; the head (the controller; it writes the host certificates, `certs/<node>.json`) writes the state
bucket and the cluster's ledger table, and passes only the cluster's compute role, only to EC2."""

from __future__ import annotations

import fnmatch
import re

from hpcc_contract import names

if __package__:
    from . import iam_rules, records
else:  # loaded by the Pulumi engine as a script directory
    import iam_rules  # type: ignore[no-redef]
    import records  # type: ignore[no-redef]

STATUS_WRITE = "ssm:PutParameter"
SECRET_WRITE = "secretsmanager:PutSecretValue"
KEY_LABELS = "secretsmanager:UpdateSecretVersionStage"  # the head's rotation of the cluster and login keys
# Never allowed to a node role: rewriting what the others read, or the trust around it.
NEVER = (
    "ssm:DeleteParameter",
    "ssm:DeleteParameters",
    "ssm:LabelParameterVersion",
    "ssm:UnlabelParameterVersion",
    "ssm:AddTagsToResource",
    "ssm:RemoveTagsFromResource",
    "secretsmanager:CreateSecret",
    "secretsmanager:UpdateSecret",
    "secretsmanager:DeleteSecret",
    "secretsmanager:RestoreSecret",
    "secretsmanager:UpdateSecretVersionStage",
    "secretsmanager:RotateSecret",
    "secretsmanager:PutResourcePolicy",
    "secretsmanager:DeleteResourcePolicy",
    "secretsmanager:TagResource",
    "secretsmanager:UntagResource",
    "secretsmanager:ReplicateSecretToRegions",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:DeleteObjectVersion",
    "s3:PutObjectAcl",
    "s3:PutObjectTagging",
    "s3:PutBucketPolicy",
    "s3:DeleteBucketPolicy",
    "s3:PutBucketAcl",
    "s3:PutBucketVersioning",
    "s3:PutLifecycleConfiguration",
    "s3:ReplicateObject",
    "s3:RestoreObject",
    "iam:PassRole",
    "iam:CreateRole",
    "iam:PutRolePolicy",
    "iam:AttachRolePolicy",
    "iam:UpdateAssumeRolePolicy",
    "iam:CreatePolicyVersion",
    "iam:CreateAccessKey",
)
# A controller's scaling: allowed only on its own cluster's instances and groups (a tag condition on hpcc:cluster).
FLEET = (
    "ec2:RunInstances",
    "ec2:TerminateInstances",
    "ec2:StopInstances",
    "ec2:StartInstances",
    "ec2:RebootInstances",
    "ec2:CreateTags",
    "ec2:DeleteTags",
    "ec2:ModifyInstanceAttribute",
    "ec2:ModifyInstanceMetadataOptions",
    "ec2:CreateFleet",
    "autoscaling:SetDesiredCapacity",
    "autoscaling:UpdateAutoScalingGroup",
    "autoscaling:TerminateInstanceInAutoScalingGroup",
    "autoscaling:DetachInstances",
    "autoscaling:AttachInstances",
    "autoscaling:SetInstanceHealth",
    "autoscaling:CreateOrUpdateTags",
    "autoscaling:DeleteTags",
)
OWN_INSTANCE = {"StringEquals": {"aws:ResourceTag/hpcc:instance": "${ec2:SourceInstanceARN}"}}
OBJECT_WRITE = "s3:PutObject"
PASS_ROLE = "iam:PassRole"
LEDGER_WRITES = (
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:TransactWriteItems",
    "dynamodb:DeleteTable",
    "dynamodb:UpdateTable",
)


def _own_status_object(arn: str, cluster: str) -> bool:
    """Its status, or its host public keys (hpcc_node/certstore.py): both only at its own instance's key."""
    bucket = names.state_bucket(re.escape(cluster), records.ANY_ACCOUNT)
    prefixes = "|".join(re.escape(p) for p in (names.STATUS_PREFIX, names.HOSTKEYS_PREFIX))
    return bool(re.fullmatch(rf"arn:aws[a-z-]*:s3:::{bucket}/({prefixes})\$\{{ec2:SourceInstanceARN\}}\.json", arn))


def _state_object(arn: str, cluster: str) -> bool:
    return bool(
        re.fullmatch(rf"arn:aws[a-z-]*:s3:::{names.state_bucket(re.escape(cluster), records.ANY_ACCOUNT)}/.+", arn)
    )


def _ledger(arn: str, cluster: str) -> bool:
    return bool(
        re.fullmatch(rf"arn:aws[a-z-]*:dynamodb:[a-z0-9-]*:\d*:table/{names.ledger_table(re.escape(cluster))}", arn)
    )


def store_problems(cluster: str, head: bool, statement: dict, targets: list[str]) -> tuple[list[str], set[str]]:
    """The controller's store and launches: (problems, NEVER actions this statement may take as it does)."""
    out, allowed = [], set()
    if _allows(statement, OBJECT_WRITE):
        own = _state_object if head else _own_status_object
        if all(own(t, cluster) for t in targets):
            allowed.add(OBJECT_WRITE)
        elif not head and any(_state_object(t, cluster) for t in targets):
            out.append(
                f"allows {OBJECT_WRITE} on {', '.join(targets)}: a compute node writes only its own status "
                f"and host keys ({names.state_bucket(cluster, '<account>')}/{names.STATUS_PREFIX}"
                "${ec2:SourceInstanceARN}.json, "
                "hostkeys/ likewise)"
            )
    if _allows(statement, PASS_ROLE) and head:
        passed = (statement.get("Condition") or {}).get("StringEquals", {}).get("iam:PassedToService")
        node_role = names.role_name(re.escape(cluster), "compute")
        if (
            all(re.fullmatch(rf"arn:aws[a-z-]*:iam::\d*:role/{node_role}", t) for t in targets)
            and passed == "ec2.amazonaws.com"
        ):
            allowed.add(PASS_ROLE)
    writes = [a for a in LEDGER_WRITES if _allows(statement, a)]
    if writes and (not head or not all(_ledger(t, cluster) for t in targets)):
        out.append(
            f"allows {', '.join(writes)} on {', '.join(targets)}: only the head's controller writes, and only "
            f"its cluster's ledger (table/{names.ledger_table(cluster)})"
        )
    return out, allowed


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
    return bool(
        re.fullmatch(rf"arn:aws[a-z-]*:ssm:[a-z0-9-]*:\d*:parameter{records.escaped_paths(cluster).nodes}/\*", arn)
    )


def _secret_target(arn: str, cluster: str) -> bool:
    p = records.escaped_paths(cluster)
    secrets = "|".join((p.ssh_secret, p.munge_secret, p.host_ca_secret, p.user_secret))
    return bool(
        re.fullmatch(rf"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]*:\d*:secret:({secrets})(-[A-Za-z0-9]{{6}})?", arn)
    )


def _key_target(arn: str, cluster: str) -> bool:
    p = records.escaped_paths(cluster)
    return bool(
        re.fullmatch(
            rf"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]*:\d*:secret:({p.ssh_secret}|{p.user_secret})"
            r"(-[A-Za-z0-9]{6})?",
            arn,
        )
    )


def _own_cluster_condition(condition: object, cluster: str) -> bool:
    return iam_rules.tag_scoped(condition, cluster)


def statement_problems(cluster: str, head: bool, statement: dict) -> list[str]:
    """What one statement of a node role of `cluster` (the head's when `head`) lets it write beyond its own."""
    out = []
    targets = _targets(statement)
    if _allows(statement, STATUS_WRITE):
        bad = [t for t in targets if not _status_target(t, cluster)]
        if bad or statement.get("Condition") != OWN_INSTANCE:
            out.append(
                f"allows {STATUS_WRITE} on {', '.join(bad or targets)}"
                f"{'' if statement.get('Condition') == OWN_INSTANCE else ' without the hpcc:instance condition'}: "
                f"a node may write only its own status (parameter{names.Paths(cluster).nodes}/*, where the tag "
                "hpcc:instance is ${ec2:SourceInstanceARN}); the settings, hosts and FSx parameters are root on "
                "every node"
            )
    if _allows(statement, SECRET_WRITE):
        bad = [t for t in targets if not _secret_target(t, cluster)]
        if not head or bad:
            out.append(
                f"allows {SECRET_WRITE} on {', '.join(bad or targets)}: only the head writes, and only its "
                f"cluster's own secrets (secret:{names.Paths(cluster).secret_prefix}/ssh-key, munge-key, host-ca, "
                "user-key)"
            )
    if _allows(statement, KEY_LABELS):
        bad = [t for t in targets if not _key_target(t, cluster)]
        if not head or bad:
            out.append(
                f"allows {KEY_LABELS} on {', '.join(bad or targets)}: only the head moves the labels of its "
                f"cluster's SSH keys (secret:{names.Paths(cluster).secret_prefix}/ssh-key, user-key), to rotate them"
            )
    store, allowed = store_problems(cluster, head, statement, targets)
    allowed = set(allowed) | ({KEY_LABELS} if head and all(_key_target(t, cluster) for t in targets) else set())
    out += store
    never = [a for a in NEVER if _allows(statement, a) and a not in allowed]
    if never:
        out.append(
            f"allows {', '.join(never)} on {', '.join(targets)}: no node role may change what the other "
            "nodes trust (parameters' tags and labels, secrets' metadata, the bundle, IAM)"
        )
    fleet = [a for a in FLEET if _allows(statement, a)]
    launches = [a for a in fleet if a in iam_rules.LAUNCH]
    others = [a for a in fleet if a not in iam_rules.LAUNCH]
    if fleet and not head:
        out.append(
            f"allows {', '.join(fleet)} on {', '.join(targets)}: only the head's controller launches, tags or "
            "terminates instances"
        )
        return out
    if launches:
        out += [f"allows {', '.join(launches)}: {p}" for p in iam_rules.launch_problems(statement, cluster)]
    if others and not _own_cluster_condition(statement.get("Condition"), cluster):
        out.append(
            f"allows {', '.join(others)} on {', '.join(targets)} without a condition that the resource is "
            f"tagged hpcc:cluster={cluster}: only its own cluster's instances and groups"
        )
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
                "NotResource" in statement or any(_covers(t, m.group("cluster")) for t in _targets(statement))
            ):
                out.append(
                    f"{role['name']}: {source} lets the compute nodes read the host CA "
                    f"(secret:{names.Paths(m.group('cluster')).host_ca_secret}): only the head's role may"
                )
    return out


def _covers(pattern: str, cluster: str) -> bool:
    """Whether an IAM Resource pattern (wildcards * and ?) matches the cluster's host-CA secret, whatever the
    region and account it names."""
    parts = pattern.split(":", 5)
    if pattern == "*" or len(parts) < 6:
        return pattern == "*"
    return fnmatch.fnmatchcase("secretsmanager", parts[2]) and fnmatch.fnmatchcase(
        f"secret:{names.Paths(cluster).host_ca_secret}-AbCdEf", parts[5]
    )
