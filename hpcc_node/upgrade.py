"""Moving a running node to another bundle: fetch, check the hash, unpack (into a temp dir, then renamed: never
half-unpacked), run the new agent's self-check, switch /opt/hpcc/current atomically. The caller re-executes the
agent from the new bundle. Nothing of the boot is re-run: the node's script (its group's, or the head's) is only read
(its digest, for drift).

Bundle layout and names: the bundle contract (docs/bootstrap-contract.md): /opt/hpcc/bundles/<sha256>/,
/opt/hpcc/current -> bundles/<sha256>."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from typing import Any, Callable, Dict, Optional

from hpcc_contract import formats
from hpcc_contract.names import boot_key

OPT = "/opt/hpcc"
SELF_CHECK_SECONDS = 60


class BundleError(RuntimeError):
    """The bundle is refused here (unreachable, wrong hash, bad archive, failed self-check): class `bundle`."""


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def bundle_dir(sha: str, opt: str = OPT) -> str:
    return os.path.join(opt, "bundles", sha)


def current_sha(opt: str = OPT) -> str:
    """The sha256 of the bundle /opt/hpcc/current names ('' when there is none)."""
    target = os.path.realpath(os.path.join(opt, "current"))
    name = os.path.basename(target)
    return name if os.path.isdir(target) and len(name) == 64 else ""


def manifest(directory: str) -> Dict[str, Any]:
    """A bundle's manifest.json; NewerFormat (a ValueError) when a newer hpcc built it than this agent reads."""
    with open(os.path.join(directory, "manifest.json")) as f:
        doc = json.load(f)
    formats.check_doc("bundle manifest", doc, formats.BUNDLE_MANIFEST)
    return doc


def boot_entry(directory: str, role: str, node: str) -> Dict[str, Any]:
    """This node's script in a bundle's manifest, {"script", "bootDigest"}: format 2 keys them by whose script it is
    (hpcc_contract/names.py boot_key: the head's, or the node's group's: gpu-007 runs roles/gpu.sh), format 1 by
    role (one compute script for every group: what a node rolled back to a bundle before 2 runs)."""
    doc = manifest(directory)
    key = boot_key(node) if formats.version_of(doc.get(formats.FORMAT_KEY)) >= 2 else role
    entry = doc["roles"].get(key) if isinstance(doc.get("roles"), dict) else None
    if not isinstance(entry, dict) or not isinstance(entry.get("script"), str):
        raise ValueError(f"the bundle's manifest names no script for {key!r} (node {node or '?'}, role {role})")
    return entry


def boot_script(directory: str, role: str, node: str) -> str:
    """The path of this node's own script in the bundle at `directory` (ValueError when its manifest names none)."""
    return os.path.join(directory, boot_entry(directory, role, node)["script"])


def boot_digest(directory: str, role: str, node: str) -> str:
    """The sha256 of this node's script as the bundle's manifest names it ('' when it names none)."""
    try:
        return str(boot_entry(directory, role, node)["bootDigest"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def _safe_members(archive: tarfile.TarFile):
    for m in archive.getmembers():
        path = os.path.normpath(m.name)
        if path.startswith(("/", "..")) or not (m.isfile() or m.isdir()):
            raise BundleError(f"the archive holds {m.name[:80]!r}: not a plain file under the bundle")
        yield m


def unpack(archive_path: str, sha: str, opt: str = OPT) -> str:
    """The archive into /opt/hpcc/bundles/<sha> (kept if already there: content-addressed, so the same)."""
    final = bundle_dir(sha, opt)
    if os.path.isdir(final):
        return final
    os.makedirs(os.path.dirname(final), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{sha[:12]}.", dir=os.path.dirname(final))
    try:
        with tarfile.open(archive_path, "r:gz") as archive:
            members = list(_safe_members(archive))
            if hasattr(tarfile, "data_filter"):  # 3.12+ (and 3.8.17+): no links, no special files, no escapes
                archive.extractall(tmp, members=members, filter="data")
            else:
                archive.extractall(tmp, members=members)
        if not os.path.isfile(os.path.join(tmp, "manifest.json")):
            raise BundleError(f"bundle {sha[:12]} has no manifest.json")
        os.rename(tmp, final)
    except (tarfile.TarError, OSError, EOFError) as e:
        raise BundleError(f"bundle {sha[:12]} could not be unpacked: {e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def fetch(get_object: Callable[[str, str, str], None], bucket: str, key: str, sha: str, opt: str = OPT) -> str:
    """The archive fetched and checked against sha (never unpacked when it does not match); its unpacked dir."""
    if os.path.isdir(bundle_dir(sha, opt)):
        return bundle_dir(sha, opt)
    os.makedirs(os.path.join(opt, "bundles"), exist_ok=True)
    fd, path = tempfile.mkstemp(prefix=".fetch.", dir=os.path.join(opt, "bundles"))
    os.close(fd)
    try:
        try:
            get_object(bucket, key, path)
        except Exception as e:  # the caller's AWS error: unreachable or refused
            raise BundleError(f"s3://{bucket}/{key} could not be fetched: {e}") from None
        got = sha256_file(path)
        if got != sha:
            raise BundleError(f"s3://{bucket}/{key}: expected sha256 {sha}, got {got}: not run")
        return unpack(path, sha, opt)
    finally:
        os.unlink(path)


def self_check(directory: str, run: Callable = subprocess.run, env: Optional[Dict[str, str]] = None) -> None:
    """The new bundle's agent, from its own directory, checks itself against this node's applied state."""
    env = dict(os.environ if env is None else env, PYTHONPATH=directory)
    try:
        out = run(
            [sys.executable, "-m", "hpcc_node.agent", "--self-check"],
            cwd=directory,
            env=env,
            capture_output=True,
            text=True,
            timeout=SELF_CHECK_SECONDS,
        )
    except subprocess.TimeoutExpired:
        raise BundleError(
            f"self-check of {os.path.basename(directory)[:12]} did not finish in {SELF_CHECK_SECONDS} s"
        ) from None
    if out.returncode != 0:
        tail = (out.stderr or out.stdout or "").strip().splitlines()[-1:] or ["no output"]
        raise BundleError(
            f"self-check of {os.path.basename(directory)[:12]} failed (exit {out.returncode}): {tail[0][:300]}"
        )


def switch(sha: str, opt: str = OPT) -> None:
    """/opt/hpcc/current -> bundles/<sha>, atomically (a new symlink renamed over the old)."""
    tmp = os.path.join(opt, f".current.{os.getpid()}")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(os.path.join("bundles", sha), tmp)
    os.replace(tmp, os.path.join(opt, "current"))


def prune(keep: set, opt: str = OPT) -> list:
    """Remove the unpacked bundles other than `keep` (the one switched to and the one before, for a rollback):
    a cluster kept for weeks sees many bundles."""
    root = os.path.join(opt, "bundles")
    gone = sorted(n for n in os.listdir(root) if n not in keep and len(n) == 64) if os.path.isdir(root) else []
    for name in gone:
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    return gone
