"""When a running node moves to the bundle the pointer (/hpcc/<cluster>/bundle) names: pure decisions, no I/O.

Canaries first: the head and the first compute node of the membership, by name (every cluster has both, so no
count to configure; canaries_of).
The others move only once every canary reports the new bundle running with no failure (their statuses, read in
the tick's one GetParameters), each after a delay spread over WAVE_SECONDS by a hash of its name and the bundle,
so the waves are deterministic and 512 nodes do not fetch at once (a smaller cluster spreads over a
proportionally shorter window: the same fetch rate, no minute of waiting for three nodes). A canary that refuses
the bundle (bad hash, failed self-check) keeps its old one and reports class `bundle`; then the rollout is halted:
the other nodes never fetch it, a canary that had moved rolls back, and the head reports the halt once for the
cluster. A new pointer (a fixed bundle) starts a new rollout."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Dict, Mapping, NamedTuple, Optional, Sequence, Tuple

CANARIES = ("head", "compute-000")
WAVE_SECONDS = 60  # the non-canaries spread over this after the canaries are done (3 min target in all) ...
WAVE_FULL_AT = 512  # ... at this many members or more: about 8.5 fetches a second, whatever the cluster's size
SHA = re.compile(r"[0-9a-f]{64}")


class Pointer(NamedTuple):
    sha256: str
    bucket: str
    key: str


def parse_pointer(value: str) -> Pointer:
    """The pointer's JSON {"sha256", "bucket", "key"}; ValueError on anything else."""
    data = json.loads(value)
    sha, bucket, key = data.get("sha256"), data.get("bucket"), data.get("key")
    if not isinstance(sha, str) or not SHA.fullmatch(sha):
        raise ValueError(f"bundle pointer: sha256 {str(sha)[:70]!r} is not 64 hex digits")
    if not isinstance(bucket, str) or not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket):
        raise ValueError(f"bundle pointer: bucket {str(bucket)[:70]!r} is not a bucket name")
    if key != f"bundles/{sha}.tar.gz":
        raise ValueError(f"bundle pointer: key {str(key)[:90]!r} is not bundles/<sha256>.tar.gz")
    return Pointer(sha, bucket, key)


def is_canary(node: str, canaries: Sequence[str] = CANARIES) -> bool:
    return node in canaries


def canaries_of(names: Sequence[str]) -> Tuple[str, ...]:
    """The head and the first compute node in name order (group, then number) of a membership: every cluster has
    both, whatever its groups are called."""
    nodes = sorted(
        (n for n in names if n != "head"), key=lambda n: (n.rpartition("-")[0], int(n.rpartition("-")[2] or 0))
    )
    return ("head",) + tuple(nodes[:1])


def wave_window(members: int) -> float:
    """Seconds the non-canaries of a membership of `members` nodes spread over: WAVE_SECONDS at WAVE_FULL_AT nodes
    or more, proportionally less below."""
    return WAVE_SECONDS * min(1.0, max(0, members) / WAVE_FULL_AT)


def wave_delay(node: str, sha: str, window: float = WAVE_SECONDS) -> float:
    """Seconds after the canaries are done before this node moves, in [0, window): the same for the same node,
    bundle and window."""
    h = int(hashlib.sha256(f"{sha}:{node}".encode()).hexdigest()[:8], 16)
    return (h % max(1, int(window * 1000))) / 1000


class Verdict(NamedTuple):
    state: str  # "done" (every canary runs it), "wait", or "halt" (a canary refused it)
    reason: str = ""


def canary_verdict(sha: str, canaries: Mapping[str, Optional[Dict[str, Any]]]) -> Verdict:
    """canaries: each canary's status (None when unread or of a protocol this agent does not read)."""
    waiting = []
    for name in sorted(canaries):
        st = canaries[name] or {}
        refused = st.get("refused") or {}
        if refused.get("sha256") == sha:
            return Verdict("halt", f"bundle {sha[:12]} refused on canary {name}: {refused.get('reason', '?')}")
        if st.get("bundle") != sha or st.get("phase") != "ready" or st.get("ok") is not True:
            waiting.append(name)
    if waiting:
        return Verdict("wait", f"waiting for canaries {', '.join(waiting)} to run bundle {sha[:12]}")
    return Verdict("done")


class Move(NamedTuple):
    action: str  # "stay", "switch", "wait", "halted", "rollback"
    reason: str = ""


def next_move(
    node: str,
    running: str,
    target: Optional[Pointer],
    refused: Mapping[str, str],
    verdict: Optional[Verdict],
    done_since: Optional[float],
    now: float,
    previous: str = "",
    canaries: Sequence[str] = CANARIES,
    members: int = WAVE_FULL_AT,
) -> Move:
    """What this node does this tick. verdict: the canaries' (None when their statuses were not read this tick);
    done_since: when this node first saw them all done (None if not yet); members: the membership's size (the
    waves' window, wave_window)."""
    if target is None or target.sha256 == running:
        if (
            target is not None
            and is_canary(node, canaries)
            and verdict is not None
            and verdict.state == "halt"
            and previous
        ):
            return Move("rollback", verdict.reason)
        return Move("stay")
    if verdict is not None and verdict.state == "halt":
        return Move("halted", verdict.reason)
    if target.sha256 in refused:
        return Move("halted", f"bundle {target.sha256[:12]} was refused here: {refused[target.sha256]}")
    if is_canary(node, canaries):
        return Move("switch", "canary")
    if verdict is None or verdict.state != "done" or done_since is None:
        return Move("wait", verdict.reason if verdict else "reading the canaries' statuses next tick")
    delay = wave_delay(node, target.sha256, wave_window(members))
    if now - done_since >= delay:
        return Move("switch", f"wave: {delay:.0f} s after the canaries")
    return Move("wait", f"moving {delay - (now - done_since):.0f} s from now")


def drift(booted_digest: str, new_digest: str, sha: str) -> Optional[str]:
    """A bundle whose role script (its boot steps) differs from the one this node booted with is run for its agent
    and idempotent configuration only: nothing of the boot is re-run under running jobs."""
    if not booted_digest or booted_digest == new_digest:
        return None
    return f"boot steps changed in {sha[:12]}: replace when idle"
