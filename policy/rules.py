"""hpcc's mandatory security rules, as plain Python over resource records.

A record is `{"type", "name", "inputs"[, "dependsOn"]}` with `inputs` in Pulumi's camelCase wire names: exactly
what `hpcc plan` records (`PlanResult.resources`), and what the policy pack (`policy/pack.py`) builds from
`args.props` after `normalise()`. So the same functions run under `pulumi up --policy-pack policy` and offline.

Each rule has a per-resource check `(type, inputs) -> [message]`, which the pack runs before the resource is
created, and/or a graph check `(records) -> [message]` for what needs several resources (the pack runs it over
the whole stack). Messages say what is wrong and what would be right.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import gzip
import ipaddress
import json
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

LT = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
EBS_VOLUME = "aws:ebs/volume:Volume"
SUBNET = "aws:ec2/subnet:Subnet"
SG = "aws:ec2/securityGroup:SecurityGroup"
SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
MANAGED_POLICY = "aws:iam/policy:Policy"
ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
VPC = "aws:ec2/vpc:Vpc"
VPC_IPV6 = "aws:ec2/vpcIpv6CidrBlockAssociation:VpcIpv6CidrBlockAssociation"

SSM_CORE = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
# The read grants (parameters and secrets) of the AWS managed policies the nodes' role may carry. The rest of
# AmazonSSMManagedInstanceCore (ssmmessages, ec2messages, inventory, associations) reads no parameter or secret.
# Copied from the policy's current version (moto 5.2.5 ships the same document).
MANAGED_READS = {SSM_CORE: [{"Effect": "Allow", "Action": ["ssm:GetParameter", "ssm:GetParameters"], "Resource": "*"}]}
READ_ACTIONS = ("ssm:GetParameter", "ssm:GetParameters", "ssm:GetParametersByPath", "ssm:GetParameterHistory",
                "secretsmanager:GetSecretValue")
ADMIN_MANAGED = ("AdministratorAccess", "PowerUserAccess", "IAMFullAccess")
NODE_ROLE = re.compile(r"^hpcc-(?P<cluster>[a-z][a-z0-9-]*[a-z0-9])-(?:node|head)$")  # compute nodes' and head's
# Every FSx for Lustre deployment type is encrypted at rest (scratch: FSx-managed keys; persistent: KMS).
LUSTRE_TYPES = ("SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2")
ALL_PROTOCOLS = ("-1", "all")
TAG_MAPS = ("tags", "tagsAll")
# The most addresses a security group may admit from, all its ingress rules together (overlaps once): a /16's worth
# of IPv4, a /48's of IPv6. Why: docs/security.md. infra/validators/inputs.py holds the same IPv4 number for the
# config; the pack keeps its own so it runs without hpcc installed (tests/test_policy.py checks they agree).
MAX_INGRESS_ADDRESSES = {4: 2**16, 6: 2**80}
PREFIX_OF_LIMIT = {4: "/16", 6: "/48"}  # user-chosen keys: never renamed by normalise()

SECRET_PATTERNS = [
    ("a private key block", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")),
    ("an AWS access key id", re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])")),
    ("an AWS secret access key", re.compile(
        r"(?i)(?:aws_?secret_?access_?key|secret_?access_?key|aws_?secret_?key)[\"']?[\s:=\"']+"
        r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")),
]


# --- normalisation: the one place that turns what the engine hands the pack into a record's inputs --------


def _camel(key: str) -> str:
    if re.fullmatch(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+", key):
        head, *rest = key.split("_")
        return head + "".join(p[:1].upper() + p[1:] for p in rest)
    return key


class _MapView(Mapping):
    """A read-only camelCase view: a value is read from the source (where pulumi-policy's proxies raise
    UnknownValueError for values unknown during preview) only when a rule asks for it."""

    def __init__(self, source: Mapping, raw_keys: bool = False):
        self._source = source
        self._raw_keys = raw_keys
        self._keys = {(k if raw_keys else _camel(k)): k for k in source}

    def __getitem__(self, key: str) -> Any:
        return normalise(self._source[self._keys[key]], raw_keys=not self._raw_keys and key in TAG_MAPS)

    def __iter__(self):
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"MapView({list(self._keys)})"


class _SeqView(Sequence):
    def __init__(self, source: Sequence):
        self._source = source

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        return normalise(self._source[i])

    def __len__(self) -> int:
        return len(self._source)


def normalise(props: Any, raw_keys: bool = False) -> Any:
    """The one place that turns what the engine hands the pack into what the rules read: a lazy read-only view
    with camelCase keys over pulumi-policy's props (wire names already, wrapped in Mapping/Sequence proxies) or
    over snake_case dicts, should an engine send those. Tag maps keep their keys as written. A value unknown
    during preview raises only if a rule reads it, so the other rules still run in `pulumi preview`."""
    if isinstance(props, Mapping):
        return _MapView(props, raw_keys)
    if isinstance(props, Sequence) and not isinstance(props, (str, bytes)):
        return _SeqView(props)
    return props


# --- helpers ------------------------------------------------------------------------------------------------


def _true(v: Any) -> bool:
    return v is True or str(v).lower() == "true"


def _list(v: Any) -> list:
    if v is None:
        return []
    return list(v) if isinstance(v, Sequence) and not isinstance(v, (str, bytes)) else [v]


def _role_tag(inputs: dict) -> str | None:
    """The node role (head | compute) of an instance or of the instances a launch template makes."""
    tag = (inputs.get("tags") or {}).get("hpcc:role")
    for spec in inputs.get("tagSpecifications") or []:
        if spec.get("resourceType") == "instance":
            tag = tag or (spec.get("tags") or {}).get("hpcc:role")
    return tag


def _network(cidr: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(str(cidr).strip(), strict=False)
    except ValueError:
        return None


def _is_world(cidr: Any) -> bool:
    net = _network(cidr)
    return net is not None and net.prefixlen == 0


def _too_wide(cidr: Any) -> bool:
    """Wider than the limit on its own, but not the world (reported as such)."""
    net = _network(cidr)
    return net is not None and 0 < net.prefixlen and net.num_addresses > MAX_INGRESS_ADDRESSES[net.version]


def _ports(inputs: dict) -> str:
    proto = str(inputs.get("ipProtocol", inputs.get("protocol", "")))
    if proto in ALL_PROTOCOLS:
        return "every port"
    # the engine sends numbers as protobuf doubles: 22.0 is port 22
    low, high = (int(v) if isinstance(v, float) and v.is_integer() else v for v in (inputs.get("fromPort"), inputs.get("toPort")))
    return f"{proto} {low}" if low == high else f"{proto} {low}-{high}"


def _decoded_texts(value: str) -> list[str]:
    """The user data as written, and as the instance will see it when it is base64 (and maybe gzip)."""
    texts = [value]
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return texts
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error):
            pass
    texts.append(raw.decode("utf-8", errors="replace"))
    return texts


def _statements(doc: Any) -> list[dict] | None:
    if isinstance(doc, str):
        try:
            doc = json.loads(doc)
        except ValueError:
            return None
    if not isinstance(doc, Mapping):
        return None
    return [s for s in _list(doc.get("Statement")) if isinstance(s, Mapping)]


def _policy_documents(rtype: str, inputs: dict) -> list[tuple[str, Any]]:
    if rtype in (ROLE_POLICY, MANAGED_POLICY):
        return [("policy", inputs.get("policy"))]
    if rtype == ROLE:
        return [(f"inlinePolicies[{i}].policy", p.get("policy"))
                for i, p in enumerate(inputs.get("inlinePolicies") or []) if p.get("policy")]
    return []


# --- the rules ------------------------------------------------------------------------------------------------


def imdsv2_resource(rtype: str, inputs: dict, graph: list[dict] | None = None) -> list[str]:
    tokens = (inputs.get("metadataOptions") or {}).get("httpTokens")
    if rtype == LT and tokens != "required":
        return [f"metadataOptions.httpTokens is {tokens!r}; set it to 'required' (IMDSv2 only)"]
    if rtype == INSTANCE:
        if tokens is None and not inputs.get("launchTemplate"):
            return ["no metadataOptions and no launch template: set metadataOptions.httpTokens to 'required'"]
        if tokens is not None and tokens != "required":
            return [f"metadataOptions.httpTokens is {tokens!r} (it overrides the template's); set it to 'required'"]
    return []


def imdsv2_graph(resources: list[dict]) -> list[str]:
    """An instance that leaves IMDS to its launch template must use a template of this stack (checked above)."""
    templates = [r for r in resources if r["type"] == LT]
    names = {r["name"] for r in templates}
    ids = {r["inputs"].get("id") for r in templates} - {None}
    lt_names = {r["inputs"].get("name") for r in templates} - {None}
    out = []
    for r in resources:
        if r["type"] != INSTANCE or (r["inputs"].get("metadataOptions") or {}).get("httpTokens"):
            continue
        ref = r["inputs"].get("launchTemplate") or {}
        if not ref:
            continue
        if ref.get("id") in ids or ref.get("name") in lt_names or names & set(r.get("dependsOn") or []):
            continue
        out.append(f"{r['name']}: launches from a template outside this stack ({ref.get('id') or ref.get('name')}), "
                   "whose IMDS setting cannot be checked; set metadataOptions.httpTokens to 'required' on the instance")
    return out


def ebs_encrypted_resource(rtype: str, inputs: dict, graph: list[dict] | None = None) -> list[str]:
    out = []
    if rtype == LT:
        mappings = [m for m in inputs.get("blockDeviceMappings") or [] if m.get("ebs") is not None]
        if not mappings:
            out.append("no EBS block device mapping: the root volume would keep the AMI snapshot's encryption; "
                       "map the root device with ebs.encrypted true")
        for i, m in enumerate(inputs.get("blockDeviceMappings") or []):
            if m.get("ebs") is not None and not _true(m["ebs"].get("encrypted")):
                out.append(f"blockDeviceMappings[{i}].ebs.encrypted is {m['ebs'].get('encrypted')!r}; "
                           "it must be true (encrypted at rest)")
    elif rtype == INSTANCE:
        root = inputs.get("rootBlockDevice")
        if root is None and not inputs.get("launchTemplate"):
            out.append("no rootBlockDevice and no launch template: set rootBlockDevice.encrypted true")
        elif root is not None and not _true(root.get("encrypted")):
            out.append(f"rootBlockDevice.encrypted is {root.get('encrypted')!r}; it must be true (encrypted at rest)")
        for i, d in enumerate(inputs.get("ebsBlockDevices") or []):
            if not _true(d.get("encrypted")):
                out.append(f"ebsBlockDevices[{i}].encrypted must be true (encrypted at rest)")
    elif rtype == EBS_VOLUME and not _true(inputs.get("encrypted")):
        out.append("encrypted must be true (encrypted at rest)")
    return out


def file_system_encrypted_resource(rtype: str, inputs: dict, graph: list[dict] | None = None) -> list[str]:
    """FSx for Lustre has no switch that turns encryption at rest off: every documented deployment type is
    encrypted (scratch with FSx-managed keys, persistent with KMS). What can be checked is that the type is one
    of those, so no future or mistyped type slips through unexamined."""
    if rtype != LUSTRE:
        return []
    dep = inputs.get("deploymentType") or "SCRATCH_1"
    if dep not in LUSTRE_TYPES:
        return [f"deploymentType {dep!r} is not one hpcc knows to be encrypted at rest; use one of "
                f"{', '.join(LUSTRE_TYPES)}"]
    if inputs.get("kmsKeyId") and dep.startswith("SCRATCH"):
        return [f"kmsKeyId is set on a {dep} file system, which is always encrypted with an FSx-managed key; "
                "use a PERSISTENT type for a customer key, or drop kmsKeyId"]
    return []


def _ingress_sources(rtype: str, inputs: dict) -> list[tuple[str, Any, dict]]:
    """(how the source is written, cidr, the rule) for every address source of an ingress rule, in any of the
    three ways of writing one."""
    if rtype == INGRESS:
        return [(f"{key} {inputs[key]}", inputs[key], inputs) for key in ("cidrIpv4", "cidrIpv6") if inputs.get(key)]
    if rtype == SG_RULE and inputs.get("type") == "ingress":
        return [(f"ingress from {c}", c, inputs) for c in _list(inputs.get("cidrBlocks")) + _list(inputs.get("ipv6CidrBlocks"))]
    if rtype == SG:
        return [(f"ingress[{i}] from {c}", c, rule) for i, rule in enumerate(inputs.get("ingress") or [])
                for c in _list(rule.get("cidrBlocks")) + _list(rule.get("ipv6CidrBlocks"))]
    return []


def world_ingress_resource(rtype: str, inputs: dict, graph: list[dict] | None = None) -> list[str]:
    out = []
    for source, cidr, rule in _ingress_sources(rtype, inputs):
        if _is_world(cidr):
            out.append(f"{source} opens {_ports(rule)} to the whole internet; name your own network "
                       "(or use SSM Session Manager)")
        elif _too_wide(cidr):
            net = _network(cidr)
            out.append(f"{source} opens {_ports(rule)} to {net.num_addresses:,} addresses; a group may admit at most "
                       f"{MAX_INGRESS_ADDRESSES[net.version]:,} (a {PREFIX_OF_LIMIT[net.version]}) in all: name your "
                       "own, narrower networks")
    return out


def _group_of(r: dict) -> Any:
    return r["inputs"].get("id") or r["name"] if r["type"] == SG else r["inputs"].get("securityGroupId")


def _vpc_has_ipv6(resources: list[dict]) -> bool | None:
    """Whether some VPC of the stack has IPv6 addresses; None when the stack has no VPC to look at."""
    vpcs = [r for r in resources if r["type"] == VPC]
    if not vpcs:
        return None
    return any(r["type"] == VPC_IPV6 for r in resources) or any(
        r["inputs"].get("ipv6CidrBlock") or _true(r["inputs"].get("assignGeneratedIpv6CidrBlock"))
        or r["inputs"].get("ipv6IpamPoolId") for r in vpcs)


def world_ingress_graph(resources: list[dict]) -> list[str]:
    """Every group's ingress sources together: 0.0.0.0/1 plus 128.0.0.0/1 is the whole internet in two rules. And no
    IPv6 source while the stack's VPC has no IPv6 (the rule could only be a mistake, or wait for one)."""
    by_group: dict[tuple[Any, int], tuple[list[str], list]] = {}
    out = []
    ipv6 = _vpc_has_ipv6(resources)
    for r in resources:
        for source, cidr, _ in _ingress_sources(r["type"], r["inputs"]):
            net = _network(cidr)
            if net is None or net.prefixlen == 0:
                continue  # unparsable: EC2 refuses it; the world: reported per resource
            names, nets = by_group.setdefault((_group_of(r), net.version), ([], []))
            if r["name"] not in names:
                names.append(r["name"])
            nets.append(net)
            if net.version == 6 and ipv6 is False:
                out.append(f"{r['name']}: {source} is an IPv6 source, but no VPC of the stack has IPv6 "
                           "addresses; remove it, or give the VPC an IPv6 block first")
    for (group, version), (names, nets) in by_group.items():
        total = sum(n.num_addresses for n in ipaddress.collapse_addresses(nets))
        if total > MAX_INGRESS_ADDRESSES[version]:
            out.append(f"{names[0]}: group {group}'s ingress rules ({', '.join(names)}) together admit {total:,} IPv{version} "
                       f"addresses; at most {MAX_INGRESS_ADDRESSES[version]:,} (a {PREFIX_OF_LIMIT[version]}) in all: "
                       "name your own, narrower networks")
    return out


def _primary(nic: dict) -> bool:
    return int(nic.get("networkCardIndex") or 0) == 0 and int(nic.get("deviceIndex") or 0) == 0


def private_compute_resource(rtype: str, inputs: dict, graph: list[dict] | None = None) -> list[str]:
    """Anything not tagged as the head node is held to the compute rule, so a lost tag fails closed."""
    out = []
    if rtype == LT and _role_tag(inputs) != "head":
        nics = inputs.get("networkInterfaces") or []
        for i, nic in enumerate(nics):
            if _true(nic.get("associatePublicIpAddress")):
                out.append(f"networkInterfaces[{i}].associatePublicIpAddress is true: compute nodes get no public IP")
        if not any(_primary(n) and str(n.get("associatePublicIpAddress")).lower() == "false" for n in nics):
            out.append("the primary interface (card 0, device 0) must set associatePublicIpAddress false, "
                       "or the subnet's default decides")
    elif rtype == INSTANCE and _role_tag(inputs) != "head" and _true(inputs.get("associatePublicIpAddress")):
        out.append("associatePublicIpAddress is true: compute nodes get no public IP")
    elif rtype == SUBNET and _true(inputs.get("mapPublicIpOnLaunch")):
        out.append("mapPublicIpOnLaunch is true: nodes launched here would get a public IP; set it false")
    return out


def private_compute_graph(resources: list[dict]) -> list[str]:
    """Under `pulumi up` the stack policy sees outputs: an instance that got a public IP anyway (a subnet default,
    a template edited outside the stack) is caught here. Offline records carry inputs only, so this finds nothing
    there unless a record says publicIp."""
    return [f"{r['name']}: has public IP {r['inputs']['publicIp']}; compute nodes get no public IP (launch them in "
            "the private subnet with associatePublicIpAddress false)"
            for r in resources
            if r["type"] == INSTANCE and _role_tag(r["inputs"]) != "head" and r["inputs"].get("publicIp")]


def _self_all_groups(resources: list[dict], direction: str) -> set[str]:
    """Groups with a rule allowing all protocols from (ingress) or to (egress) the group itself."""
    token = INGRESS if direction == "ingress" else EGRESS
    groups = set()
    for r in resources:
        i = r["inputs"]
        if r["type"] == token and str(i.get("ipProtocol")) in ALL_PROTOCOLS \
                and i.get("referencedSecurityGroupId") and i.get("referencedSecurityGroupId") == i.get("securityGroupId"):
            groups.add(i["securityGroupId"])
        elif r["type"] == SG_RULE and i.get("type") == direction and str(i.get("protocol")) in ALL_PROTOCOLS \
                and (_true(i.get("self")) or i.get("sourceSecurityGroupId") == i.get("securityGroupId")):
            groups.add(i.get("securityGroupId"))
        elif r["type"] == SG and i.get("id"):
            for rule in i.get(direction) or []:
                if str(rule.get("protocol")) in ALL_PROTOCOLS and (_true(rule.get("self")) or i["id"] in _list(rule.get("securityGroups"))):
                    groups.add(i["id"])
    return groups - {None}


def efa_group_graph(resources: list[dict]) -> list[str]:
    groups = _self_all_groups(resources, "ingress") & _self_all_groups(resources, "egress")
    if not groups:
        return ["no security group allows all traffic both from and to itself (ingress and egress, protocol -1): "
                "EFA needs both directions, and egress to 0.0.0.0/0 does not cover it"]
    out = []
    for r in resources:
        if r["type"] != LT:
            continue
        for i, nic in enumerate(r["inputs"].get("networkInterfaces") or []):
            if not set(_list(nic.get("securityGroups"))) & groups:
                out.append(f"{r['name']}: networkInterfaces[{i}] is not in the self-referencing EFA group "
                           f"({', '.join(sorted(groups))})")
    return out


def _cluster_of(policy_inputs: dict, resources: list[dict] | None) -> str | None:
    role = str(policy_inputs.get("role") or "")
    m = NODE_ROLE.match(role.rsplit("/", 1)[-1])
    if m:
        return m.group("cluster")
    for r in resources or []:
        if r["type"] == ROLE and role in (r["inputs"].get("name"), r["name"]):
            return (r["inputs"].get("tags") or {}).get("hpcc:cluster")
    return None


def _own_resource(arn: str, cluster: str) -> bool:
    c = re.escape(cluster)
    return bool(re.fullmatch(rf"arn:aws[a-z-]*:ssm:[a-z0-9-]*:\d*:parameter/hpcc/{c}(?:/[^*]*\*?)?", arn)
                or re.fullmatch(rf"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]*:\d*:secret:hpcc/{c}/[^*]+\*?", arn))


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
            actions, targets = [str(a) for a in _list(s.get("Action"))], [str(t) for t in _list(s.get("Resource"))]
            if "NotAction" in s or "NotResource" in s:
                out.append(f"{where} Statement[{n}] allows with NotAction/NotResource, which grants everything "
                           "not listed; list the actions and resources instead")
            if "*" in actions and "*" in targets:
                out.append(f"{where} Statement[{n}] grants every action on every resource (\"*\" on \"*\")")
            elif any(a == "*" or a.endswith(":*") for a in actions):
                out.append(f"{where} Statement[{n}] grants a service's every action ({', '.join(actions)}); "
                           "list the actions")
    if rtype == ROLE_POLICY:
        cluster = _cluster_of(inputs, graph)
        stmts = _statements(inputs.get("policy")) or []
        if cluster is None:
            out.append(f"role {inputs.get('role')!r} is not a cluster's node role (hpcc-<cluster>-node or -head), so its "
                       "reach cannot be checked against one cluster's parameters and secrets")
        else:
            for n, s in enumerate(stmts):
                if s.get("Effect") != "Allow":
                    continue
                for t in _list(s.get("Resource")):
                    if not _own_resource(str(t), cluster):
                        out.append(f"Statement[{n}] reaches {t}: the nodes may read only cluster {cluster}'s own "
                                   f"parameters (parameter/hpcc/{cluster}/...) and secrets (secret:hpcc/{cluster}/...)")
    if rtype == ATTACHMENT:
        arn = str(inputs.get("policyArn") or "")
        if arn.rsplit("/", 1)[-1] in ADMIN_MANAGED:
            out.append(f"attaches {arn}, an administrative policy; the nodes need only AmazonSSMManagedInstanceCore")
        elif NODE_ROLE.match(str(inputs.get("role") or "")) and arn != SSM_CORE:
            out.append(f"attaches {arn} to the nodes' role; they need only AmazonSSMManagedInstanceCore plus the "
                       "inline cluster policy")
    if rtype == ROLE:
        for arn in _list(inputs.get("managedPolicyArns")):
            if str(arn).rsplit("/", 1)[-1] in ADMIN_MANAGED:
                out.append(f"managedPolicyArns includes {arn}, an administrative policy")
    return out



def _matches(action: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(action.lower(), str(p).lower()) for p in patterns)


def _node_role_statements(role: dict, resources: list[dict]) -> list[tuple[str, dict]]:
    """(source, statement) for every policy the role carries: inline policies, and the attached AWS managed
    policies whose read grants are known (MANAGED_READS). Other attachments are refused by iam_resource."""
    ids = {role["name"], role["inputs"].get("name")} - {None}
    out: list[tuple[str, dict]] = []
    for i, p in enumerate(role["inputs"].get("inlinePolicies") or []):
        out += [(f"{role['name']} inlinePolicies[{i}]", s) for s in _statements(p.get("policy")) or []]
    arns = list(_list(role["inputs"].get("managedPolicyArns")))
    for r in resources:
        if r["type"] == ROLE_POLICY and r["inputs"].get("role") in ids:
            out += [(r["name"], s) for s in _statements(r["inputs"].get("policy")) or []]
        elif r["type"] == ATTACHMENT and r["inputs"].get("role") in ids:
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
        m = NODE_ROLE.match(str(role["inputs"].get("name") or "")) if role["type"] == ROLE else None
        if not m:
            continue
        cluster = m.group("cluster")
        stmts = _node_role_statements(role, resources)
        denies = [s for _, s in stmts if s.get("Effect") == "Deny"]
        reach: dict[tuple[str, str], list[str]] = {}
        for source, s in stmts:
            if s.get("Effect") != "Allow" or "NotAction" in s:
                continue
            for action in READ_ACTIONS:
                if not _matches(action, _list(s.get("Action"))):
                    continue
                for target in map(str, _list(s.get("Resource"))):
                    if _own_resource(target, cluster) or _denied_outside(action, cluster, denies):
                        continue
                    reach.setdefault((source, target), []).append(action)
        for (source, target), actions in reach.items():
            out.append(f"{role['name']}: the nodes' role can {', '.join(actions)} on {target} through {source}; "
                       f"they may read only cluster {cluster}'s own parameters and secrets: add a Deny of these "
                       f"actions with NotResource [parameter/hpcc/{cluster}, parameter/hpcc/{cluster}/*]")
    return out


def _denied_outside(action: str, cluster: str, denies: list[dict]) -> bool:
    """A Deny of the action on everything but the cluster's own resources (NotResource), or on everything."""
    for s in denies:
        if "Condition" in s or not _matches(action, _list(s.get("Action"))):
            continue
        if "NotResource" in s and all(_own_resource(str(t), cluster) for t in _list(s["NotResource"])):
            return True
        if "*" in map(str, _list(s.get("Resource"))):
            return True
    return False


def secrets_resource(rtype: str, inputs: dict, graph: list[dict] | None = None) -> list[str]:
    if rtype not in (LT, INSTANCE):
        return []
    out = []
    for key in ("userData", "userDataBase64"):
        value = inputs.get(key)
        if not isinstance(value, str) or not value:
            continue
        texts = _decoded_texts(value)
        for what, pattern in SECRET_PATTERNS:
            if any(pattern.search(t) for t in texts):
                out.append(f"{key} holds {what}; keep secrets in Secrets Manager (hpcc/<cluster>/...) and fetch "
                           "them at boot with the node role")
    return out


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    resource_check: Callable[..., list[str]] | None = None  # (type, inputs, graph=None)
    graph_check: Callable[[list[dict]], list[str]] | None = None

    def check(self, resources: list[dict]) -> list[str]:
        """Every violation over a graph of records, each message prefixed with the resource's name."""
        out = []
        if self.resource_check is not None:
            for r in resources:
                out += [f"{r['name']}: {m}" for m in self.resource_check(r["type"], r["inputs"], resources)]
        if self.graph_check is not None:
            out += self.graph_check(resources)
        return out


RULES = [
    Rule("imdsv2-required", "IMDSv2 (httpTokens required) on every launch template and instance",
         imdsv2_resource, imdsv2_graph),
    Rule("ebs-encrypted", "Root and data EBS volumes are encrypted at rest", ebs_encrypted_resource),
    Rule("file-system-encrypted", "The FSx for Lustre file system is of a type encrypted at rest",
         file_system_encrypted_resource),
    Rule("no-world-ingress", "No port (SSH or any other) is open to 0.0.0.0/0 or ::/0, nor to more than a /16 of "
         "IPv4 (a /48 of IPv6) counting all of a group's rules; no IPv6 source while the VPC has none",
         world_ingress_resource, world_ingress_graph),
    Rule("compute-nodes-private", "Compute nodes get no public IP; no subnet assigns one by default",
         private_compute_resource, private_compute_graph),
    Rule("efa-group-self-referencing", "A group allows all traffic from and to itself, and every node interface "
         "is in it", None, efa_group_graph),
    Rule("iam-least-privilege", "No '*' on '*', no service-wide actions; the nodes' role reaches only its "
         "cluster's parameters and secrets, all its policies together", iam_resource, node_role_reach_graph),
    Rule("no-secrets-in-user-data", "No private key or AWS key in user data (decoded)", secrets_resource),
]


def check(resources: list[dict]) -> dict[str, list[str]]:
    """Every rule's violations over a graph; an empty dict when it passes."""
    found = {rule.name: rule.check(resources) for rule in RULES}
    return {k: v for k, v in found.items() if v}
