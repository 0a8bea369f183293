"""What the host certificates (hpcc_node/certs.py) and the cluster keys (hpcc_node/cluster_keys.py) share: OpenSSH's
tools through an injected `run`, new key pairs in private scratch directories, and files read or replaced whole (a
connection that reads a key or certificate at that instant reads the old one or the new one, never half).
Standard library only."""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
from typing import Callable, List, Tuple

from hpcc_node import certstore

Run = Callable[..., subprocess.CompletedProcess]


def checked(run: Run, args: List[str]) -> str:
    """ARGS' stdout; RuntimeError with the end of its stderr when it fails. TZ=UTC: ssh-keygen -V reads its times
    in the local zone."""
    out = run(args, capture_output=True, text=True, timeout=60, env=dict(os.environ, TZ="UTC"))
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:2])}: {(out.stderr or '').strip()[-200:]}")
    return out.stdout


def key_pair(comment: str, run: Run = subprocess.run) -> Tuple[str, str]:
    """A new Ed25519 key: (the private key in OpenSSH format, its public key line without the comment)."""
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "key")
        checked(run, ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path])
        with open(path) as f, open(path + ".pub") as g:
            return f.read(), certstore.key_line(g.read())


def public_of(private: str, run: Run = subprocess.run) -> str:
    """The public key line (no comment) of a private key (ssh-keygen -y)."""
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "key")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(private.rstrip("\n") + "\n")
        return certstore.key_line(checked(run, ["ssh-keygen", "-y", "-f", path]))


def read_text(path: str) -> str:
    """The file's text, stripped; "" when it cannot be read."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def replace_file(path: str, text: str, mode: int = 0o644, uid: int = -1, gid: int = -1) -> bool:
    """Write TEXT to PATH whole (a rename), with MODE and, given, an owner; a file that already is so is left as it
    is, so that a second run changes nothing (not even its time). Whether it wrote."""
    try:
        held = os.stat(path)
        with open(path) as f:
            if (
                f.read() == text
                and stat.S_IMODE(held.st_mode) == mode
                and uid in (-1, held.st_uid)
                and gid in (-1, held.st_gid)
            ):
                return False
    except (OSError, UnicodeDecodeError):
        pass
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as f:
        f.write(text)
    os.chmod(tmp, mode)
    if uid != -1 or gid != -1:
        os.chown(tmp, uid, gid)
    os.replace(tmp, path)
    return True
