"""A booted box is settled once the cluster is as a user finds it when `hpcc up` has returned and the agents have
done their first ticks: the bootstraps' exit is not that point. After it, for a minute or so, the controller marks
the nodes ready (a new membership generation), every agent applies it and installs the cluster keys once, and the
head signs the certificates again: a test that launches or fingerprints in that window races the agents."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

from tests.box.cloud import FleetBox
from tests.box.node import Node

# What the bootstrap and the agents write on a node.
WRITTEN = ["/etc/hpcc", "/root", "/etc/ssh", "/etc/profile.d", "/usr/local/bin", "/usr/local/sbin"]


def node_files(node: Node, paths: list[str] = WRITTEN) -> Iterator[tuple[str, Path]]:
    """Each file under the node's paths, named as on the node (/etc/hpcc/env), in order."""
    for p in paths:
        base = node.file(p)
        if base.is_file():
            yield p, base
        elif base.is_dir():
            for f in sorted(f for f in base.rglob("*") if f.is_file()):
                yield f"{p}/{f.relative_to(base)}", f


def mtimes(node: Node, paths: list[str] = WRITTEN) -> dict[str, int]:
    """Each file's modification time (a stat, no read: cheap to repeat)."""
    out = {}
    for name, f in node_files(node, paths):
        try:
            out[name] = f.stat().st_mtime_ns
        except FileNotFoundError:  # replaced between the listing and the stat: changing, as far as we care
            out[name] = -1
    return out


def fingerprint(node: Node, paths: list[str] = WRITTEN) -> dict[str, tuple[str, int, int]]:
    """Each file's content hash, mode and modification time."""
    out = {}
    for name, f in node_files(node, paths):
        st = f.stat()
        out[name] = (hashlib.sha256(f.read_bytes()).hexdigest(), st.st_mode, st.st_mtime_ns)
    return out


def settle(box: FleetBox, timeout: float = 240, quiet: float = 25, every: float = 2) -> float:
    """Until every named node is ready in the membership, every node applied that generation, and no file under
    WRITTEN changed on any node for `quiet` seconds (two agent ticks here); returns the seconds it took. Raises
    AssertionError with the membership and every node's log tail when it does not settle within `timeout`."""
    started = time.time()
    seen: dict[str, int] = {}
    still_since = time.time()
    while True:
        doc = box.membership()
        applied = all(
            f"HOSTS_VERSION={doc['generation']}" in n.file("/etc/hpcc/node").read_text()
            for n in box.nodes
            if n.file("/etc/hpcc/node").exists()
        )
        now = {f"{n.name}:{path}": t for n in box.nodes for path, t in mtimes(n).items()}
        if now != seen:
            seen, still_since = now, time.time()
        ready = doc["nodes"] and all(n["state"] == "ready" for n in doc["nodes"])
        if ready and applied and time.time() - still_since >= quiet:
            return time.time() - started
        if time.time() - started > timeout:
            changing = sorted(k for k, t in now.items() if t >= int((time.time() - quiet) * 1e9))
            raise AssertionError(
                f"the box did not settle in {timeout} s: ready={ready}, applied={applied}, "
                f"files changed in the last {quiet} s: {changing[:20]}\n{doc}\n{box.diagnose()}"
            )
        time.sleep(every)
