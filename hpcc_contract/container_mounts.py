"""What every container sees of its node for training (issue 35, item 4), in one list: the cluster's file system
read-write; hpcc's hostfiles and launch environment (/etc/hpcc, read-only: the membership rewrites the files in it, so
the directory is bound, never a file, whose old inode a rename would leave behind); the EFA devices and the host's
libfabric, where the node has them. The GPUs come from enroot's NVIDIA hook (infra/render/containers.py enroot_hooks),
Slurm's and PMIx's variables from its 50-slurm-pmi.sh hook.

Two renderings of the one list: enroot's mounts.d fstab (every container enroot starts, pyxis' among them; enroot's
doc/configuration.md: "mounts.d/*.fstab", fstab(5) lines with enroot's `x-create=dir|file` and `nofail`, as its own
conf/hooks/20-autorc.sh writes them), and the OCI runtime spec's `mounts` (https://github.com/opencontainers/
runtime-spec/blob/main/config.md#mounts), which the box's Slurm-native containers use where enroot cannot run.

The node renders the fstab with its settings' MOUNT_POINT (`python3 -m hpcc_node.containers.mounts MOUNT_POINT`,
from the containers step, templates/steps/containers.sh.j2, into MOUNTS_FILE); the box builds its OCI bundles'
mounts here."""

from __future__ import annotations

import re
from typing import List, NamedTuple, Tuple

MOUNTS_FILE = "/etc/enroot/mounts.d/90-hpcc.fstab"  # after enroot's own 10-system and 20-config
HPCC_ETC = "/etc/hpcc"  # the hostfiles, /etc/hpcc/env, mpirun-options (templates/steps/launch_env.sh.j2)
EFA_DEVICES = "/dev/infiniband"  # the EFA interfaces' uverbs devices (the EFA installer's driver)
EFA_LIBFABRIC = "/opt/amazon/efa"  # the EFA installer's libfabric and fi_info
_PATH = re.compile(r"/[A-Za-z0-9._/-]{0,255}")


class Mount(NamedTuple):
    source: str
    target: str
    writable: bool
    optional: bool  # absent on this node (no EFA): skipped, not an error


def container_mounts(mount_point: str) -> Tuple[Mount, ...]:
    """The node paths every container gets; `mount_point` is the cluster file system's (fsx.mountPoint)."""
    if not _PATH.fullmatch(mount_point) or ".." in mount_point.split("/"):
        raise ValueError(f"fsx.mountPoint {mount_point[:80]!r} is not an absolute path")
    return (
        Mount(mount_point, mount_point, writable=True, optional=False),
        Mount(HPCC_ETC, HPCC_ETC, writable=False, optional=False),
        Mount(EFA_DEVICES, EFA_DEVICES, writable=True, optional=True),
        Mount(EFA_LIBFABRIC, EFA_LIBFABRIC, writable=False, optional=True),
    )


def render_enroot_mounts(mounts: Tuple[Mount, ...]) -> str:
    """enroot's fstab: `SOURCE TARGET none OPTIONS`, recursive binds made where the image lacks the directory."""
    lines = []
    for m in mounts:
        options = ["x-create=dir", "rbind", _mode(m)] + (["nofail", "silent"] if m.optional else [])
        lines.append(f"{m.source} {m.target} none {','.join(options)}")
    return "".join(f"{line}\n" for line in lines)


def oci_mounts(mounts: Tuple[Mount, ...], exists=lambda path: True) -> List[dict]:
    """The OCI spec's mounts for the same list; an optional source the node lacks (`exists`) is left out."""
    return [
        {
            "destination": m.target,
            "type": "bind",
            "source": m.source,
            "options": ["rbind", "rw" if m.writable else "ro"],
        }
        for m in mounts
        if not m.optional or exists(m.source)
    ]


def _mode(m: Mount) -> str:
    return "rw" if m.writable else "ro"
