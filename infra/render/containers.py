"""What the nodes get for containers (issue 35), in the bundle's containers/ (bundle_files; installed by
templates/steps/containers.sh.j2): enroot's configuration, the pyxis line of the configless Slurm's plugstack.conf,
which of enroot's hooks are on, the directories enroot needs, pyxis' importer entry, which registries root holds
credentials for, and the credentials' root-only directory (their lines: hpcc_contract/enroot_credentials.py).

enroot.conf. enroot reads each line as `KEY VALUE` and expands VALUE with the shell (`eval echo "${value}"` in
enroot.in's config::load, after `bash -n` over the whole file; https://github.com/NVIDIA/enroot at v4.1.2), and unsets
a boolean written no/false (config::fini). So a value in this file is shell: nothing a user wrote goes into it as text.
Numbers are rendered from ints, booleans as yes/no, the squash options from a fixed table, the paths from hpcc's own
constants (`$(id -u)` and `$(id -g)` are hpcc's, for per-user directories, as the pyxis wiki's Setup page writes them),
and `render_enroot_conf` checks every line against ENROOT_LINE before returning.

Where enroot writes. The runtime directory, the unpacked containers (data), the per-node layer cache and the temporary
files go on the instance store where the type has one (the DLAMI mounts it at /opt/dlami/nvme: UNVERIFIED here, from
AWS's HyperPod lifecycle scripts and hpcc_contract/settings.py; the wiring step must check the mount and fall back),
else on the root volume under /var/lib/hpcc/enroot.

Credentials. No user reads one. The registry credentials root keeps (the ECR token from the node's role, the NGC key
from the named secret: users' own processes never reach instance metadata, security.imdsForUsers) are enroot's
`.credentials` (CREDENTIALS_FILE, 0600) in ROOT_ENROOT_CONFIG (0700, root's), which no enroot.conf names: only the
node's image service (hpcc_node/containers/service.py) sets ENROOT_CONFIG_PATH to it, in its own `enroot digest` and
`enroot import` children's environment (the variable wins over the file: enroot.in config::load). Jobs get images
through pyxis' `importer=` (IMPORTER_ENTRY, the executable IMPORTER_ENTRY_TEXT): pyxis runs it as the job's user
(importer.c), it asks the service over its socket, and the service answers the shared cache's squashfs. Users'
own enroot keeps enroot's default ENROOT_CONFIG_PATH (their own `~/.config/enroot`).

pyxis. One `required` line with the plugin's absolute path (the same on the head and every node) and pyxis' own
options (config.c at v0.24.0; an unknown option is fatal). It goes directly into the head's plugstack.conf, which
configless Slurm ships to every slurmd and client (slurmctld's slurmd_config_files and client_config_files include
plugstack.conf: SchedMD/slurm src/slurmctld/proc_req.c; https://slurm.schedmd.com/configless_slurm.html), not into an
`include plugstack.conf.d/*`, which configless Slurm does not ship. `remap_root` is no pyxis option since 0.12 (commit
2e09b7d, "Rely on the enroot config for the default root remapping mode"): ENROOT_REMAP_ROOT decides."""

from __future__ import annotations

import posixpath
import re
from typing import NamedTuple

from hpcc_contract.containers import CACHE_SUBDIR, INSTANCE_STORE_MOUNT, ROOT_ENROOT_CONFIG
from hpcc_contract.enroot_credentials import CREDENTIALS_MODE, CREDENTIALS_NAME, NGC_MACHINES  # noqa: F401
from infra.config.containers import Containers, Enroot, Pyxis
from infra.config.validators.containers import secret_problem
from infra.facts import containers as facts
from infra.facts.instance_types import InstanceType

ROOT_VOLUME_BASE = "/var/lib/hpcc/enroot"
ROOT_ONLY_MODE = 0o700
# pyxis execve(2)s `importer=` itself (importer.c), so it is an executable file: this one, root's, mode 0755, running
# hpcc_node/containers/importer.py from the bundle under `python3 -I` (the job's PYTHON* variables ignored).
IMPORTER_ENTRY = "/usr/local/libexec/hpcc/pyxis-importer"
IMPORTER_MODE = 0o755
BUNDLE_DIR = "/opt/hpcc/current"
CONF_FILE = "/etc/enroot/enroot.conf"  # the .deb's (pkg/deb/rules: sysconfdir /etc)
HOOKS_DIR = "/etc/enroot/hooks.d"  # on by being here (enroot's runtime.sh hook_dirs)
EXTRA_HOOKS_DIR = "/usr/share/enroot/hooks.d"  # the .deb's extra hooks, off until linked into HOOKS_DIR

# mksquashfs options per compression (ENROOT_SQUASH_OPTIONS): "none" is the pyxis wiki's Setup page's; "lzo" enroot's
# default (enroot.in); "zstd" pyxis' caching importer's (importers/caching_importer.sh at v0.24.0).
SQUASH_OPTIONS = {
    "none": "-noI -noD -noF -noX -no-duplicates",
    "lzo": "-comp lzo -noD -exit-on-error",
    "zstd": "-comp zstd -Xcompression-level 3 -b 1M",
}
# Per user and per group, as the pyxis wiki writes them; hpcc's literals, expanded by enroot's shell.
PER_USER, PER_GROUP = "user-$(id -u)", "group-$(id -g)"
_PATH = r"/(?:[A-Za-z0-9._-]+/)*(?:[A-Za-z0-9._-]+|user-\$\(id -u\)|group-\$\(id -g\))"
# Every line enroot.conf may hold: a comment, or an ENROOT_ key and a value of paths, numbers, yes/no or the squash
# options. No quote, `;`, `|`, `&`, `<`, `>`, backtick, backslash or `$` but in the two expansions above.
ENROOT_LINE = re.compile(
    r"#[ -~]*|ENROOT_[A-Z_]+ (?:"
    + _PATH
    + r"|[0-9]{1,6}|yes|no|(?:-[A-Za-z-]+|[0-9A-Za-z]+)(?: (?:-[A-Za-z-]+|[0-9A-Za-z]+))*)"
)
_OPTION = re.compile(r"[a-z_]+=(?:/[A-Za-z0-9._/-]+|[a-z0-9]+)")


class BadRender(ValueError):
    """A value that would become syntax in a rendered file: never rendered."""


def enroot_base(instance_store: bool) -> str:
    return f"{INSTANCE_STORE_MOUNT}/enroot" if instance_store else ROOT_VOLUME_BASE


class Paths(NamedTuple):
    runtime: str
    data: str
    cache: str
    temp: str

    @property
    def parents(self) -> tuple[str, ...]:
        """What the node creates, mode 1777 (enroot makes each user's own directory under it, umask 077: enroot.in);
        ENROOT_TEMP_PATH itself, which enroot never creates."""
        return tuple(p.rsplit("/", 1)[0] if p.endswith(")") else p for p in self)


def enroot_paths(instance_store: bool) -> Paths:
    base = enroot_base(instance_store)
    return Paths(f"{base}/runtime/{PER_USER}", f"{base}/data/{PER_USER}", f"{base}/cache/{PER_GROUP}", f"{base}/tmp")


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def enroot_settings(enroot: Enroot, *, instance_store: bool) -> dict[str, str]:
    """enroot.conf's keys and values, in the file's order. ENROOT_ALLOW_HTTP only when asked; ENROOT_MAX_PROCESSORS
    only when given (enroot's default is every CPU)."""
    paths = enroot_paths(instance_store)
    out = {
        "ENROOT_RUNTIME_PATH": paths.runtime,
        "ENROOT_DATA_PATH": paths.data,
        "ENROOT_CACHE_PATH": paths.cache,
        "ENROOT_TEMP_PATH": paths.temp,
        "ENROOT_SQUASH_OPTIONS": SQUASH_OPTIONS[enroot.squash_compression],
    }
    if enroot.max_processors is not None:
        out["ENROOT_MAX_PROCESSORS"] = str(int(enroot.max_processors))
    out |= {
        "ENROOT_MAX_CONNECTIONS": str(int(enroot.max_connections)),
        "ENROOT_CONNECT_TIMEOUT": str(int(enroot.connect_timeout_seconds)),
        "ENROOT_TRANSFER_TIMEOUT": str(int(enroot.transfer_timeout_seconds)),
        "ENROOT_TRANSFER_RETRIES": str(int(enroot.transfer_retries)),
        "ENROOT_ROOTFS_WRITABLE": _yes(enroot.rootfs_writable),
        "ENROOT_REMAP_ROOT": _yes(enroot.remap_root),
        "ENROOT_MOUNT_HOME": _yes(enroot.mount_home),
        "ENROOT_RESTRICT_DEV": _yes(enroot.restrict_dev),
    }
    if enroot.allow_http:
        out["ENROOT_ALLOW_HTTP"] = "yes"
    return out


def render_enroot_conf(enroot: Enroot, *, instance_store: bool) -> str:
    lines = [
        "# hpcc (issue 35): enroot's configuration, rendered by infra/render/containers.py. enroot expands each value",
        "# with the shell (enroot.in config::load); environment variables of the same name take precedence.",
    ]
    lines += [f"{key} {value}" for key, value in enroot_settings(enroot, instance_store=instance_store).items()]
    for line in lines:
        if not ENROOT_LINE.fullmatch(line):
            raise BadRender(f"enroot.conf: {line[:80]!r} is not a line hpcc renders")
    return "\n".join(lines) + "\n"


def _bool(flag: bool) -> str:
    return "1" if flag else "0"  # pyxis' parse_bool takes 1/true/yes/y and 0/false/no/n (config.c)


def pyxis_options(pyxis: Pyxis, *, importer: str = IMPORTER_ENTRY) -> dict[str, str]:
    """pyxis' options; `importer` hpcc's (pyxis >= 0.21.0, importers/README.md), so every docker:// image a job
    names comes from the node's image service and the shared cache, never from an `enroot import` as the user."""
    return {
        "runtime_path": facts.PYXIS_RUNTIME_PATH,
        "container_scope": pyxis.container_scope,
        "execute_entrypoint": _bool(pyxis.execute_entrypoint),
        "sbatch_support": _bool(pyxis.sbatch_support),
        "importer": importer,
    }


def render_importer_entry(bundle: str = BUNDLE_DIR) -> str:
    """IMPORTER_ENTRY's text: the bundle's importer.py, which pyxis runs as `IMPORTER_ENTRY get URI | release`."""
    if not re.fullmatch(r"/[A-Za-z0-9._/-]+", bundle):
        raise BadRender(f"importer entry: bundle {bundle[:80]!r} is not a plain absolute path")
    return (
        "#!/usr/bin/python3 -I\n"
        "# hpcc (issue 35): pyxis' importer= (infra/render/containers.py); as the job's user, no credential\n"
        "import sys\n\n"
        f"sys.path.insert(0, {bundle!r})\n"
        "from hpcc_node.containers.importer import main  # noqa: E402\n\n"
        "sys.exit(main())\n"
    )


def render_plugstack(pyxis: Pyxis, *, importer: str = IMPORTER_ENTRY) -> str:
    """The plugstack.conf line: `required <plugin> [option=value ...]` (SPANK's format: slurm's plugstack.conf(5))."""
    options = pyxis_options(pyxis, importer=importer)
    words = [f"{key}={value}" for key, value in options.items()]
    for key, word in zip(options, words, strict=True):
        if key not in facts.PYXIS_OPTIONS or not _OPTION.fullmatch(word):
            raise BadRender(f"plugstack.conf: {word[:80]!r} is not a pyxis option hpcc renders")
    return " ".join(["required", facts.PYXIS_PLUGIN, *words]) + "\n"


class Hooks(NamedTuple):
    link: tuple[str, ...]  # from EXTRA_HOOKS_DIR into HOOKS_DIR
    remove: tuple[str, ...]  # from HOOKS_DIR


def enroot_hooks(*, nvidia: bool) -> Hooks:
    """50-slurm-pmi.sh passes Slurm's and PMIx's variables (and PMIx's server directory) into the container, which
    multi-node MPI and `srun --mpi=pmix` need; 50-slurm-pytorch.sh sets PyTorch's rank variables from Slurm's (both
    linked by ParallelCluster's cookbook and the pyxis wiki). 98-nvidia.sh (on by default) exposes the GPUs through
    nvidia-container-cli; on a node without NVIDIA GPUs it fails any image that sets NVIDIA_VISIBLE_DEVICES
    ("Command not found: nvidia-container-cli"), so it is removed there."""
    return Hooks(("50-slurm-pmi.sh", "50-slurm-pytorch.sh"), () if nvidia else ("98-nvidia.sh",))


# --- credentials ----------------------------------------------------------------------------------------------------
# Their lines are hpcc_contract/enroot_credentials.py's (the node writes them: its token and key are run-time values).
CREDENTIALS_FILE = f"{ROOT_ENROOT_CONFIG}/{CREDENTIALS_NAME}"  # mode CREDENTIALS_MODE, in ROOT_ENROOT_CONFIG (0700)


def credential_machines(containers: Containers) -> tuple[str, ...]:
    """The machines the credentials file names besides the account's ECR: NGC's two when a secret is named."""
    return NGC_MACHINES if containers.ngc_secret else ()


class NodeContainers(NamedTuple):
    enroot_conf: str
    hooks: Hooks
    directories: tuple[str, ...]  # mode 1777
    root_only: tuple[str, ...]  # mode ROOT_ONLY_MODE, root's: the credentials' directory
    importer_entry: str  # IMPORTER_ENTRY's text, mode IMPORTER_MODE


def for_type(containers: Containers, itype: InstanceType) -> NodeContainers:
    """What a node of this type gets: its enroot.conf (instance store or root volume), hooks, directories, the
    credentials' root-only directory and pyxis' importer."""
    store = itype.instance_store_gb > 0
    return NodeContainers(
        render_enroot_conf(containers.enroot, instance_store=store),
        enroot_hooks(nvidia=itype.accelerator == "nvidia"),
        enroot_paths(store).parents,
        (ROOT_ENROOT_CONFIG,),
        render_importer_entry(),
    )


# --- the bundle's containers/ (templates/steps/containers.sh.j2 installs them) ---------------------------------------
BUNDLE_SUBDIR = "containers"
# Where enroot writes is decided on the node, not here: the DLAMI's instance store mount is UNVERIFIED (above), so
# the step uses the instance store's files only where INSTANCE_STORE_MOUNT is a mount point, and one bundle serves
# node groups of types with and without an instance store.
STORES = {"instance-store": True, "root-volume": False}
NODE_KINDS = {"gpu": True, "cpu": False}  # the hooks: NVIDIA's on a node with NVIDIA GPUs only


def bundle_files(containers: Containers) -> dict[str, bytes]:
    """`containers/` in the bundle (infra/render/bundle.py): `enroot.conf.<store>` and `directories.<store>` (one
    path a line, mode 1777) per store, `hooks.<kind>` (`link NAME` or `remove NAME` a line) per node kind,
    `plugstack.conf` (the head's, shipped by configless Slurm), `pyxis-importer` (IMPORTER_ENTRY's text) and
    `registries` (render_registries)."""
    files: dict[str, bytes] = {}
    for store, on in STORES.items():
        files[f"{BUNDLE_SUBDIR}/enroot.conf.{store}"] = render_enroot_conf(
            containers.enroot, instance_store=on
        ).encode()
        files[f"{BUNDLE_SUBDIR}/directories.{store}"] = "".join(f"{d}\n" for d in enroot_paths(on).parents).encode()
    for kind, nvidia in NODE_KINDS.items():
        hooks = enroot_hooks(nvidia=nvidia)
        lines = [f"link {name}" for name in hooks.link] + [f"remove {name}" for name in hooks.remove]
        files[f"{BUNDLE_SUBDIR}/hooks.{kind}"] = "".join(f"{line}\n" for line in lines).encode()
    files[f"{BUNDLE_SUBDIR}/plugstack.conf"] = (
        "# hpcc (issue 35): pyxis, rendered by infra/render/containers.py; configless Slurm ships this file\n"
        + render_plugstack(containers.pyxis)
    ).encode()
    files[f"{BUNDLE_SUBDIR}/pyxis-importer"] = render_importer_entry().encode()
    files[f"{BUNDLE_SUBDIR}/registries"] = render_registries(containers).encode()
    return files


def render_registries(containers: Containers) -> str:
    """Which registries root holds credentials for (hpcc_node/containers/credentials.py): `ecr` (the account's, in
    the cluster's Region) and `ngc <secret>` (the containers step fetches that secret's key at boot)."""
    lines = ["ecr"] if containers.ecr else []
    if containers.ngc_secret:
        if secret_problem(containers.ngc_secret):
            raise BadRender("registries: containers.ngcSecret names no secret (its value is not shown)")
        lines.append(f"ngc {containers.ngc_secret}")
    return "".join(f"{line}\n" for line in lines)


def pyxis_shared_path(mount: str, slurm_version: str, arch: str) -> str:
    """Where the one pyxis build for a Slurm version and architecture is kept on the cluster's file system:
    `<mount>/.hpcc/` + facts.pyxis_build_key (the step renders the same path with the node's own version)."""
    return posixpath.join(mount, posixpath.dirname(CACHE_SUBDIR), facts.pyxis_build_key(slurm_version, arch))
