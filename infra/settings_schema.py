"""The settings text's schema: the keys the nodes accept in `/hpcc/<cluster>/settings`, each value's pattern, and
the rules a whole text must keep. Standard library only, Python >= 3.8: the program (infra/node_settings.py
renders the text), the bootstrap (templates/steps/settings.sh.j2, rendered from PATTERNS) and the node side
(hpcc_node/, shipped in the bundle) read the same definitions, so a node refuses exactly what the program would
never write."""

from __future__ import annotations

import re
from typing import Dict, Optional, Set, Tuple

# The job scheduler the nodes run: none (launch with mpirun/torchrun over the hostfile) or slurm (infra/slurm.py).
SCHEDULERS: Tuple[str, ...] = ("none", "slurm")
# One OpenSSH public key line: a key type sshd accepts, its base64 blob, and an optional comment without spaces
# (sshd(8), "AUTHORIZED_KEYS FILE FORMAT"). No options: the keys are the users' own, for their own logins.
PUBLIC_KEY = (r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp256|ecdsa-sha2-nistp384|ecdsa-sha2-nistp521|"
              r"sk-ssh-ed25519@openssh\.com|sk-ecdsa-sha2-nistp256@openssh\.com) [A-Za-z0-9+/]{40,1400}={0,3}"
              r"( [A-Za-z0-9@._+-]{1,100})?")

POSITIVE = r"[1-9][0-9]{0,5}"  # no 0 (divisors, bounds) and no leading zero: bash arithmetic reads 08 as bad octal
PATTERNS: Dict[str, str] = {
    "NODE_COUNT": POSITIVE,  # compute nodes
    "SLOTS": POSITIVE,  # ranks per compute node
    "TIMEOUT_MINUTES": POSITIVE,
    "JOIN_TIMEOUT_MINUTES": POSITIVE,
    "API_INTERVAL_MS": POSITIVE,
    "POLL_SECONDS": POSITIVE,
    "API_BACKOFF_SECONDS": POSITIVE,
    "API_ATTEMPTS": POSITIVE,
    "SYNC_SECONDS": POSITIVE,
    "MASTER_PORT": POSITIVE,
    "LOGIN_USER": r"[a-z_][a-z0-9_-]{0,31}",
    "MOUNT_POINT": r"/[A-Za-z0-9._/-]*",
    "MPIRUN_OPTIONS": r"[A-Za-z0-9_.,:^/=+ -]*",
    "FABRIC": r"[A-Z][A-Z0-9_]*=[A-Za-z0-9_.,:^/+@-]*",
    "AUTHORIZED_KEY": PUBLIC_KEY,  # ssh.authorizedKeys: one key line each
    "IMDS_USER": r"[a-z_][a-z0-9_-]{0,31}",  # security.imdsForUsers: one user each (templates/steps/imds.sh.j2)
    "SCHEDULER": "|".join(SCHEDULERS),
    # slurm.conf node attributes of the compute type (infra/slurm.py), e.g. `CPUs=192 ... RealMemory=1992294 Gres=gpu:8`
    "SLURM_NODE": r"[A-Za-z]+=[A-Za-z0-9:]+( [A-Za-z]+=[A-Za-z0-9:]+)*",
    "SLURM_GPUS": r"0|[1-9][0-9]{0,2}",  # gres.conf: /dev/nvidia0 .. /dev/nvidia<N-1>
}
REPEATED = frozenset({"FABRIC", "AUTHORIZED_KEY", "IMDS_USER"})
SLURM_KEYS = frozenset({"SLURM_NODE", "SLURM_GPUS"})  # given with SCHEDULER=slurm only
# Keys a text may leave out, and what the nodes take then (a text from before Slurm has none of them).
OPTIONAL_DEFAULTS = {"SCHEDULER": "none", "SLURM_NODE": "", "SLURM_GPUS": ""}
OPTIONAL = frozenset(OPTIONAL_DEFAULTS)
SETTINGS_LIMIT = 8192  # the parameter's tier (Intelligent-Tiering) takes up to 8 KB (an Advanced parameter)
MASTER_PORT = 29500  # torch.distributed's usual rendezvous port


class SettingsError(ValueError):
    """A settings text or value the nodes would refuse; the message names the key."""


def check(key: str, value: str) -> None:
    if key not in PATTERNS:
        raise SettingsError(f"unknown settings key {key!r}; known: {', '.join(PATTERNS)}")
    if not re.fullmatch(PATTERNS[key], value):
        raise SettingsError(f"settings key {key}: {value!r} does not match {PATTERNS[key]}")


def check_scheduler(keys: Set[str], scheduler: Optional[str]) -> None:
    """SLURM_NODE and SLURM_GPUS come with SCHEDULER=slurm, both or neither."""
    scheduler = scheduler or OPTIONAL_DEFAULTS["SCHEDULER"]
    given = keys & SLURM_KEYS
    if scheduler == "slurm" and given != SLURM_KEYS:
        raise SettingsError(f"settings with SCHEDULER=slurm lack {', '.join(sorted(SLURM_KEYS - given))}")
    if scheduler != "slurm" and given:
        raise SettingsError(f"settings with SCHEDULER={scheduler} give {', '.join(sorted(given))}, which go with slurm only")
