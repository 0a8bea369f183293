"""Where host keys, host certificates and the host CA live (issue 22 item 4): one small module, so the storage can move
without touching the signing or the installing. Nothing per node is a Pulumi resource (issue 19): the state bucket
`hpcc-<c>-state-<account>` holds
- `hostkeys/<instance-arn>.json` (written by that instance only: IAM resource
`.../hostkeys/${ec2:SourceInstanceARN}.json`,
  the status object's pattern): the node's host public keys, the address it publishes them for, and what it applied
  (the CAs it trusts, the CA of the certificates it serves) so that `hpcc rotate-keys` can wait for every node. Not
  inside its status object: the bootstrap's status step rewrites that whole object at every step.
- `certs/<node>.json` (written by the head only): the node's certificates and the CAs every node trusts.
Besides: `hpcc/<c>/host-ca` (Secrets Manager, head only): the CA private keys, which one signs, the rotation applied;
`/hpcc/<c>/rotation` (SSM, a Pulumi resource created "none", set by the operator's `hpcc rotate-keys`): the rotation
the head is to apply. Standard library only (shipped in the bundle); the names are hpcc_contract/names.py's."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from hpcc_contract.names import NO_ROTATION
from hpcc_node.awscli import error_code

PHASES = ("add", "switch", "retire")  # hpcc rotate-keys, in order
KEY_LINE = re.compile(
    r"(ssh-ed25519|ecdsa-sha2-nistp(256|384|521)|ssh-rsa)(-cert-v01@openssh\.com)? [A-Za-z0-9+/]+={0,3}"
)
INSTANCE_ID = re.compile(r"i-[0-9a-f]{8,17}")
ROTATION_ID = re.compile(r"[0-9]{8}T[0-9]{6}Z")  # when `hpcc rotate-keys` started it (UTC)


def key_line(text: str) -> str:
    """`type base64` of a public key or certificate line (the comment dropped); ValueError if it is not one."""
    line = " ".join(str(text).split()[:2])
    if not KEY_LINE.fullmatch(line):
        raise ValueError(f"not an OpenSSH public key line: {line[:40]!r}")
    return line


def fingerprint(line: str) -> str:
    """ssh-keygen -l's SHA256 fingerprint of a public key line: the unpadded base64 of the blob's SHA-256
    (PROTOCOL.certkeys / ssh-keygen(1) -l)."""
    blob = base64.b64decode(key_line(line).split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


# -- the certificate blob: which host key a certificate is for (PROTOCOL.certkeys) -----------------------------
_FIELDS = {"ssh-ed25519": 1, "ecdsa-sha2-nistp256": 2, "ecdsa-sha2-nistp384": 2, "ecdsa-sha2-nistp521": 2, "ssh-rsa": 2}


def _string(blob: bytes, at: int) -> Tuple[bytes, int]:
    (n,) = struct.unpack(">I", blob[at : at + 4])
    if at + 4 + n > len(blob):
        raise ValueError("truncated certificate")
    return blob[at + 4 : at + 4 + n], at + 4 + n


def certified_key(cert: str) -> str:
    """The plain public key line a certificate line certifies: its type without -cert-v01, then the key's fields
    after the nonce (RSA: e, n; ECDSA: curve, Q; Ed25519: the key)."""
    blob = base64.b64decode(key_line(cert).split()[1])
    kind, at = _string(blob, 0)
    plain = kind.decode().replace("-cert-v01@openssh.com", "")
    if plain not in _FIELDS:
        raise ValueError(f"not a certificate: {kind[:40]!r}")
    _, at = _string(blob, at)  # the nonce
    start = at
    for _ in range(_FIELDS[plain]):
        _, at = _string(blob, at)
    out = struct.pack(">I", len(plain)) + plain.encode() + blob[start:at]
    return f"{plain} {base64.b64encode(out).decode()}"


class Published(NamedTuple):
    """What a node wrote to its hostkeys object."""

    ip: str
    keys: List[str]
    trust: List[str]  # fingerprints of the CAs its known-hosts file lists
    cert_ca: str  # fingerprint of the CA of the certificates it serves ("" before it has any)
    instance: str = ""  # its instance id, for the certificate's key ID (a label: the principals are the head's)
    login_keys: str = ""  # the rotation phase whose cluster keys it installed (hpcc_node/cluster_keys.py), "" none
    authorized: Dict[str, int] = {}  # user (root, the login user) -> how many cluster keys it authorizes


def publish_text(p: Published) -> str:
    return json.dumps(
        {
            "ip": p.ip,
            "keys": p.keys,
            "trust": p.trust,
            "certCa": p.cert_ca,
            "instance": p.instance,
            "loginKeys": p.login_keys,
            "authorized": p.authorized,
        },
        sort_keys=True,
    )


def read_published(text: Optional[str]) -> Optional[Published]:
    """None for Pulumi's placeholder or anything malformed (a node's root writes this: it is data, checked)."""
    try:
        d = json.loads(text or "")
        instance = str(d.get("instance", ""))
        counts = d.get("authorized") or {}
        return Published(
            str(d["ip"]),
            [key_line(k) for k in d["keys"]][:4],
            [str(f)[:60] for f in d["trust"]][:4],
            str(d.get("certCa", ""))[:60],
            instance if INSTANCE_ID.fullmatch(instance) else "",
            str(d.get("loginKeys", ""))[:40],
            {str(u)[:32]: int(n) for u, n in list(counts.items())[:2]},
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


class Issued(NamedTuple):
    """What the head wrote to a node's certs object."""

    ip: str
    certs: List[str]
    cas: List[str]  # the CA public keys every node trusts now (two during a rotation)
    ca: str  # fingerprint of the CA that signed these certificates
    valid_from: int
    valid_to: int
    instance: str = ""  # the instance whose published keys these certify (a replacement is signed at once)
    rotation: str = ""  # the rotation phase applied when signed ("<id>:<phase>"): the nodes follow its cluster keys


def issue_text(i: Issued) -> str:
    return json.dumps(
        {
            "ip": i.ip,
            "certs": i.certs,
            "cas": i.cas,
            "ca": i.ca,
            "validFrom": i.valid_from,
            "validTo": i.valid_to,
            "instance": i.instance,
            "rotation": i.rotation,
        },
        sort_keys=True,
    )


def read_issued(text: Optional[str]) -> Optional[Issued]:
    try:
        d = json.loads(text or "")
        return Issued(
            str(d["ip"]),
            [key_line(c) for c in d["certs"]],
            [key_line(c) for c in d["cas"]],
            str(d["ca"]),
            int(d["validFrom"]),
            int(d["validTo"]),
            str(d.get("instance", "")),
            str(d.get("rotation", "")),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


class Rotation(NamedTuple):
    id: str
    phase: str  # one of PHASES


def rotation_text(r: Rotation) -> str:
    return json.dumps({"id": r.id, "phase": r.phase}, sort_keys=True)


def read_rotation(text: Optional[str]) -> Optional[Rotation]:
    """None when there is none (no parameter, or Pulumi's "none"); ValueError naming what is wrong with one that is
    malformed."""
    if not text or text.strip() == NO_ROTATION:
        return None
    try:
        d = json.loads(text)
        r = Rotation(str(d["id"]), str(d["phase"]))
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"the rotation parameter is not {{\"id\", \"phase\"}} JSON ({e})") from None
    if not ROTATION_ID.fullmatch(r.id) or r.phase not in PHASES:
        raise ValueError(
            f"the rotation parameter names id {r.id[:20]!r} phase {r.phase[:10]!r}: expected a "
            f"YYYYMMDDTHHMMSSZ id and one of {', '.join(PHASES)}"
        )
    return r


class Authority(NamedTuple):
    """The host-ca secret's value: the CA key pairs (private, public), the one that signs, the rotation applied."""

    keys: List[Dict[str, str]]
    signing: int
    rotation: str  # "<id>:<phase>" last applied, "" before any

    @property
    def trusted(self) -> List[str]:
        return [k["public"] for k in self.keys]

    @property
    def signer(self) -> Dict[str, str]:
        return self.keys[self.signing]


def authority_text(a: Authority) -> str:
    return json.dumps({"keys": a.keys, "signing": a.signing, "rotation": a.rotation}, sort_keys=True)


def read_authority(text: str) -> Authority:
    d: Any = json.loads(text)
    keys = [{"private": str(k["private"]), "public": key_line(k["public"])} for k in d["keys"]]
    signing = int(d["signing"])
    if not keys or not 0 <= signing < len(keys):
        raise ValueError("the host-ca secret names no signing key")
    return Authority(keys, signing, str(d.get("rotation", "")))


def get(s3: Any, bucket: str, key: str, etag: str = "") -> Tuple[Optional[str], str]:
    """(text, ETag) of an object; (None, etag) when unchanged since `etag` (a conditional GET: 304) and (None, "")
    when there is none (S3 API reference, GetObject If-None-Match)."""
    try:
        out = s3.get_object(Bucket=bucket, Key=key, **({"IfNoneMatch": etag} if etag else {}))
    except Exception as e:  # noqa: BLE001 - botocore's or hpcc_node.awscli's ClientError: told apart by code
        if error_code(e) in ("304", "NotModified"):
            return None, etag
        # Without s3:ListBucket (a compute node), S3 answers a missing key with 403, not 404 (GetObject, "Permissions").
        if error_code(e) in ("NoSuchKey", "404", "NotFound", "AccessDenied", "403"):
            return None, ""
        raise
    return out["Body"].read().decode(), str(out.get("ETag", ""))


def put(s3: Any, bucket: str, key: str, text: str) -> None:
    s3.put_object(Bucket=bucket, Key=key, Body=text.encode(), ContentType="application/json")
