"""IAM rules: no '*' on '*' and no service-wide actions, no administrative managed policy, and the nodes' role
reaches only its own cluster's parameters and secrets, all its policies (inline, attached, AWS managed) together;
the head's besides its controller's and its Prometheus's (one named metrics workspace) reach, the compute role's
besides its image service's (the account's ECR, the one NGC secret named).
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Mapping
from typing import Any

from hpcc_contract import names

if __package__:  # imported as the package `policy` (the tests)
    from . import records
    from .feature_rules import containers_statement, remote_write_statement
else:  # loaded by the Pulumi engine as a script directory (__main__.py puts it on sys.path)
    import records  # type: ignore[no-redef]
    from feature_rules import containers_statement, remote_write_statement  # type: ignore[no-redef]

SSM_CORE = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
# The read grants (parameters and secrets) of the AWS managed policies the nodes' role may carry. The rest of
# AmazonSSMManagedInstanceCore (ssmmessages, ec2messages, inventory, associations) reads no parameter or secret.
# Copied from the policy's current version (moto 5.2.5 ships the same document).
MANAGED_READS = {SSM_CORE: [{"Effect": "Allow", "Action": ["ssm:GetParameter", "ssm:GetParameters"], "Resource": "*"}]}
READ_ACTIONS = (
    "ssm:GetParameter",
    "ssm:GetParameters",
    "ssm:GetParametersByPath",
    "ssm:GetParameterHistory",
    "secretsmanager:GetSecretValue",
)
ADMIN_MANAGED = ("AdministratorAccess", "PowerUserAccess", "IAMFullAccess")
# Session Manager's documented minimal instance permissions: on "*", which is all they can take
# (infra/program/components/identity.py SESSION_MANAGER; the pack keeps its own copy, a test checks they agree).
SESSION_MANAGER = frozenset(
    {
        "ssm:UpdateInstanceInformation",
        "ssmmessages:CreateControlChannel",
        "ssmmessages:CreateDataChannel",
        "ssmmessages:OpenControlChannel",
        "ssmmessages:OpenDataChannel",
    }
)


class _NodeRole:
    """A node role's name, the compute nodes' or the head's (hpcc_contract/names.py role_name): `match(name)` gives
    the match with the cluster's name as group "cluster", or None."""

    def __init__(self) -> None:
        self.patterns = [re.compile(f"^{names.role_name(records.CLUSTER, role)}$") for role in ("compute", "head")]

    def match(self, name: str) -> re.Match | None:
        return next((m for m in (p.match(name) for p in self.patterns) if m), None)


NODE_ROLE = _NodeRole()


def _statements(doc: Any) -> list[dict] | None:
    if isinstance(doc, str):
        try:
            doc = json.loads(doc)
        except ValueError:
            return None
    if not isinstance(doc, Mapping):
        return None
    return [s for s in records.as_list(doc.get("Statement")) if isinstance(s, Mapping)]


def _policy_documents(rtype: str, inputs: dict) -> list[tuple[str, Any]]:
    if rtype in (records.ROLE_POLICY, records.MANAGED_POLICY):
        return [("policy", inputs.get("policy"))]
    if rtype == records.ROLE:
        return [
            (f"inlinePolicies[{i}].policy", p.get("policy"))
            for i, p in enumerate(inputs.get("inlinePolicies") or [])
            if p.get("policy")
        ]
    return []


def _cluster_of(policy_inputs: dict, resources: list[dict] | None) -> str | None:
    role = str(policy_inputs.get("role") or "")
    m = NODE_ROLE.match(role.rsplit("/", 1)[-1])
    if m:
        return m.group("cluster")
    for r in resources or []:
        if r["type"] == records.ROLE and role in (r["inputs"].get("name"), r["name"]):
            return (r["inputs"].get("tags") or {}).get(names.TAG_CLUSTER)
    return None


def _own_resource(arn: str, cluster: str) -> bool:
    """The cluster's parameters and secrets, its bundles (hpcc-<cluster>-bundles-<account>/bundles/*), and the
    controller's store: the state bucket (hpcc-<cluster>-state-<account>), the ledger table (hpcc-<cluster>-ledger)
    and the compute role it passes to the instances it launches."""
    c, paths = re.escape(cluster), records.escaped_paths(cluster)
    bundles = f"{names.bundle_bucket(c, records.ANY_ACCOUNT)}/{names.BUNDLES_PREFIX}\\*"
    return bool(
        re.fullmatch(rf"arn:aws[a-z-]*:ssm:[a-z0-9-]*:\d*:parameter{paths.prefix}(?:/[^*]*\*?)?", arn)
        or re.fullmatch(rf"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]*:\d*:secret:{paths.secret_prefix}/[^*]+\*?", arn)
        or re.fullmatch(rf"arn:aws[a-z-]*:s3:::{bundles}", arn)
        or re.fullmatch(rf"arn:aws[a-z-]*:s3:::{names.state_bucket(c, records.ANY_ACCOUNT)}(/.*)?", arn)
        or re.fullmatch(rf"arn:aws[a-z-]*:dynamodb:[a-z0-9-]*:\d*:table/{names.ledger_table(c)}", arn)
        or re.fullmatch(rf"arn:aws[a-z-]*:iam::\d*:role/{names.role_name(c, 'compute')}", arn)
    )


# The controller's EC2 reads: metadata of instances, reservations and templates, on "*" (these actions take no
# resource ARN: Service Authorization Reference, Amazon EC2, "Actions defined by Amazon EC2").
EC2_DESCRIBE = frozenset(
    {
        "ec2:DescribeInstances",
        "ec2:DescribeInstanceStatus",
        "ec2:DescribeCapacityReservations",
        "ec2:DescribeLaunchTemplates",
        "ec2:DescribeLaunchTemplateVersions",
    }
)
LAUNCH = frozenset({"ec2:RunInstances", "ec2:CreateFleet"})
CLUSTER_TAG_KEYS = (
    "aws:ResourceTag/hpcc:cluster",
    "aws:RequestTag/hpcc:cluster",
    "ec2:ResourceTag/hpcc:cluster",
    "autoscaling:ResourceTag/hpcc:cluster",
)
_EC2_RESOURCE = re.compile(r"arn:aws[a-z-]*:ec2:[a-z0-9-]*:\d*:(?P<kind>[a-z-]+)/(?P<id>.+)")
# What a launch creates, each only with the cluster's tag in the request.
LAUNCH_CREATED = ("instance", "volume", "network-interface", "fleet")


def tag_scoped(condition: object, cluster: str) -> bool:
    """A condition that the resource (or the request's tags) carry hpcc:cluster=<cluster>."""
    equals = (condition or {}).get("StringEquals") if isinstance(condition, Mapping) else None
    return isinstance(equals, Mapping) and any(equals.get(k) == cluster for k in CLUSTER_TAG_KEYS)


def resource_tagged(condition: object, cluster: str) -> bool:
    """A condition that the resource itself carries hpcc:cluster=<cluster> (not the request's tags)."""
    return any(
        _condition(condition, "StringEquals", f"{p}:ResourceTag/hpcc:cluster") == cluster for p in ("aws", "ec2")
    )


def _condition(condition: object, operator: str, key: str) -> object:
    block = condition.get(operator) if isinstance(condition, Mapping) else None
    return block.get(key) if isinstance(block, Mapping) else None


def launch_problems(statement: Mapping, cluster: str) -> list[str]:
    """What a statement allowing a launch (RunInstances, CreateFleet) lets the head's controller launch beyond its
    cluster's launch templates: each resource of the launch needs its own condition (infra/program/components/
    identity.py controller_statements, EC2 User Guide "Control launching instances"). "" problems: none."""
    condition = statement.get("Condition")
    templated = str(_condition(condition, "ArnLike", "ec2:LaunchTemplate") or "")
    from_template = bool(re.fullmatch(r"arn:aws[a-z-]*:ec2:[a-z0-9-]*:\d*:launch-template/.+", templated))
    given = str(_condition(condition, "Bool", "ec2:IsLaunchTemplateResource") or "").lower() == "true"
    requested = _condition(condition, "StringEquals", "aws:RequestTag/hpcc:cluster") == cluster
    out = []
    for target in (str(t) for t in records.as_list(statement.get("Resource"))):
        m = _EC2_RESOURCE.fullmatch(target)
        kind, ident = (m.group("kind"), m.group("id")) if m else ("", "")
        if kind == "launch-template":
            if not resource_tagged(condition, cluster):
                out.append(
                    f"launches from {target} without a condition that the template is tagged "
                    f"hpcc:cluster={cluster}: only the cluster's launch templates"
                )
            continue
        if kind == "fleet":
            if not requested:
                out.append(f"creates fleets ({target}) without the request tag hpcc:cluster={cluster}")
            continue
        if not from_template:
            out.append(
                f"launches with {target} without the ec2:LaunchTemplate condition: every resource of a "
                "launch only through one of the cluster's launch templates"
            )
        if kind in ("image", "security-group") and not given:
            out.append(
                f"launches with {target} not given by the template (ec2:IsLaunchTemplateResource): a "
                "request could swap in another image or group"
            )
        elif kind == "subnet" and not resource_tagged(condition, cluster):
            out.append(f"launches into {target} without a condition that it is tagged hpcc:cluster={cluster}")
        elif kind in LAUNCH_CREATED and not requested:
            out.append(f"creates {target} without the request tag hpcc:cluster={cluster}")
        elif kind in ("placement-group", "capacity-reservation") and ("*" in ident or "?" in ident):
            out.append(f"launches into {target}: name the cluster's own {kind}s, not every one of the account")
        elif kind not in (
            "image",
            "security-group",
            "subnet",
            "placement-group",
            "capacity-reservation",
            *LAUNCH_CREATED,
        ):
            out.append(f"launches with {target}: not a resource the controller's launches use")
        if kind == "instance":
            types = records.as_list(_condition(condition, "StringEquals", "ec2:InstanceType"))
            if not types or any("*" in str(t) or "?" in str(t) for t in types):
                out.append(f"launches {target} of any instance type: only the groups' (ec2:InstanceType)")
            if _condition(condition, "StringEquals", "ec2:MetadataHttpTokens") != "required":
                out.append(f"launches {target} without IMDSv2 required (ec2:MetadataHttpTokens)")
    return out


def controller_statement(statement: Mapping, cluster: str) -> bool:
    """An EC2 statement of the head's controller whose reach is its own cluster: describes on "*", EC2 actions
    under a cluster tag condition, or launches held to the cluster's launch templates (launch_problems: the image,
    placement groups and reservations a launch reads carry no cluster tag)."""
    actions = {str(a) for a in records.as_list(statement.get("Action"))}
    targets = [str(t) for t in records.as_list(statement.get("Resource"))]
    if not actions or "NotAction" in statement or "NotResource" in statement:
        return False
    if actions <= EC2_DESCRIBE:
        return True
    if all(a.startswith("ec2:") for a in actions) and tag_scoped(statement.get("Condition"), cluster):
        return True  # what else a launch needs is node-writes-own-only's (write_rules.py, launch_problems)
    return actions <= LAUNCH and bool(targets) and not launch_problems(statement, cluster)


def iam_resource(rtype: str, inputs: dict, graph: list[dict] | None = None) -> list[str]:
    out = []
    for where, doc in _policy_documents(rtype, inputs):
        stmts = _statements(doc)
        if stmts is None:
            out.append(f"{where} is not a JSON policy document")
            continue
        for n, s in enumerate(stmts):
            if s.get("Effect") != "Allow":
                continue
            actions = [str(a) for a in records.as_list(s.get("Action"))]
            targets = [str(t) for t in records.as_list(s.get("Resource"))]
            if "NotAction" in s or "NotResource" in s:
                out.append(
                    f"{where} Statement[{n}] allows with NotAction/NotResource, which grants everything "
                    "not listed; list the actions and resources instead"
                )
            if "*" in actions and "*" in targets:
                out.append(f"{where} Statement[{n}] grants every action on every resource (\"*\" on \"*\")")
            elif any(a == "*" or a.endswith(":*") for a in actions):
                out.append(
                    f"{where} Statement[{n}] grants a service's every action ({', '.join(actions)}); list the actions"
                )
    if rtype == records.ROLE_POLICY:
        cluster = _cluster_of(inputs, graph)
        stmts = _statements(inputs.get("policy")) or []
        if cluster is None:
            out.append(
                f"role {inputs.get('role')!r} is not a cluster's node role (hpcc-<cluster>-node or -head), so its "
                "reach cannot be checked against one cluster's parameters and secrets"
            )
        else:
            role = str(inputs.get("role") or "")
            for n, s in enumerate(stmts):
                if s.get("Effect") != "Allow" or _session_manager_only(s) or controller_statement(s, cluster):
                    continue
                if remote_write_statement(s, role, cluster) or containers_statement(s, role, cluster):
                    continue
                for t in records.as_list(s.get("Resource")):
                    if not _own_resource(str(t), cluster):
                        out.append(
                            f"Statement[{n}] reaches {t}: the nodes may read only cluster {cluster}'s own "
                            f"parameters (parameter{names.Paths(cluster).prefix}/...) and secrets "
                            f"(secret:{names.Paths(cluster).secret_prefix}/...)"
                        )
    if rtype == records.ATTACHMENT:
        arn = str(inputs.get("policyArn") or "")
        if arn.rsplit("/", 1)[-1] in ADMIN_MANAGED:
            out.append(f"attaches {arn}, an administrative policy; the nodes need only AmazonSSMManagedInstanceCore")
        elif NODE_ROLE.match(str(inputs.get("role") or "")):
            out.append(
                f"attaches {arn} to the nodes' role; they need no managed policy: the inline cluster policy "
                "holds Session Manager's minimal permissions (AmazonSSMManagedInstanceCore would let every "
                "node read every SSM document of the account)"
            )
    if rtype == records.ROLE:
        for arn in records.as_list(inputs.get("managedPolicyArns")):
            if str(arn).rsplit("/", 1)[-1] in ADMIN_MANAGED:
                out.append(f"managedPolicyArns includes {arn}, an administrative policy")
            # SSM core may linger in a role's outputs for one update after its attachment is removed (a cluster
            # made before Session Manager's permissions went inline); its reads are judged by the reach rule.
            elif NODE_ROLE.match(str(inputs.get("name") or "")) and str(arn) != SSM_CORE:
                out.append(f"managedPolicyArns includes {arn}; the nodes' role needs no managed policy")
    return out


def _session_manager_only(statement: Mapping) -> bool:
    actions = [str(a) for a in records.as_list(statement.get("Action"))]
    return bool(actions) and "NotAction" not in statement and set(actions) <= SESSION_MANAGER


def _matches(action: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(action.lower(), str(p).lower()) for p in patterns)


def _node_role_statements(role: dict, resources: list[dict]) -> list[tuple[str, dict]]:
    """(source, statement) for every policy the role carries: inline policies, and the attached AWS managed
    policies whose read grants are known (MANAGED_READS). Other attachments are refused by iam_resource."""
    ids = {role["name"], role["inputs"].get("name")} - {None}
    out: list[tuple[str, dict]] = []
    for i, p in enumerate(role["inputs"].get("inlinePolicies") or []):
        out += [(f"{role['name']} inlinePolicies[{i}]", s) for s in _statements(p.get("policy")) or []]
    arns = list(records.as_list(role["inputs"].get("managedPolicyArns")))
    for r in resources:
        if r["type"] == records.ROLE_POLICY and r["inputs"].get("role") in ids:
            out += [(r["name"], s) for s in _statements(r["inputs"].get("policy")) or []]
        elif r["type"] == records.ATTACHMENT and r["inputs"].get("role") in ids:
            arns.append(r["inputs"].get("policyArn"))
    for arn in dict.fromkeys(map(str, arns)):  # under `pulumi up` the role's outputs list its attachments too
        out += [(arn.rsplit("/", 1)[-1], s) for s in MANAGED_READS.get(arn, [])]
    return out


def node_role_reach_graph(resources: list[dict]) -> list[str]:
    """What the nodes' role can read, all its policies together: every parameter or secret read it is allowed
    outside `/hpcc/<cluster>/` and `hpcc/<cluster>/` must be cut off by a Deny. AmazonSSMManagedInstanceCore alone
    allows ssm:GetParameter(s) on every parameter in the account, so the role needs a Deny of the parameter reads
    with NotResource naming the cluster's own prefix."""
    out = []
    for role in resources:
        m = NODE_ROLE.match(str(role["inputs"].get("name") or "")) if role["type"] == records.ROLE else None
        if not m:
            continue
        cluster = m.group("cluster")
        stmts = _node_role_statements(role, resources)
        denies = [s for _, s in stmts if s.get("Effect") == "Deny"]
        reach: dict[tuple[str, str], list[str]] = {}
        for source, s in stmts:
            if s.get("Effect") != "Allow" or "NotAction" in s:
                continue
            if containers_statement(s, str(role["inputs"].get("name") or ""), cluster):
                continue  # the one NGC secret the config names, for the compute role
            for action in READ_ACTIONS:
                if not _matches(action, records.as_list(s.get("Action"))):
                    continue
                for target in map(str, records.as_list(s.get("Resource"))):
                    if _own_resource(target, cluster) or _denied_outside(action, cluster, denies):
                        continue
                    reach.setdefault((source, target), []).append(action)
        for (source, target), actions in reach.items():
            out.append(
                f"{role['name']}: the nodes' role can {', '.join(actions)} on {target} through {source}; "
                f"they may read only cluster {cluster}'s own parameters and secrets: add a Deny of these "
                f"actions with NotResource [parameter{names.Paths(cluster).prefix}, "
                f"parameter{names.Paths(cluster).prefix}/*]"
            )
    return out


def _denied_outside(action: str, cluster: str, denies: list[dict]) -> bool:
    """A Deny of the action on everything but the cluster's own resources (NotResource), or on everything."""
    for s in denies:
        if "Condition" in s or not _matches(action, records.as_list(s.get("Action"))):
            continue
        if "NotResource" in s and all(_own_resource(str(t), cluster) for t in records.as_list(s["NotResource"])):
            return True
        if "*" in map(str, records.as_list(s.get("Resource"))):
            return True
    return False
