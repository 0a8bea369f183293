"""Bundles for the box, by the bundle contract (deterministic tar.gz: manifest.json, roles/<role>.sh, hpcc_node/,
infra/settings_schema.py), until the program's own builder (issue 18, part 1) is merged: then `build` should be
that builder and `install` the loader's work. Installed with the agent's own unpack and switch (hpcc_node/upgrade)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

from hpcc_node import upgrade

ROOT = Path(__file__).resolve().parents[2]


def _files(scripts: dict[str, str], patches: dict[str, str] | None) -> dict[str, bytes]:
    files = {str(p.relative_to(ROOT)): p.read_bytes() for p in sorted((ROOT / "hpcc_node").glob("*.py"))}
    for name in ("infra/__init__.py", "infra/settings_schema.py"):
        files[name] = (ROOT / name).read_bytes()
    for role, text in scripts.items():
        files[f"roles/{role}.sh"] = text.encode()
    for name, text in (patches or {}).items():
        files[name] = text.encode()
    version = {}
    exec(files["hpcc_node/version.py"].decode(), version)
    files["manifest.json"] = json.dumps({
        "format": 1, "cluster": "box", "hpccVersion": "dev", "agentVersion": version["AGENT_VERSION"],
        "roles": {role: {"script": f"roles/{role}.sh", "bootDigest": hashlib.sha256(text.encode()).hexdigest()}
                  for role, text in scripts.items()},
        "hooks": {"onNodeStart": [], "onNodeReady": []}}, sort_keys=True).encode()
    return files


def build(scripts: dict[str, str], patches: dict[str, str] | None = None) -> tuple[bytes, str]:
    """The archive's bytes and sha256; patches: file name -> text replacing (or adding) that file."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in sorted(_files(scripts, patches).items()):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.uid, info.gid = len(data), 0, 0, 0
            info.mode = 0o755 if name.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
    packed = gzip.compress(raw.getvalue(), mtime=0)
    return packed, hashlib.sha256(packed).hexdigest()


def install(opt: Path, packed: bytes, sha: str) -> None:
    """What the loader does on a node: the archive unpacked into opt/bundles/<sha>, opt/current switched to it."""
    opt.mkdir(parents=True, exist_ok=True)
    archive = opt / f".{sha}.tar.gz"
    archive.write_bytes(packed)
    upgrade.unpack(str(archive), sha, str(opt))
    archive.unlink()
    upgrade.switch(sha, str(opt))
