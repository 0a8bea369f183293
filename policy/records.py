"""The records hpcc's rules read, and the one place that makes them from what the engine sends.

A record is `{"type", "name", "inputs"[, "dependsOn"]}` with `inputs` in Pulumi's camelCase wire names: exactly
what `hpcc plan` records (`PlanResult.resources`), and what the policy pack (`policy/pack.py`) builds from
`args.props` after `normalise()`. Here: the resource type tokens the rules look for, `normalise`, and the small
readers every rule module shares.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from hpcc_contract import names

# The cluster's names as the rules match them: hpcc_contract/names.py's functions given these patterns for a part.
CLUSTER = r"(?P<cluster>[a-z][a-z0-9-]*[a-z0-9])"
ACCOUNT = r"(?P<account>\d{12})"
ANY_ACCOUNT = r"\d{12}"


def escaped_paths(cluster: str) -> names.Paths:
    """The cluster's parameter and secret names with the cluster escaped: each one a pattern of itself."""
    return names.Paths(re.escape(cluster))


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
SECRET_VERSION = "aws:secretsmanager/secretVersion:SecretVersion"
VPC_IPV6 = "aws:ec2/vpcIpv6CidrBlockAssociation:VpcIpv6CidrBlockAssociation"
TAG_MAPS = ("tags", "tagsAll")


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


# --- readers shared by the rule modules -----------------------------------------------------------------------


def is_true(v: Any) -> bool:
    return v is True or str(v).lower() == "true"


def as_list(v: Any) -> list:
    if v is None:
        return []
    return list(v) if isinstance(v, Sequence) and not isinstance(v, (str, bytes)) else [v]


def role_tag(inputs: dict) -> str | None:
    """The node role (head | compute) of an instance or of the instances a launch template makes."""
    tag = (inputs.get("tags") or {}).get(names.TAG_ROLE)
    for spec in inputs.get("tagSpecifications") or []:
        if spec.get("resourceType") == "instance":
            tag = tag or (spec.get("tags") or {}).get(names.TAG_ROLE)
    return tag
