"""Pure checks on single config values that AWS, the provider or the nodes restrict: tag keys, S3 data repository
paths, the FSx mount point and the SSH source networks. Each returns the problems it finds (empty when fine), as
messages that say what is wrong and what would be right; config.py and config_rules.py attach the field path.
The limits are hpcc's decisions, justified in docs/security.md.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata

from hpcc_contract.settings import (
    PUBLIC_KEY,
)

# --- tag keys ---------------------------------------------------------------------------------------------------
# With instance metadata tags enabled, EC2 allows instance tag keys of letters a-z A-Z, digits and `+ - = . , _ : @`
# only (no spaces, no `/`), and no key that is just `.`, `..` or `_index`; a non-compliant key fails the launch
# (EC2 User Guide, "View tags for your EC2 instances using instance metadata",
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/work-with-tags-in-IMDS.html). `,` is dropped as well because
# IAM, FSx and Secrets Manager refuse it in tags (their Tag pattern `[\p{L}\p{Z}\p{N}_.:/=+\-@]`), and every
# resource of the cluster carries these tags.
TAG_KEY = re.compile(r"[A-Za-z0-9+\-=._:@]{1,128}")
TAG_KEY_RESERVED = (".", "..", "_index")
TAG_KEY_RULE = (
    "tag keys may hold only letters A-Z a-z, digits and + - = . _ : @ (no spaces or '/'), and may not "
    "be '.', '..' or '_index': the nodes read their tags from instance metadata, where EC2 refuses other keys"
)


def tag_key_problem(key: str) -> str | None:
    if TAG_KEY.fullmatch(key) and key not in TAG_KEY_RESERVED:
        return None
    return f"key {key!r}: {TAG_KEY_RULE}"


# --- SSH public keys (ssh.authorizedKeys) --------------------------------------------------------------------
# One OpenSSH public key line (hpcc_contract/settings.py: the settings text carries them to the nodes).
PUBLIC_KEY_CHARS = 1600
PUBLIC_KEYS_BYTES = 5000  # all of them: they share the nodes' 8 KB settings parameter (infra/render/node_settings.py)


def public_key_problem(key: str) -> str | None:
    if len(key) <= PUBLIC_KEY_CHARS and re.fullmatch(PUBLIC_KEY, key):
        return None
    return (
        f"{key[:40]!r}... is not one OpenSSH public key line ('ssh-ed25519 AAAA... you@laptop': a key type, its "
        "base64, an optional comment without spaces); give your own public key, never the cluster's"
    )


# --- S3 data repository path ------------------------------------------------------------------------------------
# General purpose bucket naming rules (S3 User Guide, "General purpose bucket naming rules",
# https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html).
BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
S3_KEY_BYTES = 1024  # an object key is at most 1,024 bytes of UTF-8 (S3 User Guide, "Naming Amazon S3 objects")
DRA_PATH_CHARS = 900  # pulumi-aws / terraform-provider-aws: data_repository_path StringLenBetween(3, 900)


def _bucket_problem(bucket: str) -> str | None:
    if not BUCKET.fullmatch(bucket):
        return (
            f"bucket {bucket!r} is not a valid S3 bucket name: 3-63 characters of a-z, 0-9, '.' and '-', "
            "starting and ending with a letter or digit"
        )
    if ".." in bucket:
        return f"bucket {bucket!r} has two adjacent periods, which S3 bucket names may not"
    try:
        ipaddress.IPv4Address(bucket)
        return f"bucket {bucket!r} is formatted as an IP address, which S3 bucket names may not be"
    except ValueError:
        pass
    if bucket.startswith(BUCKET_PREFIXES) or bucket.endswith(BUCKET_SUFFIXES):
        return (
            f"bucket {bucket!r} uses a prefix or suffix S3 reserves ({', '.join(BUCKET_PREFIXES)}; "
            f"{', '.join(BUCKET_SUFFIXES)})"
        )
    return None


def _unprintable(text: str) -> list[str]:
    """Control, format (bidi overrides, zero-width), separator-line, private-use, unassigned and surrogate
    characters: the ones that make a key print differently from what it is."""
    return [f"U+{ord(ch):04X}" for ch in text if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")]


def s3_path_problems(path: str) -> list[str]:
    if not path.startswith("s3://"):
        return [f"must be an S3 URL like s3://my-bucket/prefix; got {path[:80]!r}"]
    if len(path) > DRA_PATH_CHARS:
        return [f"is {len(path)} characters; the data repository path may be at most {DRA_PATH_CHARS}"]
    bucket, _, prefix = path[len("s3://") :].partition("/")
    out = [p for p in (_bucket_problem(bucket),) if p]
    bad = _unprintable(prefix)
    if bad:
        out.append(
            f"the prefix holds unprintable or direction-changing characters ({', '.join(sorted(set(bad)))}); "
            "use printable characters only"
        )
    if len(prefix.encode("utf-8", "surrogatepass")) > S3_KEY_BYTES:
        out.append(f"the prefix is longer than an S3 object key may be ({S3_KEY_BYTES} bytes of UTF-8)")
    return out


# --- FSx mount point --------------------------------------------------------------------------------------------
# The nodes' rule, MOUNT_POINT's in hpcc_contract/settings.py (mount_point_problems, imported above): a node refuses
# a settings text that breaks it.


# --- SSH source networks ----------------------------------------------------------------------------------------
# At most a /16's worth of IPv4 addresses in all, overlaps counted once (why: docs/security.md). policy/network_rules.py
# keeps the same number for the policy pack, which must run without hpcc installed; tests/policy/test_policy.py checks
# that both agree on the same cases.
SSH_MAX_IPV4_ADDRESSES = 65_536


def ipv4_address_count(networks: list[ipaddress.IPv4Network]) -> int:
    return sum(n.num_addresses for n in ipaddress.collapse_addresses(networks))
