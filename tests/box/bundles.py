"""New bundles for the upgrade tests, built by the program's own builder (infra/bundle.py) from the planned role
scripts, with some files of the node package replaced (a new AGENT_VERSION, a failing self-check); and a bundle
installed on a test node's directories as the loader does, with the agent's own unpack and switch."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from hpcc_node import upgrade
from infra.render.bundle import ROOT, bundle_files, hpcc_version, node_files, pack

__all__ = ["ROOT", "build", "install"]
NO_HOOKS = {"onNodeStart": [], "onNodeReady": []}


def build(scripts: dict[str, str], patches: dict[str, str] | None = None, cluster: str = "box") -> tuple[bytes, str]:
    """The archive's bytes and sha256; patches: node-package file -> text replacing (or adding) it."""
    node = node_files()
    node.update({name: text.encode() for name, text in (patches or {}).items()})
    agent = re.search(r'AGENT_VERSION = "([^"]+)"', node["hpcc_contract/version.py"].decode()).group(1)
    packed = pack(bundle_files(cluster, scripts, NO_HOOKS, {}, node, hpcc_version(), agent))
    return packed, hashlib.sha256(packed).hexdigest()


def install(opt: Path, packed: bytes, sha: str) -> None:
    """What the loader does on a node: the archive unpacked into opt/bundles/<sha>, opt/current switched to it."""
    opt.mkdir(parents=True, exist_ok=True)
    archive = opt / f".{sha}.tar.gz"
    archive.write_bytes(packed)
    upgrade.unpack(str(archive), sha, str(opt))
    archive.unlink()
    upgrade.switch(sha, str(opt))
