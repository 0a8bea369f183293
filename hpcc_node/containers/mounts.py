"""`python3 -m hpcc_node.containers.mounts MOUNT_POINT`: enroot's mounts.d fstab of what every container sees of
this node (hpcc_contract/container_mounts.py), on stdout; the containers step writes it to MOUNTS_FILE."""

from __future__ import annotations

import sys
from typing import List, Optional

from hpcc_contract.container_mounts import container_mounts, render_enroot_mounts


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python3 -m hpcc_node.containers.mounts MOUNT_POINT\n")
        return 2
    try:
        sys.stdout.write(render_enroot_mounts(container_mounts(args[0])))
    except ValueError as e:
        sys.stderr.write(f"hpcc containers: {e}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
