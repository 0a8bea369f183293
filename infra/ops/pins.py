"""`hpcc pin containers`: the sha256 digests of enroot's release .debs, read from GitHub's release API, as the stack
file's `containers.releaseDigests` snippet to paste (infra/config/containers.py; infra/facts/containers.py says why
the user pins them). GitHub's release API reports each asset's `digest`, "sha256:<hex>"
(https://docs.github.com/en/rest/releases/assets): its record of the file as it was uploaded, computed at upload
since GitHub's change of 2025-06-03 (https://github.blog/changelog/2025-06-03-releases-now-expose-digests-for-release-
assets/); an older asset may have none (`null`). Every failure (the network, an HTTP error, an asset or digest
missing) is a PinError with what to do; nothing is ever guessed."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping

from infra.facts import containers as facts
from infra.facts.instance_types import InstanceType
from infra.ops import OpsError

TIMEOUT_SECONDS = 30
MAX_BODY = 4 * 1024 * 1024  # a release's JSON is kilobytes; more is not GitHub's answer
USER_AGENT = "hpcc-pin"  # GitHub's REST API refuses requests without a User-Agent
# (url, headers) -> (HTTP status, body); raises OSError when nothing answered
Getter = Callable[[str, Mapping[str, str]], tuple[int, bytes]]


class PinError(OpsError):
    """The digests could not be read: the message says why and what to do instead."""


def release_url(version: str = facts.ENROOT_VERSION) -> str:
    return facts.ENROOT_RELEASE_API.format(version=version)


def request_headers(env: Mapping[str, str]) -> dict[str, str]:
    """GitHub's JSON media type and a User-Agent; GITHUB_TOKEN, when set, as the Authorization header only (a higher
    rate limit; the release is public). The token is never printed."""
    headers = {"Accept": "application/vnd.github+json", "User-Agent": USER_AGENT}
    token = env.get("GITHUB_TOKEN", "").strip()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def urllib_get(url: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
    """The default Getter: one GET with a timeout; an HTTP error is a status, not an exception."""
    request = urllib.request.Request(url, headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as answer:
            return answer.status, answer.read(MAX_BODY)
    except urllib.error.HTTPError as e:
        return e.code, b""
    except http.client.HTTPException as e:  # a connection cut mid-answer: as unreachable
        raise OSError(f"the answer broke off ({type(e).__name__})") from e


def fetch_release(get: Getter, env: Mapping[str, str], version: str = facts.ENROOT_VERSION) -> dict:
    """The release's JSON, or a PinError saying what GitHub answered."""
    url = release_url(version)
    try:
        status, body = get(url, request_headers(env))
    except OSError as e:  # urllib's URLError, a timeout, a refused connection
        reason = getattr(e, "reason", None) or e
        raise PinError(f"cannot reach {url}: {reason} (check the network or a proxy; nothing was pinned)") from None
    if status == 404:
        raise PinError(f"GitHub has no release v{version} of NVIDIA/enroot ({url} answered 404)")
    if status in (401, 403, 429):
        raise PinError(
            f"GitHub refused {url} (HTTP {status}): a rate limit or a bad GITHUB_TOKEN; wait, or set GITHUB_TOKEN "
            "to a valid token (it is sent as the Authorization header only)"
        )
    if status != 200:
        raise PinError(f"GitHub answered HTTP {status} for {url}; try again later")
    try:
        release = json.loads(body)
    except ValueError:
        raise PinError(f"{url} did not answer JSON; try again later") from None
    if not isinstance(release, dict) or not isinstance(release.get("assets"), list):
        raise PinError(f"{url} answered no `assets` list: not a GitHub release as its API describes it")
    return release


def digests_of(release: dict, names: Iterable[str]) -> dict[str, str]:
    """name -> "sha256:<hex>" of each asset named, from the release's `assets`; a PinError names the first asset
    missing or without a well-formed digest."""
    assets = {a.get("name"): a for a in release["assets"] if isinstance(a, dict)}
    found = {}
    for name in names:
        if name not in assets:
            have = ", ".join(sorted(str(n) for n in assets)) or "none"
            raise PinError(f"the release has no asset {name} (its assets: {have[:400]})")
        digest = assets[name].get("digest")
        if digest is None:
            raise PinError(
                f"GitHub's release API reports no digest for {name} (an asset uploaded before GitHub recorded them has "
                "none): nothing to pin from GitHub's record; download "
                f"it, verify it yourself and write its sha256 in {facts.DIGESTS_FIELD} as sha256:<hex>, or set "
                "containers.enabled: false"
            )
        if not isinstance(digest, str) or not facts.DIGEST.fullmatch(digest):
            raise PinError(f"GitHub's digest for {name}, {str(digest)[:80]!r}, is not sha256:<64 lowercase hex>")
        found[name] = digest
    return found


def stack_arches(types: Iterable[InstanceType]) -> tuple[str, ...]:
    """The EC2 architectures of the head's and the groups' types that enroot has packages for, in DEB_ARCH's order."""
    used = {t.arch for t in types}
    return tuple(a for a in facts.DEB_ARCH if a in used)


def snippet(digests: Mapping[str, str], version: str = facts.ENROOT_VERSION) -> str:
    """The YAML to paste under `hpcc:cluster:` in the stack file, saying where the digests came from."""
    lines = [
        f"# enroot {version}'s .debs: the sha256 digests GitHub's release API reports ({release_url(version)}),",
        "# GitHub's record of each asset as it was uploaded. Paste under hpcc:cluster: in the stack file (into its",
        "# containers: section if it has one).",
        "containers:",
        "  releaseDigests:",
        *(f'    "{name}": "{digest}"' for name, digest in digests.items()),
    ]
    return "\n".join(lines) + "\n"


def pin_containers(arches: tuple[str, ...], get: Getter, env: Mapping[str, str]) -> dict[str, str]:
    """The digests of enroot's .debs for these architectures, from GitHub's release API."""
    return digests_of(fetch_release(get, env), facts.enroot_asset_names(arches))
