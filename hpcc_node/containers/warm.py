"""`python3 -m hpcc_node.containers.warm [--fsx DIR] [--node NAME] ensure REFERENCE` (PYTHONPATH=/opt/hpcc/current),
as root: the cache's command line (`python3 -m hpcc_node.containers`, its arguments and output) with the image
service's own enroot (service.py root_enroot: ENROOT_CONFIG_PATH at root's private credentials,
hpcc_contract/containers.py ROOT_ENROOT_CONFIG, and each squashfs made readable by the users who run it). So an
image warmed ahead of a job (`hpcc images pull`) is imported exactly as a job's first use would import it, and no
credential reaches an argument or the operator. Without root's credentials directory (mode 0700, root's) it exits 1
saying so, and nothing is imported."""

from __future__ import annotations

import logging
import sys
from typing import List, Optional, TextIO

from hpcc_node.containers import __main__ as cli
from hpcc_node.containers.service import root_enroot


def main(argv: Optional[List[str]] = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    try:
        enroot = root_enroot()
    except OSError as e:
        err.write(f"hpcc containers: root's enroot credentials: {e}\n")
        return 1
    return cli.main(argv, out, err, enroot=enroot)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sys.exit(main())
