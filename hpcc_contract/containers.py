"""Container images on the cluster (issue 35): the shared image cache's layout on the cluster's file system, the image
references users write, and the record of which images jobs use. Standard library only, like the rest of the
contract: the node side keeps the cache (hpcc_node/containers/), `hpcc images` lists it, and the spares' prewarm
(later) reads the usage records.

References. Users write what pyxis' `--container-image` takes, an enroot URI with or without `docker://` (pyxis
prefixes it: pyxis_slurmstepd.c) and with enroot's `REGISTRY#IMAGE` or Docker's `REGISTRY/IMAGE`: enroot's
doc/cmd/import.md (`docker://[USER@][REGISTRY#]IMAGE[:TAG]`) and its `docker::_parse_uri` (src/docker.sh,
https://github.com/NVIDIA/enroot), whose rules this follows: a first path component is a registry only when it
holds `.` or `:` (so `localhost/x` is Docker Hub's, as enroot reads it), Docker Hub's aliases are
`registry-1.docker.io`, an image without a namespace is `library/<image>`, the tag is `latest` when none is given.
Each part is checked against the Docker reference grammar (distribution's reference/reference.go, v2.8.2:
https://github.com/distribution/distribution/blob/v2.8.2/reference/reference.go). A reference is data: it reaches
enroot as one argv element, never through a shell, and anything outside the grammar is refused by name.

Cache layout. One root on the cluster's file system, `<fsx mount>/.hpcc/images/`, holding per image manifest digest
(`enroot digest URI`: the platform's manifest digest, so an x86_64 and an arm64 node never share an entry)
`sha256-<hex>.sqsh` (the squashfs, published whole), `sha256-<hex>.lock` (flock(2)'d: exclusive by its one importer
or an eviction, shared while a process reads the image) and `sha256-<hex>.json` (this module's IMAGE_ENTRY document).
An importer writes `.sha256-<hex>.<node>.<pid>.tmp` first; a name starting with `.` is never an entry.

Usage records. One JSON line per job and image, appended to `<fsx mount>/.hpcc/image-usage/<node>.jsonl` (one file
per node, so no two writers append to one file): the job, the reference as written canonically, the digest when
known, the node and the time; versioned IMAGE_USE."""

from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, List, NamedTuple, Optional

from hpcc_contract import formats

CACHE_SUBDIR = os.path.join(".hpcc", "images")
USAGE_SUBDIR = os.path.join(".hpcc", "image-usage")
IMAGE_SUFFIX, LOCK_SUFFIX, ENTRY_SUFFIX, TEMP_SUFFIX = ".sqsh", ".lock", ".json", ".tmp"
DOCKER_HUB = "registry-1.docker.io"
DOCKER_HUB_ALIASES = ("docker.io", "index.docker.io", DOCKER_HUB)  # enroot's "Canonicalize Docker Hub aliases"
DEFAULT_TAG = "latest"
MAX_REFERENCE = 512  # longer than any real one; bounds what a log line or a record carries

# The Docker reference grammar's parts (reference.go, above); the user part is enroot's, narrowed to a login name.
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_REGISTRY = re.compile(rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]{{1,5}})?")
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE = re.compile(rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_USER = re.compile(r"[A-Za-z0-9_.-]{1,64}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_PINNED = re.compile(r"@([A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[^@/#:]*)$")  # reference.go's digest
_STEM = re.compile(r"sha256-([0-9a-f]{64})")
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
_JOB = re.compile(r"[0-9]{1,12}(?:[_+][0-9]{1,12})?")  # Slurm's job id, an array task or het component's too


class BadReference(ValueError):
    """An image reference hpcc will not cache: the message says which part and why."""


class BadRecord(ValueError):
    """A cache entry or usage record that is not one (a field missing or malformed)."""


class ImageRef(NamedTuple):
    registry: str
    image: str  # the repository path, `library/ubuntu`
    tag: str
    digest: Optional[str] = None  # `sha256:<hex>` when the reference pins one
    user: Optional[str] = None  # enroot's USER@, which picks the credentials' login; not part of the image

    @property
    def canonical(self) -> str:
        """`registry/image:tag[@digest]`: one spelling per image, what the cache and the records show."""
        return f"{self.registry}/{self.image}:{self.tag}" + (f"@{self.digest}" if self.digest else "")

    def enroot_uri(self, digest: Optional[str] = None) -> str:
        """enroot's unambiguous form, `docker://[USER@]REGISTRY#IMAGE:TAG[@DIGEST]` (import.md); `digest` pins an
        import to the manifest the cache keys it by (enroot ignores the tag then)."""
        pin = digest or self.digest
        user = f"{self.user}@" if self.user else ""
        return f"docker://{user}{self.registry}#{self.image}:{self.tag}" + (f"@{pin}" if pin else "")


def _refuse(text: str, why: str) -> BadReference:
    return BadReference(f"image reference {text[:80]!r}: {why}")


def parse_reference(text: str) -> ImageRef:
    """An image reference as users write it (`nvcr.io#nvidia/pytorch:24.07-py3`, `docker://ubuntu:22.04`,
    `nvcr.io/nvidia/pytorch:24.07-py3@sha256:...`), normalised; BadReference names what is wrong."""
    if not isinstance(text, str) or not text:
        raise BadReference("image reference: empty")
    if len(text) > MAX_REFERENCE:
        raise _refuse(text, f"longer than {MAX_REFERENCE} characters")
    if any(c.isspace() or not c.isprintable() or not c.isascii() for c in text):
        raise _refuse(text, "holds a space, a control or a non-ASCII character")
    rest = text
    if "://" in rest:
        scheme, _, rest = rest.partition("://")
        if scheme != "docker":
            raise _refuse(text, f"scheme {scheme!r}: only docker:// images are cached (a registry every node reaches)")
    elif rest.startswith(("/", ".")):
        raise _refuse(text, "a squashfs path: pyxis starts it as it is, there is nothing to cache")
    digest = None
    pinned = _PINNED.search(rest)  # `@algorithm:hex` at the end is a digest; an `@` before the name, a user
    if pinned:
        rest, digest = rest[: pinned.start()], pinned.group(1)
        if not DIGEST.fullmatch(digest):
            raise _refuse(text, "the digest after '@' is not sha256: and 64 lowercase hex digits")
    user = None
    if "@" in rest:
        user, _, rest = rest.partition("@")
        if not _USER.fullmatch(user) or "@" in rest:
            raise _refuse(text, "the user before '@' is not a login name (letters, digits, '.', '_', '-')")
    if "#" in rest:
        registry, _, name = rest.partition("#")
        if not registry:
            raise _refuse(text, "no registry before '#'")
    else:
        first, slash, remainder = rest.partition("/")
        registry, name = (first, remainder) if slash and ("." in first or ":" in first) else (DOCKER_HUB, rest)
    tag = DEFAULT_TAG
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name, _, tag = name.rpartition(":")
        if not _TAG.fullmatch(tag):
            raise _refuse(text, "the tag is not 1-128 of letters, digits, '_', '.', '-' (not starting with '.' or '-')")
    if not _REGISTRY.fullmatch(registry):
        raise _refuse(text, f"registry {registry[:64]!r} is not a host name with an optional :port")
    if not name or not _IMAGE.fullmatch(name):
        raise _refuse(text, "the image name is not lowercase path components of letters, digits and '.', '_', '-'")
    if registry in DOCKER_HUB_ALIASES:
        registry = DOCKER_HUB
        name = name if "/" in name else f"library/{name}"
    return ImageRef(registry, name, tag, digest, user)


def check_digest(digest: str) -> str:
    """A manifest digest as the cache keys it (`sha256:<64 hex>`), or BadReference."""
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        raise BadReference(f"digest {str(digest)[:80]!r} is not sha256: and 64 lowercase hex digits")
    return digest


# -- the cache's layout ------------------------------------------------------------------------------------------


def cache_root(fsx_mount: str) -> str:
    return os.path.join(fsx_mount, CACHE_SUBDIR)


def usage_dir(fsx_mount: str) -> str:
    return os.path.join(fsx_mount, USAGE_SUBDIR)


def stem(digest: str) -> str:
    """`sha256-<hex>`: the digest as a file name (no ':', which some tools read as host:path)."""
    return check_digest(digest).replace(":", "-", 1)


def digest_of(file_name: str) -> Optional[str]:
    """The digest an entry's file is named for (`sha256-<hex>.sqsh|.lock|.json`), else None (a temp file too)."""
    base, dot, _ = file_name.partition(".")
    found = _STEM.fullmatch(base) if dot else None
    return f"sha256:{found.group(1)}" if found else None


def image_name(digest: str) -> str:
    return stem(digest) + IMAGE_SUFFIX


def lock_name(digest: str) -> str:
    return stem(digest) + LOCK_SUFFIX


def entry_name(digest: str) -> str:
    return stem(digest) + ENTRY_SUFFIX


def temp_prefix(digest: str) -> str:
    """What every importer's temp file for this digest starts with: `.sha256-<hex>.` (hidden, never an entry)."""
    return f".{stem(digest)}."


def temp_name(digest: str, node: str, pid: int) -> str:
    return f"{temp_prefix(digest)}{node}.{pid}{TEMP_SUFFIX}"


# -- documents ---------------------------------------------------------------------------------------------------


class CacheEntry(NamedTuple):
    digest: str
    references: List[str]  # canonical references that resolved to it, first one first
    size: int  # bytes of the squashfs
    created: float  # seconds since the epoch
    last_used: float
    imported_by: str  # the node that imported it


def _number(doc: Dict[str, Any], key: str) -> float:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise BadRecord(f"{key} {str(value)[:20]!r} is not a non-negative number")
    return value


def dumps_entry(entry: CacheEntry) -> str:
    doc = {
        "digest": check_digest(entry.digest),
        "references": list(entry.references),
        "size": int(entry.size),
        "created": entry.created,
        "lastUsed": entry.last_used,
        "importedBy": entry.imported_by,
    }
    return json.dumps(formats.stamp(doc, formats.IMAGE_ENTRY), sort_keys=False) + "\n"


def _document(text: str, what: str, format_name: str, version: int) -> Dict[str, Any]:
    """A JSON object of a known format: NewerFormat for a newer one, BadRecord for anything else."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise BadRecord(f"{what}: not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise BadRecord(f"{what}: not a JSON object")
    formats.check_doc(format_name, doc, version)
    return doc


def loads_entry(text: str) -> CacheEntry:
    """An IMAGE_ENTRY document; NewerFormat for a newer one, BadRecord for a malformed one."""
    doc = _document(text, "cache entry", "image cache entry", formats.IMAGE_ENTRY)
    refs = doc.get("references")
    if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
        raise BadRecord("cache entry: references is not a list of strings")
    try:
        digest = check_digest(doc.get("digest", ""))
        for ref in refs:
            parse_reference(ref)
    except BadReference as e:
        raise BadRecord(f"cache entry: {e}") from None
    node = doc.get("importedBy", "")
    if not isinstance(node, str) or (node and not _NODE.fullmatch(node)):
        raise BadRecord(f"cache entry: importedBy {str(node)[:20]!r} is not a node name")
    size = _number(doc, "size")
    return CacheEntry(digest, refs, int(size), _number(doc, "created"), _number(doc, "lastUsed"), node)


class UsageRecord(NamedTuple):
    job: str  # Slurm's job id (`1234`, `1234_7` for an array task)
    reference: str  # canonical
    digest: Optional[str]  # None when the recorder did not resolve it (the Prolog runs before any import)
    node: str
    time: float


def dumps_usage(record: UsageRecord) -> str:
    """One JSON line (newline included) for a node's usage file."""
    if not _JOB.fullmatch(record.job):
        raise BadRecord(f"usage record: job {record.job[:20]!r} is not a Slurm job id")
    if not _NODE.fullmatch(record.node):
        raise BadRecord(f"usage record: node {record.node[:20]!r} is not a node name")
    doc = {
        "job": record.job,
        "reference": parse_reference(record.reference).canonical,
        "digest": check_digest(record.digest) if record.digest is not None else None,
        "node": record.node,
        "time": record.time,
    }
    return json.dumps(formats.stamp(doc, formats.IMAGE_USE)) + "\n"


def loads_usage(line: str) -> UsageRecord:
    """One usage line; NewerFormat for a newer one, BadRecord for a malformed one (a reader skips it)."""
    doc = _document(line, "usage record", "image usage record", formats.IMAGE_USE)
    job, node, ref, digest = doc.get("job"), doc.get("node"), doc.get("reference"), doc.get("digest")
    if not isinstance(job, str) or not _JOB.fullmatch(job):
        raise BadRecord(f"usage record: job {str(job)[:20]!r} is not a Slurm job id")
    if not isinstance(node, str) or not _NODE.fullmatch(node):
        raise BadRecord(f"usage record: node {str(node)[:20]!r} is not a node name")
    try:
        canonical = parse_reference(ref if isinstance(ref, str) else "").canonical
        digest = check_digest(digest) if digest is not None else None
    except BadReference as e:
        raise BadRecord(f"usage record: {e}") from None
    return UsageRecord(job, canonical, digest, node, _number(doc, "time"))


def check_node(node: str) -> str:
    """A node name as file names and records carry it, or BadRecord."""
    if not isinstance(node, str) or not _NODE.fullmatch(node):
        raise BadRecord(f"node {str(node)[:20]!r} is not a node name (letters, digits, '.', '_', '-')")
    return node


# -- the node's image service (hpcc_node/containers/service.py) and pyxis' importer (importer.py) ------------------
# Root keeps the registry credentials and imports; a job's user asks over SERVICE_SOCKET for an image and gets the
# cached squashfs's path back, never a credential. One request a connection: one IMAGE_REQUEST JSON line (at most
# MAX_REQUEST bytes, sent within REQUEST_TIMEOUT_S), answered by one IMAGE_ANSWER line holding `path` or `error`.

SERVICE_SOCKET = "/run/hpcc/images.sock"
SERVICE_SOCKET_MODE = 0o666  # every job connects; SO_PEERCRED says who it is
# enroot's ENROOT_CONFIG_PATH for the service's own imports alone (root's `.credentials`: the ECR token, the NGC key),
# mode 0700, set in the service's enroot children's environment and in no enroot.conf: users never read it.
# Where the DLAMI mounts a type's instance store (UNVERIFIED here: from AWS's HyperPod lifecycle scripts): enroot's data
# (infra/render/containers.py) and the node's image copies (prewarm.py local_images_dir) go there when it is a mount.
INSTANCE_STORE_MOUNT = "/opt/dlami/nvme"
ROOT_ENROOT_CONFIG = "/etc/hpcc/enroot-root"
MAX_REQUEST = 4096
MAX_ANSWER = 8192
REQUEST_TIMEOUT_S = 10.0
# How long an importer waits for its answer: another node's import (the cache's WAIT_S, an hour) and then its own
# (`enroot import`'s bound, 3 h) may both come first.
ANSWER_TIMEOUT_S = 4.5 * 3600


class ImageRequest(NamedTuple):
    reference: str  # as pyxis passes it (`docker://...`); the service parses it
    job: str  # SLURM_JOB_ID, which the service checks against the caller's uid


def dumps_request(request: ImageRequest) -> bytes:
    if not _JOB.fullmatch(request.job):
        raise BadRecord(f"image request: job {request.job[:20]!r} is not a Slurm job id")
    doc = {"reference": request.reference[: MAX_REFERENCE + 1], "job": request.job}
    return (json.dumps(formats.stamp(doc, formats.IMAGE_REQUEST)) + "\n").encode()


def loads_request(data: bytes) -> ImageRequest:
    """One request; NewerFormat for a newer one, BadRecord for anything else (the reference is parsed later)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRecord("image request: not UTF-8") from None
    doc = _document(text, "image request", "image request", formats.IMAGE_REQUEST)
    ref, job = doc.get("reference"), doc.get("job")
    if not isinstance(ref, str) or not ref:
        raise BadRecord("image request: reference is not a non-empty string")
    if not isinstance(job, str) or not _JOB.fullmatch(job):
        raise BadRecord(f"image request: job {str(job)[:20]!r} is not a Slurm job id")
    return ImageRequest(ref, job)


class ImageAnswer(NamedTuple):
    path: Optional[str]  # the squashfs, absolute
    error: Optional[str]  # one line when there is no path


def dumps_answer(answer: ImageAnswer) -> bytes:
    error = " ".join(str(answer.error).split())[: MAX_ANSWER // 8]  # one line, well inside MAX_ANSWER as JSON
    doc: Dict[str, Any] = {"path": answer.path} if answer.path else {"error": error}
    return (json.dumps(formats.stamp(doc, formats.IMAGE_ANSWER)) + "\n").encode()


def loads_answer(data: bytes) -> ImageAnswer:
    """An answer: a path (absolute, one line) or an error; BadRecord for anything else."""
    doc = _document(data.decode("utf-8", "replace"), "image answer", "image answer", formats.IMAGE_ANSWER)
    path, error = doc.get("path"), doc.get("error")
    if isinstance(path, str) and path.startswith("/") and "\n" not in path and "\0" not in path:
        return ImageAnswer(path, None)
    if isinstance(error, str) and error:
        return ImageAnswer(None, " ".join(error.split())[:MAX_ANSWER])
    raise BadRecord("image answer: neither an absolute path nor an error")
