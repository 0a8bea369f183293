"""enroot and pyxis (issue 35): the releases hpcc installs, pinned here and nowhere else, and where their files live.

enroot comes from NVIDIA's release packages, one .deb per architecture (enroot's doc/installation.md: `enroot_<ver>-1_
<dpkg arch>.deb` and `enroot+caps_<ver>-1_<dpkg arch>.deb` under `releases/download/v<ver>/`), fetched by the node
through the cluster's NAT like any other package. pyxis has no packages ("No prebuilt packages are provided", the
pyxis wiki's Installation page): it is built from its tagged source against the `spank.h` of the exact Slurm the
cluster runs ("Since Slurm 21.08, pyxis must be compiled against the release of Slurm that is going to be deployed",
pyxis README; maintainer on https://github.com/NVIDIA/pyxis/issues/95), once per Slurm version.

Checksums: how they are pinned. NVIDIA publishes no checksum file and no signature for enroot's packages (its
release tooling, pkg/release/*.sh, writes none), and GitHub's generated source archives are not promised to keep
their bytes. Each downloaded file therefore carries a `sha256` field here that must be filled from a download verified
by hand: fetch the asset, compare its sha256 with the `digest` GitHub's release API reports for that asset
(`GET /repos/NVIDIA/enroot/releases/tags/v<ver>`, `assets[].digest`, "sha256:..."), and with a second download from
another network; then write it here in the same review as the version. A `sha256` of None is an unpinned file: the
plan says so offline, and `require_pinned` refuses it for a real deploy (`hpcc preflight` and `hpcc up`:
infra/ops/preflight/rules.py containers_pinned). pyxis is pinned twice: by its tag's commit (verified, from the fetched
mirror) and by the sha256 of the tarball built from it. Nothing here is ever a guessed checksum.

Verification status, each fact: VERIFIED means read here from NVIDIA's own repository (the fetched mirrors of
NVIDIA/enroot at tag v4.1.2 = bd51f53 and NVIDIA/pyxis at tag v0.24.0 = 1075199); UNVERIFIED means not checked."""

from __future__ import annotations

import re
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
# GitHub's source archive of the tag (UNVERIFIED that its bytes are stable: GitHub generates it).
PYXIS_TARBALL = "https://github.com/NVIDIA/pyxis/archive/refs/tags/v{version}.tar.gz"
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


# TODO(issue 35): the real sha256 of each file, from a verified download (the module's docstring says how). Until
# they are filled, `require_pinned` refuses a real deploy with containers on. Never fill one from memory.
SHA256: dict[str, str | None] = {
    f"enroot_{ENROOT_VERSION}-1_amd64.deb": None,
    f"enroot+caps_{ENROOT_VERSION}-1_amd64.deb": None,
    f"enroot_{ENROOT_VERSION}-1_arm64.deb": None,
    f"enroot+caps_{ENROOT_VERSION}-1_arm64.deb": None,
    f"pyxis-{PYXIS_VERSION}.tar.gz": None,
}


class UnpinnedRelease(ValueError):
    """A file hpcc would download has no pinned sha256: the message names each and says how to pin it."""


def enroot_debs(arch: str) -> tuple[Download, ...]:
    """The enroot packages for an EC2 architecture (`x86_64` or `arm64`), in install order."""
    if arch not in DEB_ARCH:
        raise ValueError(f"enroot has packages for {', '.join(DEB_ARCH)}, not {arch!r}")
    out = []
    for package in ENROOT_PACKAGES:
        name = f"{package}_{ENROOT_VERSION}-1_{DEB_ARCH[arch]}.deb"
        url = ENROOT_RELEASES.format(version=ENROOT_VERSION) + name.replace("+", "%2B")
        out.append(Download(name, url, SHA256[name]))
    return tuple(out)


def pyxis_source() -> Download:
    name = f"pyxis-{PYXIS_VERSION}.tar.gz"
    return Download(name, PYXIS_TARBALL.format(version=PYXIS_VERSION), SHA256[name])


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


def downloads(arches: tuple[str, ...]) -> tuple[Download, ...]:
    """Every file a cluster of these architectures downloads for containers."""
    return (*(d for arch in sorted(set(arches)) for d in enroot_debs(arch)), pyxis_source())


def unpinned(arches: tuple[str, ...]) -> list[str]:
    return [d.name for d in downloads(arches) if not d.pinned]


def require_pinned(arches: tuple[str, ...]) -> None:
    """For a real deploy: every file pinned, else UnpinnedRelease (the offline plan only warns)."""
    missing = unpinned(arches)
    if missing:
        raise UnpinnedRelease(
            f"no sha256 is pinned for {', '.join(missing)} (infra/facts/containers.py SHA256): download each, check "
            "it against GitHub's release asset digest and a second download, and pin it there; or set "
            "containers.enabled: false"
        )
