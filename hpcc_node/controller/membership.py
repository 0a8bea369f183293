"""Membership: one JSON object in S3 with a generation number, written by the controller and followed by every
node agent. Size does not matter there (4,096 nodes are some 500 KB), and an agent's poll is a conditional GET
that costs no transfer when nothing changed.

S3 User Guide, "Conditional requests": GetObject with If-None-Match answers 304 Not Modified while the ETag is
the same; PutObject with If-Match writes only over the version read, and with If-None-Match "*" only if the key
does not exist (412 Precondition Failed otherwise), so two writers never overwrite each other's generation.
The client is a boto3 S3 client, injected; the same functions serve the controller and the agent.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, Optional, Tuple

from hpcc_contract import formats
from hpcc_contract.names import MEMBERSHIP_KEY, STATUS_PREFIX
from hpcc_node.awscli import error_code

FORMAT = formats.MEMBERSHIP
# The nodes' verdicts about themselves (STATUS_PREFIX): one small object per node, written on a change or a
# heartbeat, listed by the controller each loop (observe.reports) and fetched only where its ETag changed.


class Conflict(Exception):
    """The object changed since it was read (another writer): read it again before writing."""


def encode(body: Dict[str, Any], generation: int) -> bytes:
    doc = formats.stamp({"generation": generation, **body}, FORMAT)
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def instance_arn(partition: str, region: str, account: str, instance_id: str) -> str:
    """arn:<partition>:ec2:<region>:<account>:instance/<id>: the `${ec2:SourceInstanceARN}` a node's role may write
    its status under (IAM User Guide, "IAM policy elements: Variables and tags")."""
    return f"arn:{partition}:ec2:{region}:{account}:instance/{instance_id}"


def status_key(arn: str) -> str:
    """Each node writes only status/<its instance ARN>.json."""
    return f"{STATUS_PREFIX}{arn}.json"


def key_instance(key: str) -> str:
    """The instance id a status key names ("" when it names none)."""
    found = re.fullmatch(
        re.escape(STATUS_PREFIX) + r"arn:[a-z-]+:ec2:[a-z0-9-]+:[0-9]{12}:instance/(i-[0-9a-f]+)\.json", key
    )
    return found.group(1) if found else ""


def status_body(name: str, instance_id: str, ok: bool, failure: str = "", evidence: str = "", at: float = 0.0) -> bytes:
    """What a node writes at status_key(its ARN) (besides the operator's fields): its verdict, with a
    hpcc_contract.taxonomy class when not ok."""
    doc = {"name": name, "instance_id": instance_id, "ok": ok, "failure": failure, "evidence": evidence[:300], "at": at}
    return json.dumps(formats.stamp(doc, formats.STATUS), sort_keys=True).encode()


def newer(current: Optional[int], read: Optional[Dict[str, Any]]) -> bool:
    """Apply `read` only if it is a membership of a later generation than the one applied (None: none yet)."""
    if not read or not isinstance(read.get("generation"), int):
        return False
    return current is None or read["generation"] > current


def head(s3: Any, bucket: str, key: str = MEMBERSHIP_KEY) -> Tuple[int, str]:
    """(generation, ETag) of the published object; (0, "") when there is none."""
    try:
        meta = s3.head_object(Bucket=bucket, Key=key)
    except Exception as e:
        if error_code(e) in ("404", "NoSuchKey", "NotFound"):
            return 0, ""
        raise
    return int(meta.get("Metadata", {}).get("generation", "0")), meta["ETag"]


def publish(s3: Any, bucket: str, body: Dict[str, Any], generation: int, etag: str, key: str = MEMBERSHIP_KEY) -> str:
    """Write generation `generation` over the object whose ETag is `etag` ("" : create it); returns the new ETag."""
    cond = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
    try:
        out = s3.put_object(
            Bucket=bucket,
            Key=key,
            Body=encode(body, generation),
            ContentType="application/json",
            Metadata={"generation": str(generation)},
            **cond,
        )
    except Exception as e:
        if error_code(e) in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
            raise Conflict(f"s3://{bucket}/{key} changed since generation {generation - 1} was read") from e
        raise
    return out["ETag"]


def read(s3: Any, bucket: str, etag: str = "", key: str = MEMBERSHIP_KEY) -> Tuple[Optional[Dict[str, Any]], str]:
    """The membership and its ETag, or (None, etag) when it is unchanged since `etag` (304) or absent."""
    try:
        out = s3.get_object(Bucket=bucket, Key=key, **({"IfNoneMatch": etag} if etag else {}))
    except Exception as e:
        if error_code(e) in ("304", "NotModified"):
            return None, etag
        if error_code(e) in ("NoSuchKey", "404"):
            return None, ""
        raise
    return json.loads(out["Body"].read()), out["ETag"]
