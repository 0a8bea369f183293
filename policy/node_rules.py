"""Rules on the nodes and their data: IMDSv2 on every template and instance, EBS and FSx for Lustre encrypted at
rest, no secret in user data. Each check reads records (policy/records.py) and returns messages that say what is
wrong and what would be right.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import re
import zlib

if __package__:  # imported as the package `policy` (the tests)
    from . import records
else:  # loaded by the Pulumi engine as a script directory (__main__.py puts it on sys.path)
    import records  # type: ignore[no-redef]

IMDS_HOP_LIMIT_MAX = 2  # a bridge-networked container is one hop past the node (infra/program/components/compute.py)
# Every FSx for Lustre deployment type is encrypted at rest (scratch: FSx-managed keys; persistent: KMS).
LUSTRE_TYPES = ("SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2")

SECRET_PATTERNS = [
    ("a private key block", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")),
    ("an AWS access key id", re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])")),
    (
        "an AWS secret access key",
        re.compile(
            r"(?i)(?:aws_?secret_?access_?key|secret_?access_?key|aws_?secret_?key)[\"']?[\s:=\"']+"
            r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"
        ),
    ),
]


def _decoded_texts(value: str) -> list[str] | None:
    """The user data as written, and as the instance will see it when it is base64 (and maybe gzip); None when
    it is gzip that does not unpack (cloud-init could not run it, and it cannot be checked). The plan's AWS
    decodes the same way (infra/plan/aws_rules.py); the pack may not import infra, so this is a copy that
    tests/test_one_place.py runs beside that one."""
    texts = [value]
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return texts  # an instance's `userData` is plain text
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error):
            return None
    texts.append(raw.decode("utf-8", errors="replace"))
    return texts


def imdsv2_resource(rtype: str, inputs: dict, graph: list[dict] | None = None) -> list[str]:
    tokens = (inputs.get("metadataOptions") or {}).get("httpTokens")
    if rtype == records.LT and tokens != "required":
        return [f"metadataOptions.httpTokens is {tokens!r}; set it to 'required' (IMDSv2 only)"]
    if rtype == records.INSTANCE:
        if tokens is None and not inputs.get("launchTemplate"):
            return ["no metadataOptions and no launch template: set metadataOptions.httpTokens to 'required'"]
        if tokens is not None and tokens != "required":
            return [f"metadataOptions.httpTokens is {tokens!r} (it overrides the template's); set it to 'required'"]
    return imds_reach(rtype, inputs) if rtype in (records.LT, records.INSTANCE) else []


def imds_reach(rtype: str, inputs: dict) -> list[str]:
    """How far IMDS reaches: the nodes' rule lets only root through, on the IPv4 endpoint (docs/security.md,
    "Instance metadata: root only"); a token that travels more than 2 hops, or the IPv6 endpoint, goes around it."""
    options = inputs.get("metadataOptions") or {}
    hops, ipv6 = options.get("httpPutResponseHopLimit"), options.get("httpProtocolIpv6")
    out = []
    if isinstance(hops, (int, float)) and hops > IMDS_HOP_LIMIT_MAX:
        out.append(
            f"metadataOptions.httpPutResponseHopLimit is {hops}; at most {IMDS_HOP_LIMIT_MAX} (1 keeps "
            "containers out, 2 is cluster.security.imdsForContainers)"
        )
    if ipv6 == "enabled":
        out.append(
            "metadataOptions.httpProtocolIpv6 is 'enabled'; keep it disabled: the nodes' root-only rule "
            "covers 169.254.169.254, not fd00:ec2::254"
        )
    return out


def imdsv2_graph(resources: list[dict]) -> list[str]:
    """An instance that leaves IMDS to its launch template must use a template of this stack (checked above)."""
    templates = [r for r in resources if r["type"] == records.LT]
    names = {r["name"] for r in templates}
    ids = {r["inputs"].get("id") for r in templates} - {None}
    lt_names = {r["inputs"].get("name") for r in templates} - {None}
    out = []
    for r in resources:
        if r["type"] != records.INSTANCE or (r["inputs"].get("metadataOptions") or {}).get("httpTokens"):
            continue
        ref = r["inputs"].get("launchTemplate") or {}
        if not ref:
            continue
        if ref.get("id") in ids or ref.get("name") in lt_names or names & set(r.get("dependsOn") or []):
            continue
        out.append(
            f"{r['name']}: launches from a template outside this stack ({ref.get('id') or ref.get('name')}), "
            "whose IMDS setting cannot be checked; set metadataOptions.httpTokens to 'required' on the instance"
        )
    return out


def ebs_encrypted_resource(rtype: str, inputs: dict, graph: list[dict] | None = None) -> list[str]:
    out = []
    if rtype == records.LT:
        mappings = [m for m in inputs.get("blockDeviceMappings") or [] if m.get("ebs") is not None]
        if not mappings:
            out.append(
                "no EBS block device mapping: the root volume would keep the AMI snapshot's encryption; "
                "map the root device with ebs.encrypted true"
            )
        for i, m in enumerate(inputs.get("blockDeviceMappings") or []):
            if m.get("ebs") is not None and not records.is_true(m["ebs"].get("encrypted")):
                out.append(
                    f"blockDeviceMappings[{i}].ebs.encrypted is {m['ebs'].get('encrypted')!r}; "
                    "it must be true (encrypted at rest)"
                )
    elif rtype == records.INSTANCE:
        root = inputs.get("rootBlockDevice")
        if root is None and not inputs.get("launchTemplate"):
            out.append("no rootBlockDevice and no launch template: set rootBlockDevice.encrypted true")
        elif root is not None and not records.is_true(root.get("encrypted")):
            out.append(f"rootBlockDevice.encrypted is {root.get('encrypted')!r}; it must be true (encrypted at rest)")
        for i, d in enumerate(inputs.get("ebsBlockDevices") or []):
            if not records.is_true(d.get("encrypted")):
                out.append(f"ebsBlockDevices[{i}].encrypted must be true (encrypted at rest)")
    elif rtype == records.EBS_VOLUME and not records.is_true(inputs.get("encrypted")):
        out.append("encrypted must be true (encrypted at rest)")
    return out


def file_system_encrypted_resource(rtype: str, inputs: dict, graph: list[dict] | None = None) -> list[str]:
    """FSx for Lustre has no switch that turns encryption at rest off: every documented deployment type is
    encrypted (scratch with FSx-managed keys, persistent with KMS). What can be checked is that the type is one
    of those, so no future or mistyped type slips through unexamined."""
    if rtype != records.LUSTRE:
        return []
    dep = inputs.get("deploymentType") or "SCRATCH_1"
    if dep not in LUSTRE_TYPES:
        return [
            f"deploymentType {dep!r} is not one hpcc knows to be encrypted at rest; use one of "
            f"{', '.join(LUSTRE_TYPES)}"
        ]
    if inputs.get("kmsKeyId") and dep.startswith("SCRATCH"):
        return [
            f"kmsKeyId is set on a {dep} file system, which is always encrypted with an FSx-managed key; "
            "use a PERSISTENT type for a customer key, or drop kmsKeyId"
        ]
    return []


def secrets_resource(rtype: str, inputs: dict, graph: list[dict] | None = None) -> list[str]:
    if rtype not in (records.LT, records.INSTANCE):
        return []
    out = []
    for key in ("userData", "userDataBase64"):
        value = inputs.get(key)
        if not isinstance(value, str) or not value:
            continue
        texts = _decoded_texts(value)
        if texts is None:
            out.append(
                f"{key} is gzip that does not decompress: cloud-init could not run it and it cannot be "
                "checked for secrets; give the gzip of the whole script"
            )
            continue
        for what, pattern in SECRET_PATTERNS:
            if any(pattern.search(t) for t in texts):
                out.append(
                    f"{key} holds {what}; keep secrets in Secrets Manager (hpcc/<cluster>/...) and fetch "
                    "them at boot with the node role"
                )
    return out


def secret_values_resource(rtype: str, inputs: dict, graph: list[dict] | None = None) -> list[str]:
    """The cluster's keys (SSH, munge) are random or generated, so no pattern finds them where they must not be:
    instead no secret value may enter the stack at all. A SecretVersion's value is kept in Pulumi's state."""
    if rtype != records.SECRET_VERSION:
        return []
    return [
        f"a secret version for {inputs.get('secretId') or 'a secret'} puts the secret's value into Pulumi state; "
        "create the secret empty and let the node that generates the key write it (PutSecretValue)"
    ]
