"""enroot and pyxis (issue 35): the releases hpcc installs, pinned here and nowhere else, and where their files live.

enroot comes from NVIDIA's release packages, one .deb per architecture (enroot's doc/installation.md: `enroot_<ver>-1_
<dpkg arch>.deb` and `enroot+caps_<ver>-1_<dpkg arch>.deb` under `releases/download/v<ver>/`), fetched by the node
through the cluster's NAT like any other package. pyxis has no packages ("No prebuilt packages are provided", the
pyxis wiki's Installation page): it is built from its tagged source against the `spank.h` of the exact Slurm the
cluster runs ("Since Slurm 21.08, pyxis must be compiled against the release of Slurm that is going to be deployed",
pyxis README; maintainer on https://github.com/NVIDIA/pyxis/issues/95), once per Slurm version.

Pins: how they are made. NVIDIA publishes no checksum file and no signature for enroot's packages (its release
tooling, pkg/release/*.sh, writes none), but GitHub's release API reports a `digest` ("sha256:<hex>") for each
release asset (`GET /repos/NVIDIA/enroot/releases/tags/v<ver>`, `assets[].digest`:
https://docs.github.com/en/rest/releases/assets), its record of the uploaded file. The user pins them in the stack
file (`containers.releaseDigests`, infra/config/containers.py), as `hpcc pin containers` prints them (infra/ops/
pins.py); `SHA256` here holds the ones the project itself verified (a download compared with that digest and with a
second download from another network), none yet, and the user's digest wins over it. A .deb with neither is
unpinned: `require_pinned` refuses it for a real deploy (`hpcc preflight` and `hpcc up`: infra/ops/preflight/rules.py
containers_pinned). pyxis is pinned by its tag's commit (verified, from the fetched mirror): the build fetches exactly
that commit with git, which checks every object against its hash, and refuses any other HEAD. Nothing here is ever a
guessed checksum.

Verification status, each fact: VERIFIED means read here from NVIDIA's own repository (the fetched mirrors of
NVIDIA/enroot at tag v4.1.2 = bd51f53 and NVIDIA/pyxis at tag v0.24.0 = 1075199); UNVERIFIED means not checked."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

# --- enroot ---------------------------------------------------------------------------------------------------------
# VERIFIED: tag v4.1.2 (commit bd51f53b6fa954805ae3e1985c5dc7594ff66d05, 2026-03-23), Makefile `VERSION := 4.1.2`.
# Newer releases (4.2.x) exist after the mirror's snapshot (UNVERIFIED: third-party scripts and a newer ParallelCluster
# cookbook name 4.2.1); move to one only with its changelog read and its checksums pinned.
ENROOT_VERSION = "4.1.2"
ENROOT_TAG_COMMIT = "bd51f53b6fa954805ae3e1985c5dc7594ff66d05"
# VERIFIED pattern (doc/installation.md at v4.1.2); the assets' presence on the release page is UNVERIFIED here (this
# machine cannot reach GitHub). `+` is literal in the file name; a URL carries it as %2B, as GitHub's links do.
ENROOT_RELEASES = "https://github.com/NVIDIA/enroot/releases/download/v{version}/"
# GitHub's release API for the tag: its `assets[]` each have `name` and `digest`, "sha256:<hex>"
# (https://docs.github.com/en/rest/releases/assets); `hpcc pin containers` reads it (infra/ops/pins.py).
ENROOT_RELEASE_API = "https://api.github.com/repos/NVIDIA/enroot/releases/tags/v{version}"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")  # an asset's digest as the API and the stack file spell it
ENROOT_PACKAGES = ("enroot", "enroot+caps")  # +caps: unprivileged users may import and convert images (setcap)
# dpkg's architecture names for EC2's (`dpkg --print-architecture`; doc/installation.md uses it).
DEB_ARCH = {"x86_64": "amd64", "arm64": "arm64"}
# VERIFIED (pkg/deb/control at v4.1.2): the .deb's Depends, plus what its hooks and pyxis need that it only suggests:
# libnvidia-container-tools for 98-nvidia.sh (GPU nodes only), squashfuse and fuse-overlayfs, pigz (Recommends).
ENROOT_APT_DEPENDS = ("curl", "gawk", "jq", "parallel", "squashfs-tools", "zstd", "bsdmainutils", "pigz")
ENROOT_APT_SUGGESTS = ("squashfuse", "fuse-overlayfs")
NVIDIA_CONTAINER_CLI_PACKAGE = "libnvidia-container-tools"  # UNVERIFIED: whether the DLAMI ships it already

# --- pyxis ----------------------------------------------------------------------------------------------------------
# VERIFIED: tag v0.24.0 (commit 107519944221822ea1dace4db8e7234b2eaa4cd5, 2026-05-11, "Release 0.24.0").
PYXIS_VERSION = "0.24.0"
PYXIS_TAG_COMMIT = "107519944221822ea1dace4db8e7234b2eaa4cd5"
# The repository the build fetches PYXIS_TAG_COMMIT from, by its id (`git fetch URL <commit>`; UNVERIFIED here that
# GitHub answers it, this machine cannot reach GitHub); the build refuses any other HEAD: templates/steps/pyxis.sh.j2.
PYXIS_REPOSITORY = "https://github.com/NVIDIA/pyxis.git"
# VERIFIED (Makefile at v0.24.0): `make install` puts spank_pyxis.so in $(libdir)/slurm, libdir = $(prefix)/lib,
# prefix ?= /usr/local. The plugstack line names it absolutely: the same path on the head and every node.
PYXIS_PLUGIN = "/usr/local/lib/slurm/spank_pyxis.so"
# VERIFIED (config.c at v0.24.0): the only plugstack options; any other is fatal ("unknown configuration option").
PYXIS_OPTIONS = (
    "runtime_path",
    "execute_entrypoint",
    "container_scope",
    "sbatch_support",
    "use_enroot_load",
    "importer",  # since 0.21.0
    "use_squashfuse",  # since 0.22.0
)
PYXIS_RUNTIME_PATH = "/run/pyxis"  # pyxis' default (config.c): a tmpfs every node has


@dataclass(frozen=True)
class Download:
    """One file a node (or the pyxis build) downloads, and the sha256 it must have. `sha256` None: not pinned yet."""

    name: str
    url: str
    sha256: str | None

    @property
    def pinned(self) -> bool:
        return self.sha256 is not None


# The project's own verified pins (the module's docstring says how); none yet. The stack file's
# containers.releaseDigests (what `hpcc pin containers` prints) fills them and wins. Never fill one from memory.
SHA256: dict[str, str | None] = {
    f"enroot_{ENROOT_VERSION}-1_amd64.deb": None,
    f"enroot+caps_{ENROOT_VERSION}-1_amd64.deb": None,
    f"enroot_{ENROOT_VERSION}-1_arm64.deb": None,
    f"enroot+caps_{ENROOT_VERSION}-1_arm64.deb": None,
}
DIGESTS_FIELD = "cluster.containers.releaseDigests"


class UnpinnedRelease(ValueError):
    """A file hpcc would download has no pinned sha256: the message names each and says how to pin it."""


def enroot_asset_names(arches: tuple[str, ...] = tuple(DEB_ARCH)) -> tuple[str, ...]:
    """The release's .deb file names for these EC2 architectures, in install order per architecture."""
    for arch in arches:
        if arch not in DEB_ARCH:
            raise ValueError(f"enroot has packages for {', '.join(DEB_ARCH)}, not {arch!r}")
    return tuple(f"{p}_{ENROOT_VERSION}-1_{DEB_ARCH[a]}.deb" for a in arches for p in ENROOT_PACKAGES)


def _sha256(name: str, digests: Mapping[str, str]) -> str | None:
    """The user's digest's hex (it wins), else the project's pin, else None."""
    given = digests.get(name)
    return given.removeprefix("sha256:") if given else SHA256.get(name)


def enroot_debs(arch: str, digests: Mapping[str, str] | None = None) -> tuple[Download, ...]:
    """The enroot packages for an EC2 architecture (`x86_64` or `arm64`), in install order, each with its sha256 from
    `digests` (the stack's containers.releaseDigests: name -> "sha256:<hex>") or SHA256."""
    base = ENROOT_RELEASES.format(version=ENROOT_VERSION)
    return tuple(
        Download(name, base + name.replace("+", "%2B"), _sha256(name, digests or {}))
        for name in enroot_asset_names((arch,))
    )


# Slurm's version as `sinfo --version` / `slurmd -V` print it ("slurm 22.05.8"; Debian's and Ubuntu's packages
# print the upstream version) and the build's key: one build per pyxis release, Slurm version and architecture,
# shared by every node that runs that Slurm (on the cluster's file system: templates/steps/pyxis.sh.j2).
SLURM_VERSION = re.compile(r"[0-9]{2}\.[0-9]{2}\.[0-9]{1,3}")


def pyxis_build_key(slurm_version: str, arch: str) -> str:
    """`pyxis/<pyxis>/slurm-<slurm>/<dpkg arch>/spank_pyxis.so`: where the one build for that Slurm is kept."""
    if not SLURM_VERSION.fullmatch(slurm_version):
        raise ValueError(f"Slurm version {slurm_version[:40]!r} is not major.minor.micro, e.g. 22.05.8")
    if arch not in DEB_ARCH:
        raise ValueError(f"pyxis is built for {', '.join(DEB_ARCH)}, not {arch!r}")
    return f"pyxis/{PYXIS_VERSION}/slurm-{slurm_version}/{DEB_ARCH[arch]}/spank_pyxis.so"


def downloads(arches: tuple[str, ...], digests: Mapping[str, str] | None = None) -> tuple[Download, ...]:
    """Every file a cluster of these architectures downloads by a checksum (pyxis comes by its commit)."""
    return tuple(d for arch in sorted(set(arches)) for d in enroot_debs(arch, digests))


def unpinned(arches: tuple[str, ...], digests: Mapping[str, str] | None = None) -> list[str]:
    return [d.name for d in downloads(arches, digests) if not d.pinned]


def require_pinned(arches: tuple[str, ...], digests: Mapping[str, str] | None = None) -> None:
    """For a real deploy (preflight, `hpcc up`): every file pinned, by the stack's digests or the project, else
    UnpinnedRelease."""
    missing = unpinned(arches, digests)
    if missing:
        raise UnpinnedRelease(
            f"no sha256 is pinned for {', '.join(missing)}: run `hpcc pin containers STACK_FILE` and paste its output "
            f"into the stack file ({DIGESTS_FIELD}: GitHub's digest of each release asset), "
            "or set containers.enabled: false"
        )
