"""Membership: one JSON object in S3 with a generation number, written by the controller and followed by every
node agent. At 4,096 nodes it is some 420 KB, so a node that already holds generation n does not read it again
for n+1: the controller writes each generation's change (its delta: the entries that changed, the names that left)
under a ring of keys before the object it leads to, and an agent's poll is a HeadObject whose metadata names the
generation and the sha256 of the object's bytes; the agent patches its copy with the deltas since its generation
and takes the result only when its bytes hash to that sha256 (else, or when a delta is missing, it reads the whole
object). A change then costs each node O(what changed), not O(cluster). The generation is the controller's own
count: one past both its ledger's record and the object's, so an object overwritten with garbage never sends it
back under the nodes (publish_next); a node takes a lower one only from a changed object whose bytes hash to its
sha256 (the count reset with the ledger: went_back).

S3 User Guide, "Conditional requests": GetObject with If-None-Match answers 304 Not Modified while the ETag is
the same; PutObject with If-Match writes only over the version read, and with If-None-Match "*" only if the key
does not exist (412 Precondition Failed otherwise), so two writers never overwrite each other's generation.
The client is a boto3 S3 client, injected; the same functions serve the controller and the agent.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

from hpcc_contract import formats
from hpcc_contract.names import (
    MEMBERSHIP_DELTAS_KEPT,
    MEMBERSHIP_GENERATION_META,
    MEMBERSHIP_KEY,
    MEMBERSHIP_SHA256_META,
    STATUS_PREFIX,
    membership_delta_key,
)
from hpcc_node.awscli import error_code

FORMAT = formats.MEMBERSHIP
NOT_FOUND = ("404", "NoSuchKey", "NotFound")
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


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def head_meta(s3: Any, bucket: str, key: str = MEMBERSHIP_KEY) -> Tuple[int, str, str]:
    """(generation, ETag, sha256 of its bytes) of the published object: (0, "", "") when there is none; a sha256 of
    "" when it was written before deltas (then a node reads it whole)."""
    try:
        meta = s3.head_object(Bucket=bucket, Key=key)
    except Exception as e:
        if error_code(e) in NOT_FOUND:
            return 0, "", ""
        raise
    found = meta.get("Metadata") or {}
    generation = str(found.get(MEMBERSHIP_GENERATION_META, "0"))
    return int(generation) if generation.isdigit() else 0, meta["ETag"], str(found.get(MEMBERSHIP_SHA256_META, ""))


def head(s3: Any, bucket: str, key: str = MEMBERSHIP_KEY) -> Tuple[int, str]:
    """(generation, ETag) of the published object; (0, "") when there is none."""
    generation, etag, _ = head_meta(s3, bucket, key)
    return generation, etag


def publish(s3: Any, bucket: str, body: Dict[str, Any], generation: int, etag: str, key: str = MEMBERSHIP_KEY) -> str:
    """Write generation `generation` over the object whose ETag is `etag` ("" : create it); returns the new ETag."""
    cond = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
    data = encode(body, generation)
    try:
        out = s3.put_object(
            Bucket=bucket,
            Key=key,
            Body=data,
            ContentType="application/json",
            Metadata={MEMBERSHIP_GENERATION_META: str(generation), MEMBERSHIP_SHA256_META: sha256(data)},
            **cond,
        )
    except Exception as e:
        if error_code(e) in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
            raise Conflict(f"s3://{bucket}/{key} changed since generation {generation - 1} was read") from e
        raise
    return out["ETag"]


class Poll(NamedTuple):
    """What an agent's poll found: the membership (None: unchanged or absent), its ETag, and whether its bytes are
    whole as the controller wrote them (patched to its sha256, or read whole and hashing to the sha256 in the same
    GetObject's metadata)."""

    doc: Optional[Dict[str, Any]]
    etag: str
    intact: bool = False


def whole(s3: Any, bucket: str, key: str = MEMBERSHIP_KEY) -> Tuple[bytes, str, str]:
    """The object's bytes, ETag and the sha256 its metadata names ("" when none); (b"", "", "") when absent."""
    try:
        out = s3.get_object(Bucket=bucket, Key=key)
    except Exception as e:
        if error_code(e) in NOT_FOUND:
            return b"", "", ""
        raise
    return out["Body"].read(), out["ETag"], str((out.get("Metadata") or {}).get(MEMBERSHIP_SHA256_META, ""))


def read_whole(s3: Any, bucket: str) -> Poll:
    """The whole membership, checked against the sha256 in its own metadata; ValueError when it is no JSON."""
    data, etag, digest = whole(s3, bucket)
    if not etag:
        return Poll(None, "")
    return Poll(json.loads(data), etag, bool(digest) and sha256(data) == digest)


def read(s3: Any, bucket: str, etag: str = "", key: str = MEMBERSHIP_KEY) -> Tuple[Optional[Dict[str, Any]], str]:
    """The membership and its ETag, or (None, etag) when it is unchanged since `etag` (304) or absent."""
    try:
        out = s3.get_object(Bucket=bucket, Key=key, **({"IfNoneMatch": etag} if etag else {}))
    except Exception as e:
        if error_code(e) in ("304", "NotModified"):
            return None, etag
        if error_code(e) in NOT_FOUND:
            return None, ""
        raise
    return json.loads(out["Body"].read()), out["ETag"]


def body_of(doc: Dict[str, Any]) -> Dict[str, Any]:
    """A membership document without its stamp and generation: what encode() takes."""
    return {k: v for k, v in doc.items() if k not in (formats.FORMAT_KEY, "generation")}


def delta(before: Dict[str, Any], after: Dict[str, Any], generation: int) -> Dict[str, Any]:
    """Generation `generation`'s change from the body before it: the node entries that are new or changed, the
    names that left, the rest of the body whole (groups, bundle, head: a few hundred bytes), and the sha256 of the
    whole object it leads to."""
    old = {str(n.get("name")): n for n in before.get("nodes") or ()}
    new = {str(n.get("name")): n for n in after.get("nodes") or ()}
    doc = {
        "from": generation - 1,
        "generation": generation,
        "changed": [new[name] for name in sorted(new) if old.get(name) != new[name]],
        "removed": sorted(set(old) - set(new)),
        "rest": {k: v for k, v in after.items() if k != "nodes"},
        "sha256": sha256(encode(after, generation)),
    }
    return formats.stamp(doc, formats.MEMBERSHIP_DELTA)


def patch(doc: Dict[str, Any], change: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The membership `change` leads to from `doc` (its `from` generation), or None when it does not follow from
    `doc` or the result's bytes are not the ones the controller wrote (its sha256)."""
    formats.check_doc("membership delta", change, formats.MEMBERSHIP_DELTA)
    if doc.get("generation") != change.get("from") or not isinstance(change.get("generation"), int):
        return None
    nodes = {str(n.get("name")): n for n in doc.get("nodes") or ()}
    for name in change.get("removed") or ():
        nodes.pop(name, None)
    for entry in change.get("changed") or ():
        nodes[str(entry.get("name"))] = entry
    # membership_body (decide.py) lists the nodes sorted by name, so the same nodes give the same bytes
    body = {**(change.get("rest") or {}), "nodes": [nodes[name] for name in sorted(nodes)]}
    if sha256(encode(body, change["generation"])) != change.get("sha256"):
        return None
    return formats.stamp({"generation": change["generation"], **body}, FORMAT)  # what encode() wrote, unparsed


def put_delta(s3: Any, bucket: str, before: Dict[str, Any], after: Dict[str, Any], generation: int) -> None:
    """Written before the object it leads to, so a node that sees generation n finds n's delta."""
    data = json.dumps(delta(before, after, generation), sort_keys=True, separators=(",", ":")).encode()
    s3.put_object(Bucket=bucket, Key=membership_delta_key(generation), Body=data, ContentType="application/json")


class Published(NamedTuple):
    """What the controller published last: the delta of the next generation is taken from its body."""

    generation: int
    etag: str
    body: Dict[str, Any]


def publish_next(
    s3: Any,
    bucket: str,
    body: Dict[str, Any],
    last: Optional[Published],
    mark: Callable[[int], None],
    recorded: int = 0,
    warn: Callable[[str], None] = lambda line: None,
) -> Published:
    """The next generation: one past both the ledger's `recorded` one and the published object's own, so a
    corrupted object (garbage, no metadata: generation 0) never sends the count back below what nodes applied. Its
    delta from the published one (the body held from the last publish, else read once, as after a restart), then
    the object itself over the ETag read. `mark(generation)` runs first (the ledger's record that a publish is under
    way, fenced by the controller's lease); `warn` gets a line naming a corrupted object and why."""
    found, etag, digest = head_meta(s3, bucket)
    generation = max(found, recorded) + 1
    mark(generation)
    if etag and found in (0, generation - 1):  # one older than the ledger's record is no base: nothing to read
        before, why = _base(s3, bucket, last, found, etag, digest)
        if why:
            warn(
                f"s3://{bucket}/{MEMBERSHIP_KEY} (ETag {etag[:40]}) is corrupted: {why}; generation {generation} "
                f"(the ledger recorded {recorded}) is written over it whole, with no delta"
            )
        if before is not None:  # else no delta: the nodes read the whole object, as they would without one
            put_delta(s3, bucket, before, body, generation)
    return Published(generation, publish(s3, bucket, body, generation, etag), body)


def _base(
    s3: Any, bucket: str, last: Optional[Published], found: int, etag: str, digest: str
) -> Tuple[Optional[Dict[str, Any]], str]:
    """The published object's body (generation `found`, ETag `etag`) as its successor's delta's base, and why it is
    corrupted ("" : it is not). A delta is never written from a body that is not the one its generation had."""
    if last is not None and (last.generation, last.etag) == (found, etag):
        return last.body, ""  # the bytes this controller wrote (the same ETag): not read again
    if not found:
        return None, "no generation in its metadata"
    try:
        data, now, _ = whole(s3, bucket)
        doc = json.loads(data)
    except ValueError as e:
        return None, f"its bytes are no JSON ({type(e).__name__})"
    if now != etag:
        return None, ""  # written again since the HeadObject: the publish's If-Match refuses it (Conflict)
    if digest and sha256(data) != digest:
        return None, "its bytes do not hash to the sha256 in its metadata"
    if not isinstance(doc, dict) or doc.get("generation") != found:
        return None, f"its body is not the generation {found} its metadata names"
    return body_of(doc), ""


def went_back(applied: Optional[int], doc: Optional[Dict[str, Any]]) -> bool:
    """Whether `doc` is a membership of a lower generation than the one applied: the controller's count was reset
    (its ledger lost with the object), or the object is not the controller's."""
    found = (doc or {}).get("generation")
    return isinstance(found, int) and applied is not None and found < applied


def reset_line(applied: int, doc: Dict[str, Any], intact: bool) -> str:
    """The agent's log line for a membership whose generation went back (went_back)."""
    gone = f"membership generation went back from {applied} to {doc.get('generation')}"
    if intact:  # only the controller writes the object: a reset, its count lost, not an older copy
        return f"{gone}: a new object whose bytes hash to its sha256 (the controller's, after a reset): applied"
    return f"{gone}: its bytes do not hash to the sha256 in its metadata (not the controller's): not applied"


def follow(s3: Any, bucket: str, doc: Optional[Dict[str, Any]], etag: str) -> Tuple[Optional[Dict[str, Any]], str]:
    """poll() without whether the bytes are intact."""
    got = poll(s3, bucket, doc, etag)
    return got.doc, got.etag


def poll(s3: Any, bucket: str, doc: Optional[Dict[str, Any]], etag: str) -> Poll:
    """An agent's poll: the membership and its ETag when it changed since `etag` (`doc`: the copy held, of that
    ETag), else (None, etag); (None, "") when there is none. One HeadObject while nothing changed; the deltas since
    `doc`'s generation when they lead to the published bytes; the whole object otherwise."""
    generation, now, digest = head_meta(s3, bucket)
    if not now:
        return Poll(None, "")
    if now == etag:
        return Poll(None, etag)
    patched = _patched(s3, bucket, doc, generation, digest)
    if patched is not None:
        return Poll(patched, now, True)
    return read_whole(s3, bucket)


def _patched(
    s3: Any, bucket: str, doc: Optional[Dict[str, Any]], generation: int, digest: str
) -> Optional[Dict[str, Any]]:
    held = (doc or {}).get("generation")
    if not digest or not isinstance(held, int) or not 0 < generation - held <= MEMBERSHIP_DELTAS_KEPT:
        return None
    current: Optional[Dict[str, Any]] = doc
    for n in range(held + 1, generation + 1):
        try:
            change = json.loads(s3.get_object(Bucket=bucket, Key=membership_delta_key(n))["Body"].read())
            current = patch(current, change) if current is not None and isinstance(change, dict) else None
        except Exception:  # noqa: BLE001 - the deltas only save bytes: one not there (a ring slot not written
            # yet), unreadable, of a newer format, or not readable by this node's role yet (a bundle that follows
            # deltas can arrive before `hpcc up` grants their prefix): the whole object, as before deltas
            return None
        if current is None:
            return None
    # patch() checked each step's bytes against its delta's sha256: the last one must be the published object's
    return current if change.get("sha256") == digest else None
