"""S3 rules for the cluster's bundle bucket (infra/program/components/bundle.py): its policy lets only the cluster's own
node roles read bundles, and nobody outside the account; every bucket blocks all public access. The buckets' and
roles' names are the contract's (hpcc_contract/names.py), matched as patterns."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from hpcc_contract import names

if __package__:  # imported as the package `policy` (the tests)
    from . import records
else:  # loaded by the Pulumi engine as a script directory (__main__.py puts it on sys.path)
    import records  # type: ignore[no-redef]

BUCKET = "aws:s3/bucket:Bucket"
BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
PUBLIC_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
BLOCK_FLAGS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
BUNDLE_BUCKET = re.compile(f"^{names.bundle_bucket(records.CLUSTER, records.ACCOUNT)}$")
READ_ACTIONS = ("s3:GetObject",)
STATE_BUCKET = re.compile(f"^{names.state_bucket(records.CLUSTER, records.ACCOUNT)}$")
HEAD_STATE_ACTIONS = ("s3:GetObject", "s3:PutObject", "s3:ListBucket")


def _principals(statement: Mapping) -> list[str]:
    principal = statement.get("Principal")
    if isinstance(principal, Mapping):
        return [str(p) for key, value in principal.items() for p in records.as_list(value)] or ["?"]
    return [str(principal)]


def bucket_policy_resource(rtype: str, inputs: dict, graph: list[dict] | None = None) -> list[str]:
    if rtype != BUCKET_POLICY:
        return []
    bucket = str(inputs.get("bucket") or "")
    m = BUNDLE_BUCKET.match(bucket)
    if not m:
        return []
    cluster, account = m.group("cluster"), m.group("account")
    node, head = names.role_name(cluster, "compute"), names.role_name(cluster, "head")
    readers = {f"arn:aws:iam::{account}:role/{node}", f"arn:aws:iam::{account}:role/{head}"}
    try:
        doc = json.loads(inputs.get("policy")) if isinstance(inputs.get("policy"), str) else inputs.get("policy")
    except ValueError:
        return ["policy is not a JSON policy document"]
    out = []
    for n, s in enumerate(records.as_list((doc or {}).get("Statement"))):
        if s.get("Effect") != "Allow":
            continue
        for p in _principals(s):
            if p not in readers:
                out.append(
                    f"Statement[{n}] lets {p} in: only cluster {cluster}'s node roles ({node}, "
                    f"{head} of account {account}) may read its bundles"
                )
        actions = [str(a) for a in records.as_list(s.get("Action"))]
        if "NotAction" in s or any(a not in READ_ACTIONS for a in actions):
            out.append(
                f"Statement[{n}] allows {', '.join(actions) or 'NotAction'}: the nodes only read bundles "
                "(s3:GetObject); nothing but the program writes them"
            )
        for r in map(str, records.as_list(s.get("Resource"))):
            if r != f"arn:aws:s3:::{bucket}/bundles/*":
                out.append(f"Statement[{n}] reaches {r}: allow arn:aws:s3:::{bucket}/bundles/* only")
    return out


def public_block_graph(resources: list[dict]) -> list[str]:
    """Every bucket has a public access block with all four settings on."""
    out = []
    blocks = {str(r["inputs"].get("bucket")): r for r in resources if r["type"] == PUBLIC_BLOCK}
    for b in resources:
        if b["type"] != BUCKET:
            continue
        names = {str(b["inputs"].get("bucket")), b["name"]}
        block = next((blocks[n] for n in names if n in blocks), None)
        if block is None:
            out.append(f"{b['name']}: no public access block; add one with {', '.join(BLOCK_FLAGS)} true")
            continue
        off = [f for f in BLOCK_FLAGS if not records.is_true(block["inputs"].get(f))]
        if off:
            out.append(f"{block['name']}: {', '.join(off)} must be true (the bucket holds what every node runs)")
    return out


def _policy_doc(inputs: dict):
    try:
        return json.loads(inputs.get("policy")) if isinstance(inputs.get("policy"), str) else inputs.get("policy")
    except ValueError:
        return None


def _denies_other_writers(statement: dict, objects: str, roles: set[str]) -> bool:
    """A Deny of s3:PutObject on every object of the bucket to "*", all but `roles` (aws:PrincipalArn)."""
    if statement.get("Effect") != "Deny" or statement.get("Principal") not in ("*", {"AWS": "*"}):
        return False
    actions = [str(a) for a in records.as_list(statement.get("Action"))]
    if not any(a in ("s3:PutObject", "s3:*", "*") for a in actions) or objects not in records.as_list(
        statement.get("Resource")
    ):
        return False
    condition = statement.get("Condition") or {}
    exempt = [(condition.get(op) or {}).get("aws:PrincipalArn") for op in ("ArnNotEquals", "ArnNotLike")]
    return set(condition) <= {"ArnNotEquals", "ArnNotLike"} and any(
        e is not None and set(records.as_list(e)) <= roles for e in exempt
    )


def state_bucket_policy_resource(rtype: str, inputs: dict, graph: list[dict] | None = None) -> list[str]:
    """The state bucket (infra/program/components/state.py): only the cluster's roles; the compute role reads
    membership.json and its deltas, the statuses (a rollout waits on its canaries') and the host certificates
    (certs/*) and writes its own status and host-keys objects only; the head gets, puts and lists; nobody else."""
    if rtype != BUCKET_POLICY:
        return []
    bucket = str(inputs.get("bucket") or "")
    m = STATE_BUCKET.match(bucket)
    if not m:
        return []
    cluster, account = m.group("cluster"), m.group("account")
    head_role, node_role = names.role_name(cluster, "head"), names.role_name(cluster, "compute")
    head, node = f"arn:aws:iam::{account}:role/{head_role}", f"arn:aws:iam::{account}:role/{node_role}"
    arn = f"arn:aws:s3:::{bucket}"
    own = "${ec2:SourceInstanceARN}.json"
    node_grants = {
        ("s3:GetObject", f"{arn}/{names.MEMBERSHIP_KEY}"),
        ("s3:GetObject", f"{arn}/{names.MEMBERSHIP_DELTAS_PREFIX}*"),
        ("s3:GetObject", f"{arn}/{names.STATUS_PREFIX}*"),
        ("s3:GetObject", f"{arn}/{names.CERTS_PREFIX}*"),
        ("s3:PutObject", f"{arn}/{names.STATUS_PREFIX}{own}"),
        ("s3:PutObject", f"{arn}/{names.HOSTKEYS_PREFIX}{own}"),
    }
    doc = _policy_doc(inputs)
    if doc is None:
        return ["policy is not a JSON policy document"]
    out = []
    if not any(
        _denies_other_writers(s, f"{arn}/*", {head, node}) for s in records.as_list((doc or {}).get("Statement"))
    ):
        out.append(
            f"no Deny of object writes (s3:PutObject on {arn}/*) to every principal but {head_role} and "
            f"{node_role} (aws:PrincipalArn): another principal of the account could write the membership, a "
            "node's status or a certificate the cluster trusts"
        )
    for n, s in enumerate(records.as_list((doc or {}).get("Statement"))):
        if s.get("Effect") != "Allow":
            continue
        actions = [str(a) for a in records.as_list(s.get("Action"))]
        targets = [str(r) for r in records.as_list(s.get("Resource"))]
        if "NotAction" in s or "NotResource" in s:
            out.append(f"Statement[{n}] allows with NotAction/NotResource; list the actions and objects")
            continue
        for p in _principals(s):
            if p == head:
                bad = [a for a in actions if a not in HEAD_STATE_ACTIONS]
                far = [t for t in targets if t not in (arn, f"{arn}/*")]
                if bad or far:
                    out.append(
                        f"Statement[{n}] lets the head {', '.join(bad or actions)} on {', '.join(far or targets)}:"
                        f" the head gets, puts and lists {arn} only"
                    )
            elif p == node:
                extra = sorted({(a, t) for a in actions for t in targets} - node_grants)
                if extra:
                    out.append(
                        f"Statement[{n}] lets the compute nodes {', '.join(f'{a} on {t}' for a, t in extra)}: "
                        f"a compute node reads {arn}/membership.json and its deltas, the statuses and certs/*, and "
                        "writes "
                        f"only its own status and host keys ({arn}/status/${{ec2:SourceInstanceARN}}.json, "
                        "hostkeys/ likewise)"
                    )
            else:
                out.append(
                    f"Statement[{n}] lets {p} in: only cluster {cluster}'s node roles ({head_role}, "
                    f"{node_role} of account {account}) reach its state bucket"
                )
    return out
