"""hpcc's mandatory security rules over a resource graph.

Plain Python over `{"type", "name", "inputs"}` records (Pulumi's camelCase wire names), so the same code
runs in the policy pack under `pulumi up --policy-pack policy` and offline over `hpcc plan`'s graph.
Each rule returns the violations it finds, as messages that say what to fix.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
from dataclasses import dataclass
from typing import Callable

LT = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
SG = "aws:ec2/securityGroup:SecurityGroup"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
ALLOWED_MANAGED_POLICIES = {"arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"}
SECRET_PATTERNS = [
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"aws_secret_access_key\s*[=:]", re.I),
    re.compile(r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])(?=.*AKIA)|AKIA[0-9A-Z]{16}", re.S),
]


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    check: Callable[[list[dict]], list[str]]


def _of(resources, token):
    return [r for r in resources if r["type"] == token]


def _role(r) -> str | None:
    return ((r["inputs"].get("tags") or {}).get("hpcc:role")
            or next((t.get("tags", {}).get("hpcc:role") for t in r["inputs"].get("tagSpecifications") or []
                     if t.get("resourceType") == "instance"), None))


def imdsv2_required(resources):
    out = []
    for r in _of(resources, LT):
        if (r["inputs"].get("metadataOptions") or {}).get("httpTokens") != "required":
            out.append(f"{r['name']}: set metadataOptions.httpTokens to 'required' (IMDSv2)")
    for r in _of(resources, INSTANCE):
        tokens = (r["inputs"].get("metadataOptions") or {}).get("httpTokens")
        if tokens != "required" and not r["inputs"].get("launchTemplate"):
            out.append(f"{r['name']}: set metadataOptions.httpTokens to 'required' or launch from a template that does")
        elif tokens not in (None, "required"):
            out.append(f"{r['name']}: metadataOptions.httpTokens is {tokens!r}; IMDSv2 needs 'required'")
    return out


def volumes_encrypted(resources):
    out = []
    for r in _of(resources, LT):
        for i, bdm in enumerate(r["inputs"].get("blockDeviceMappings") or []):
            if str((bdm.get("ebs") or {}).get("encrypted")).lower() != "true":
                out.append(f"{r['name']}: blockDeviceMappings[{i}].ebs.encrypted must be true")
    for r in _of(resources, INSTANCE):
        root = r["inputs"].get("rootBlockDevice")
        if root is not None and str(root.get("encrypted")).lower() != "true":
            out.append(f"{r['name']}: rootBlockDevice.encrypted must be true")
    return out


def no_world_ingress(resources):
    out = []
    for r in _of(resources, INGRESS):
        if r["inputs"].get("cidrIpv4") == "0.0.0.0/0" or r["inputs"].get("cidrIpv6") == "::/0":
            out.append(f"{r['name']}: ingress from the whole internet; name your own network instead")
    for r in _of(resources, SG):
        for rule in r["inputs"].get("ingress") or []:
            if "0.0.0.0/0" in (rule.get("cidrBlocks") or []) or "::/0" in (rule.get("ipv6CidrBlocks") or []):
                out.append(f"{r['name']}: inline ingress from the whole internet")
    return out


def compute_nodes_private(resources):
    out = []
    for r in _of(resources, LT):
        if _role(r) != "compute":
            continue
        for i, nic in enumerate(r["inputs"].get("networkInterfaces") or []):
            if str(nic.get("associatePublicIpAddress")).lower() == "true":
                out.append(f"{r['name']}: networkInterfaces[{i}] gives a compute node a public IP")
    for r in _of(resources, INSTANCE):
        if _role(r) == "compute" and r["inputs"].get("associatePublicIpAddress") is True:
            out.append(f"{r['name']}: a compute node with a public IP")
    return out


def efa_group_self_referencing(resources):
    """Some group admits all traffic from itself and sends all traffic to itself, and every node uses it."""
    def self_all(rules):
        return {r["inputs"]["securityGroupId"] for r in rules if r["inputs"].get("ipProtocol") == "-1"
                and r["inputs"].get("referencedSecurityGroupId") == r["inputs"].get("securityGroupId")}

    efa_groups = self_all(_of(resources, INGRESS)) & self_all(_of(resources, EGRESS))
    if not efa_groups:
        return ["no security group allows all traffic both from and to itself: EFA needs both directions"]
    out = []
    for r in _of(resources, LT):
        for i, nic in enumerate(r["inputs"].get("networkInterfaces") or []):
            if not set(nic.get("securityGroups") or []) & efa_groups:
                out.append(f"{r['name']}: networkInterfaces[{i}] is not in the self-referencing EFA group")
    return out


def _statements(doc: str):
    stmts = json.loads(doc).get("Statement", [])
    return stmts if isinstance(stmts, list) else [stmts]


def _as_list(v):
    return v if isinstance(v, list) else [v]


def iam_least_privilege(resources):
    out = []
    roles = {r["inputs"].get("name"): r for r in _of(resources, ROLE)}
    for r in _of(resources, ROLE_POLICY):
        role = roles.get(r["inputs"].get("role"), {})
        cluster = (role.get("inputs", {}).get("tags") or {}).get("hpcc:cluster")
        for s in _statements(r["inputs"]["policy"]):
            if s.get("Effect") != "Allow":
                continue
            actions, targets = _as_list(s.get("Action", [])), _as_list(s.get("Resource", []))
            if "*" in actions and "*" in targets:
                out.append(f"{r['name']}: grants every action on every resource")
            if any(a == "*" or a.endswith(":*") for a in actions):
                out.append(f"{r['name']}: grants a service's every action ({', '.join(actions)}); list the actions")
            for t in targets:
                if cluster and f"parameter/hpcc/{cluster}" not in t and f"secret:hpcc/{cluster}/" not in t:
                    out.append(f"{r['name']}: reaches {t}, outside cluster {cluster}'s own parameters and secret")
    for r in _of(resources, ATTACHMENT):
        if r["inputs"].get("policyArn") not in ALLOWED_MANAGED_POLICIES:
            out.append(f"{r['name']}: attaches {r['inputs'].get('policyArn')}; the nodes need only AmazonSSMManagedInstanceCore")
    return out


def _user_data(b64: str) -> str:
    raw = base64.b64decode(b64)
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return raw.decode(errors="replace")


def no_secrets_in_user_data(resources):
    out = []
    for r in _of(resources, LT) + _of(resources, INSTANCE):
        data = r["inputs"].get("userData")
        text = _user_data(data) if data else r["inputs"].get("userDataBase64") and _user_data(r["inputs"]["userDataBase64"])
        for pattern in SECRET_PATTERNS:
            if text and pattern.search(text):
                out.append(f"{r['name']}: user data holds secret material ({pattern.pattern[:30]}...); keep keys in "
                           "Secrets Manager and fetch them at boot")
    return out


RULES = [
    Rule("imdsv2-required", "IMDSv2 is required on every instance and launch template", imdsv2_required),
    Rule("volumes-encrypted", "EBS volumes are encrypted", volumes_encrypted),
    Rule("no-world-ingress", "No port is open to 0.0.0.0/0 or ::/0", no_world_ingress),
    Rule("compute-nodes-private", "Compute nodes have no public IP", compute_nodes_private),
    Rule("efa-group-self-referencing", "The EFA group allows all traffic from and to itself, and every node uses it",
         efa_group_self_referencing),
    Rule("iam-least-privilege", "No wildcard IAM grants; the nodes reach only their cluster's parameters and secret",
         iam_least_privilege),
    Rule("no-secrets-in-user-data", "No private key or AWS secret in user data", no_secrets_in_user_data),
]


def check(resources: list[dict]) -> dict[str, list[str]]:
    """Every rule's violations over a graph; an empty dict when it passes."""
    found = {rule.name: rule.check(resources) for rule in RULES}
    return {k: v for k, v in found.items() if v}
