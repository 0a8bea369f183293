"""Placeholders left in a stack file: values that only stand for the user's own, as the shipped examples carry
them (an S3 bucket of the example's, a documentation address range, a `you@laptop` key). Each is valid input, so the
config rules take it; planned, it is a warning, and `hpcc preflight` and `hpcc up` refuse it (an error naming the
field and the fix), since on AWS it would link someone else's bucket, let nobody log in, or install a key nobody
holds.

What counts, and why each is "clearly an example":
- the documentation address ranges of RFC 5737 (TEST-NET-1/2/3: 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24),
  which are never routed on the internet, so nobody can connect from them;
- values copied from hpcc's own examples (EXAMPLE_VALUES: tests/config/test_placeholders.py checks that every
  example's placeholder is listed, and that nothing else in them is flagged);
- names that say they are one: a bucket named `your-...` or holding `example`, `placeholder` or `changeme`; a key
  whose comment is `you@...`, `yourname@...`, holds `example` or is in an example domain (RFC 2606: example.com).
"""

from __future__ import annotations

import ipaddress
import re

from infra.config.validators.findings import ERROR, WARNING, Finding

DOCUMENTATION_RANGES = tuple(ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"))
# Values the shipped examples hold in place of the user's own (examples/p5-llm.yaml).
EXAMPLE_VALUES = {
    "bucket": ("my-llm-datasets",),
    "key": ("AAAAC3NzaC1lZDI1NTE5AAAAIAdecSRFR0wnzfd+gZo01f3h1LlaxXbHdtb4hdt4DXiz",),
}
SAYS_EXAMPLE = re.compile(r"example|placeholder|changeme|change-me|replace-?me|^your-", re.I)
EXAMPLE_KEY_COMMENT = re.compile(r"^(you|your[-_.a-z0-9]*)@|@example\.(com|org|net)$|example|placeholder", re.I)


def _cidr(i: int, cidr: str) -> Finding | None:
    try:
        net = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return None  # the config rules say why
    doc = next((d for d in DOCUMENTATION_RANGES if net.version == d.version and net.overlaps(d)), None)
    if doc is None:
        return None
    return Finding(
        WARNING,
        f"cluster.ssh.allowedCidrs[{i}]",
        f"{cidr} is in {doc}, an address range reserved for documentation (RFC 5737): nobody can connect from it. "
        "Put your own network here (one address: `curl -s https://checkip.amazonaws.com`, then /32), or remove "
        "ssh.allowedCidrs to log in with Session Manager (`hpcc ssh`)",
    )


def _bucket(path: str | None) -> Finding | None:
    if not path:
        return None
    bucket = path.removeprefix("s3://").split("/", 1)[0]
    if bucket not in EXAMPLE_VALUES["bucket"] and not SAYS_EXAMPLE.search(bucket):
        return None
    return Finding(
        WARNING,
        "cluster.fsx.dataRepositoryPath",
        f"{path} names an example bucket ({bucket}), not yours: put s3://YOUR-BUCKET/PREFIX here (a bucket of "
        "yours in the stack's region), or remove the key to have no S3 link",
    )


def _key(i: int, key: str) -> Finding | None:
    words = key.split()
    body, comment = (words[1] if len(words) > 1 else ""), " ".join(words[2:])
    if body not in EXAMPLE_VALUES["key"] and not EXAMPLE_KEY_COMMENT.search(comment):
        return None
    return Finding(
        WARNING,
        f"cluster.ssh.authorizedKeys[{i}]",
        f"the key {'`' + comment + '`' if comment else 'given'} is the example's placeholder, not your key: put your "
        "own public key here (`cat ~/.ssh/id_ed25519.pub`), or remove the entry",
    )


def placeholders(cfg) -> list[Finding]:
    """Every placeholder in the config, as a warning (the plan's severity)."""
    c = cfg.cluster
    found = [_bucket(c.fsx.data_repository_path)]
    found += [_cidr(i, cidr) for i, cidr in enumerate(c.ssh.allowed_cidrs)]
    found += [_key(i, key) for i, key in enumerate(c.ssh.authorized_keys)]
    return [f for f in found if f is not None]


def placeholder_errors(cfg) -> list[Finding]:
    """The same, as errors: what `hpcc preflight` and `hpcc up` refuse before anything is created."""
    return [Finding(ERROR, f.field, f.message + " (`hpcc up` refuses placeholders)") for f in placeholders(cfg)]
