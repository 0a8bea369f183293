"""The settings text's schema: the keys the nodes accept in `/hpcc/<cluster>/settings`, each value's pattern, the
rules beyond the characters (`value_problem`: who may log in, where the file system may go, which launch variables
and mpirun options), and the rules a whole text must keep (`text_problem`, `parse_text`). Standard library only,
Python >= 3.8: the program (infra/render/node_settings.py renders the text; the config's validators call the same
rules), the bootstrap (templates/steps/settings.sh.j2, rendered from these definitions) and the node side (hpcc_node/,
shipped in the bundle) read the same definitions, so a node refuses exactly what the program would never write. Whoever
can write the parameter is root on every node (docs/security.md): these rules are what a node still refuses from such a
writer."""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Set, Tuple

from hpcc_contract import formats

# health.bootDiagLevel: the DCGM diagnostic level of the boot checks (`dcgmi diag -r N`; 0: none, DCGM's levels
# 1-4), defined once for all its spellings: the config's `health.bootDiagLevel` (infra/config/model.py Health), the
# settings' HEALTH_DIAG_LEVEL (left out at the default), the bootstrap's $HPCC_HEALTH_DIAG_LEVEL, health.env's
# DCGM_LEVEL and the checks' NodeFacts.dcgm_level (hpcc_node/health/).
BOOT_DIAG_LEVEL_DEFAULT = 2  # at boot and after a remedy's reboot; a level is minutes of exclusive GPU use
BOOT_DIAG_LEVEL_MAX = 4


def boot_diag_level_problem(level: int) -> Optional[str]:
    """Why `level` is not a boot diagnostic level; None when it is one."""
    return None if 0 <= level <= BOOT_DIAG_LEVEL_MAX else f"{level} is not 0-{BOOT_DIAG_LEVEL_MAX}"


# The job scheduler the nodes run: none (launch with mpirun/torchrun over the hostfile) or slurm (infra/facts/slurm.py).
SCHEDULERS: Tuple[str, ...] = ("none", "slurm")
# One OpenSSH public key line: a key type sshd accepts, its base64 blob, and an optional comment without spaces
# (sshd(8), "AUTHORIZED_KEYS FILE FORMAT"). No options: the keys are the users' own, for their own logins.
PUBLIC_KEY = (
    r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp256|ecdsa-sha2-nistp384|ecdsa-sha2-nistp521|"
    r"sk-ssh-ed25519@openssh\.com|sk-ecdsa-sha2-nistp256@openssh\.com) [A-Za-z0-9+/]{40,1400}={0,3}"
    r"( [A-Za-z0-9@._+-]{1,100})?"
)

# Launch variables go into /etc/hpcc/env, which every login shell sources (root's too) and hpcc-mpirun exports to
# every rank: only the fabric libraries' own prefixes (libfabric, NCCL, oneCCL, Intel MPI's OFI choice;
# infra/facts/fabric.py), within them nothing that names a library, plugin, file or program to load or run, and no '/'.
# So never LD_*, PATH, BASH_ENV, ENV, PROMPT_COMMAND or PYTHON* (tests/contract/test_node_rules.py tries each).
FABRIC_NAMES = r"(FI|NCCL|CCL)_[A-Z0-9_]+|I_MPI_OFI_PROVIDER|I_MPI_OFI_LIBRARY_INTERNAL"
FABRIC_DENIED = r"[A-Z0-9_]*(PATH|PLUGIN|FILE|EXEC|AGENT|PRELOAD)[A-Z0-9_]*|[A-Z0-9_]*_LIBRARY"
# hpcc-mpirun passes these to every launch: the options infra/facts/fabric.py gives and their kin, one space apart. Not
# -x (exports), a launch agent (--launch-agent, plm_rsh_agent), --prefix, parameter files (--tune, --am) or any other.
MPIRUN_OPTION = (
    r"--mca (pml|btl|mtl|btl_tcp_if_(in|ex)clude|mtl_ofi_provider_(in|ex)clude) [A-Za-z0-9_.,:^+-]+"
    r"|--(bind-to|map-by|rank-by) [A-Za-z0-9:=,]+|--report-bindings|--tag-output"
)
MPIRUN_OPTIONS = f"(({MPIRUN_OPTION})( |$))*"
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
    "MOUNT_POINT": r"/[A-Za-z0-9._/-]{0,127}",  # MOUNT_POINT_MAX
    "MPIRUN_OPTIONS": MPIRUN_OPTIONS,
    "FABRIC": f"({FABRIC_NAMES})=[A-Za-z0-9_.,:^+@-]*",
    "AUTHORIZED_KEY": PUBLIC_KEY,  # ssh.authorizedKeys: one key line each
    "IMDS_USER": r"[a-z_][a-z0-9_-]{0,31}",  # security.imdsForUsers: one user each (templates/steps/imds.sh.j2)
    "SCHEDULER": "|".join(SCHEDULERS),
    # slurm.conf node attributes of the compute type (infra/facts/slurm.py), e.g. `CPUs=192 ... RealMemory=1992294
    # Gres=gpu:8`
    "SLURM_NODE": r"[A-Za-z]+=[A-Za-z0-9:]+( [A-Za-z]+=[A-Za-z0-9:]+)*",
    "SLURM_GPUS": r"0|[1-9][0-9]{0,2}",  # gres.conf: /dev/nvidia0 .. /dev/nvidia<N-1>
    "HEALTH_DIAG_LEVEL": f"[0-{BOOT_DIAG_LEVEL_MAX}]",  # cluster.health.bootDiagLevel (BOOT_DIAG_LEVEL_DEFAULT)
    # containers.cacheMaxGiB (ClusterConfig.image_cache_gib): the shared image cache's cap, which the head's agent
    # evicts to (hpcc_node/agent_evict.py); given with containers on only, so changing it needs no new bundle
    "IMAGE_CACHE_GIB": POSITIVE,
    # The controller's state (hpcc_contract/names.py): the bucket of membership.json and the nodes' status objects (S3
    # bucket naming rules, lower-case letters, digits, '-' and '.', 3-63), and its DynamoDB ledger table.
    "STATE_BUCKET": r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]",
    "LEDGER_TABLE": r"[A-Za-z0-9_.-]{3,255}",
    # The text's format (hpcc_contract/formats.py SETTINGS), written only from version 2 on: a version-1 text has no
    # FORMAT line, so the nodes booted before the key existed still accept it.
    "FORMAT": POSITIVE,
}
REPEATED = frozenset({"FABRIC", "AUTHORIZED_KEY", "IMDS_USER"})
SLURM_KEYS = frozenset({"SLURM_NODE", "SLURM_GPUS"})  # given with SCHEDULER=slurm only
# Keys a text may leave out, and what the nodes take then (a text from before Slurm has none of them).
OPTIONAL_DEFAULTS = {
    "SCHEDULER": "none",
    "SLURM_NODE": "",
    "SLURM_GPUS": "",
    "HEALTH_DIAG_LEVEL": str(BOOT_DIAG_LEVEL_DEFAULT),
    "IMAGE_CACHE_GIB": "",  # no cap given: containers off, nothing evicted
    "FORMAT": "1",
}
OPTIONAL = frozenset(OPTIONAL_DEFAULTS)
SETTINGS_LIMIT = 8192  # the parameter's tier (Intelligent-Tiering) takes up to 8 KB (an Advanced parameter)
MASTER_PORT = 29500  # torch.distributed's usual rendezvous port


class SettingsError(ValueError):
    """A settings text or value the nodes would refuse; the message names the key."""


class NewerSettings(SettingsError):
    """A settings text of a format newer than this bundle reads (its FORMAT line): written by a newer hpcc."""


def format_problem(text: str) -> Optional[str]:
    """Why a text of a newer format is refused (before any of its keys, which this reader may not know), or None.
    templates/steps/settings.sh.j2's apply_settings is the bash side (a test runs both)."""
    for line in text.splitlines():
        if line.startswith("FORMAT="):
            try:
                formats.check("settings", line[len("FORMAT=") :], formats.SETTINGS)
            except formats.NewerFormat as e:
                return f"settings: {e}"
            except formats.BadFormat:
                return None  # the value's pattern refuses it, by key
    return None


# --- accounts (LOGIN_USER, IMDS_USER) -----------------------------------------------------------------------------
# Accounts that run services or own system files, on the DLAMIs' Ubuntu and Amazon Linux and from the packages the
# bootstrap installs (munge, slurm): the login user gets the users' keys and the cluster key, and an IMDS user can
# read the node role's secrets, so either one being `nobody` or `sshd` hands that to whatever runs as it. The node
# also refuses any account whose uid is outside REGULAR_UID_MIN..REGULAR_UID_MAX (templates/steps/ssh.sh.j2,
# imds.sh.j2): the image may have system accounts this list does not name (nobody is 65534, Debian's slurm 64030).
SYSTEM_ACCOUNTS = frozenset(
    """
    root daemon bin sys sync games man lp mail news uucp proxy www-data backup list irc gnats nobody _apt syslog
    systemd-network systemd-resolve systemd-timesync messagebus sshd ec2-instance-connect adm dbus munge slurm
""".split()
)
REGULAR_UID_MIN, REGULAR_UID_MAX = 1000, 60000  # login.defs(5) UID_MIN and UID_MAX on Ubuntu and Amazon Linux


def account_problem(user: str) -> Optional[str]:
    if user in SYSTEM_ACCOUNTS:
        return (
            f"{user} is a system account; name a person's login user (the image's ubuntu or ec2-user, or "
            f"one with uid {REGULAR_UID_MIN} or more)"
        )
    return None


# --- the file system's mount point (MOUNT_POINT) ------------------------------------------------------------------
MOUNT_POINT_MAX = 128
# Mounting over one of these hides what the OS, the DLAMI (EFA, Open MPI and aws-ofi-nccl under /opt/amazon or
# /opt/aws-ofi-nccl, the Neuron SDK under /opt/aws, CUDA tools under /opt/nvidia, conda under /opt/conda, instance
# storage at /opt/dlami/nvme), the bootstrap (/etc/hpcc, /var/log) or the logins keep.
SYSTEM_TREES = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/lost+found",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/snap",
    "/sys",
    "/tmp",
    "/usr",
    "/var",
    "/opt/amazon",
    "/opt/aws",
    "/opt/aws-ofi-nccl",
    "/opt/conda",
    "/opt/dlami",
    "/opt/nvidia",
)
# Existing directories that hold other mounts or software: refused themselves, a new directory under them is fine.
SYSTEM_ROOTS = ("/", "/mnt", "/media", "/opt", "/srv")


def canonical_path(path: str) -> str:
    """`path` with `.`, `..`, empty components and trailing slashes resolved, as the kernel would walk it."""
    parts: List[str] = []
    for part in path.split("/"):
        if part == "..":
            parts = parts[:-1]
        elif part not in ("", "."):
            parts.append(part)
    return "/" + "/".join(parts)


def _within(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree + "/")


def mount_point_problems(path: str) -> List[str]:
    if not path.startswith("/"):
        return [f"{path!r} is not an absolute path; use a new directory such as /fsx"]
    if len(path) > MOUNT_POINT_MAX:
        return [f"is {len(path)} characters; keep it to {MOUNT_POINT_MAX}"]
    out = []
    canon = canonical_path(path)
    if canon != path:
        out.append(f"{path!r} has '.', '..', empty or trailing components; write it as {canon!r}")
    tree = next((t for t in SYSTEM_TREES if _within(canon, t)), None)
    if tree is not None:
        out.append(
            f"{canon} is in {tree}, a system, DLAMI or login directory: mounting there would hide what it "
            "holds; use a new directory such as /fsx"
        )
    elif canon in SYSTEM_ROOTS:
        out.append(
            f"{canon} already holds other mounts or software that the file system would hide; use a new "
            f"directory such as /fsx{'' if canon == '/' else ' or ' + canon + '/fsx'}"
        )
    return out


# --- launch variables (FABRIC: FABRIC_NAMES above) -----------------------------------------------------------------


def fabric_problem(pair: str) -> Optional[str]:
    name = pair.partition("=")[0]
    if not re.fullmatch(FABRIC_NAMES, name):
        return f"{name} is not a fabric variable (FI_*, NCCL_*, CCL_*, I_MPI_OFI_PROVIDER, I_MPI_OFI_LIBRARY_INTERNAL)"
    if re.fullmatch(FABRIC_DENIED, name):
        return f"{name} loads or runs something of its own choosing; it is never a launch variable"
    return None


def _escaped(path: str) -> str:
    return path.replace(".", r"\.").replace("+", r"\+")


# What a value may never be though its pattern takes it, as a regular expression both Python and bash's [[ =~ ]]
# (POSIX ERE) read alike: value_problem and the bootstrap's apply_settings refuse a value that matches in full. The
# functions above say why in words, for the config's messages; tests check that they agree with these.
ACCOUNTS_DENIED = "|".join(sorted(SYSTEM_ACCOUNTS))
MOUNT_POINT_DENIED = "|".join(
    [f"({'|'.join(_escaped(t) for t in SYSTEM_TREES)})(/.*)?"]
    + [_escaped(r) for r in SYSTEM_ROOTS]
    + [r".*//.*", r".*/\.\.?(/.*)?", r".+/"]
)  # not canonical: //, . or .., a trailing /
DENIED: Dict[str, str] = {
    "LOGIN_USER": ACCOUNTS_DENIED,
    "IMDS_USER": ACCOUNTS_DENIED,
    "MOUNT_POINT": MOUNT_POINT_DENIED,
    "FABRIC": f"({FABRIC_DENIED})=.*",
}
WHY = {
    "LOGIN_USER": account_problem,
    "IMDS_USER": account_problem,
    "FABRIC": fabric_problem,
    "MOUNT_POINT": lambda v: "; ".join(mount_point_problems(v)),
}


def value_problem(key: str, value: str) -> Optional[str]:
    """Why the nodes refuse `value` for `key`, or None: its PATTERNS entry must match in full and its DENIED entry
    must not. The one rule a settings value keeps, for the program, the bootstrap (settings.sh.j2 renders the same
    expressions) and the node agent."""
    if key not in PATTERNS:
        return f"unknown settings key {key!r}; known: {', '.join(PATTERNS)}"
    if not re.fullmatch(PATTERNS[key], value):
        return f"{value[:80]!r} does not match {PATTERNS[key]}"
    if key in DENIED and re.fullmatch(DENIED[key], value):
        return WHY[key](value) or f"{value[:80]!r} is refused"
    return None


def check(key: str, value: str) -> None:
    problem = value_problem(key, value)
    if problem:
        raise SettingsError(problem if key not in PATTERNS else f"settings key {key}: {problem}")


def parse_text(text: str) -> Dict[str, List[str]]:
    """A whole settings text as {key: [values]}, with every rule the nodes keep: KEY=VALUE lines, each value
    passing value_problem, a key other than REPEATED's at most once, every key but OPTIONAL's given, the Slurm
    keys with SCHEDULER=slurm only. Raises SettingsError naming the key."""
    newer = format_problem(text)
    if newer:
        raise NewerSettings(newer)
    found: Dict[str, List[str]] = {}
    for line in text.splitlines():
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Z][A-Z0-9_]*", key):
            raise SettingsError(f"settings line {line[:80]!r} is not KEY=VALUE")
        check(key, value)
        if key in found and key not in REPEATED:
            raise SettingsError(f"settings key {key} is given twice")
        found.setdefault(key, []).append(value)
    missing = [k for k in PATTERNS if k not in found and k not in REPEATED | OPTIONAL]
    if missing:
        raise SettingsError(f"settings lack {', '.join(missing)}")
    check_scheduler(set(found), found.get("SCHEDULER", [None])[0])
    return found


def text_problem(text: str) -> Optional[str]:
    """Why the nodes refuse the whole text, or None."""
    try:
        parse_text(text)
    except SettingsError as e:
        return str(e)
    return None


def check_scheduler(keys: Set[str], scheduler: Optional[str]) -> None:
    """SLURM_NODE and SLURM_GPUS come with SCHEDULER=slurm, both or neither."""
    scheduler = scheduler or OPTIONAL_DEFAULTS["SCHEDULER"]
    given = keys & SLURM_KEYS
    if scheduler == "slurm" and given != SLURM_KEYS:
        raise SettingsError(f"settings with SCHEDULER=slurm lack {', '.join(sorted(SLURM_KEYS - given))}")
    if scheduler != "slurm" and given:
        raise SettingsError(
            f"settings with SCHEDULER={scheduler} give {', '.join(sorted(given))}, which go with slurm only"
        )
