"""The shared image cache's directory striped over every OST of the cluster's Lustre file system: a squashfs is
read whole by every node that starts its image, all at once, and a file on one OST (Lustre's default stripe count
is 1) is served by that OST's server alone. `lfs setstripe -c -1 DIR` makes every file created in DIR afterwards
use all OSTs (the Lustre Operations Manual, "Managing File Layout (Striping) and Free Space"; the Lustre wiki's
"Lustre Striping Best Practices": large files read by many clients at once, stripe count -1). Existing files keep
their layout, so it is set when the directory is made, before the first image."""

from __future__ import annotations

import shutil
import subprocess
from typing import Callable, Optional

LFS = "lfs"
TIMEOUT_S = 30


def stripe_wide(
    directory: str,
    log: Callable[[str], None],
    run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
    which: Callable[[str], Optional[str]] = shutil.which,
) -> bool:
    """`lfs setstripe -c -1 DIRECTORY`; False (logged) where there is no lfs (not a Lustre client) or it fails
    (not a Lustre directory): the cache works the same, its reads served by fewer file servers."""
    if which(LFS) is None:
        log(f"image cache {directory}: no lfs here (not a Lustre client): its layout left as the file system's")
        return False
    try:
        done = run(
            [LFS, "setstripe", "-c", "-1", directory], capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError) as e:
        log(f"image cache {directory}: lfs setstripe -c -1 failed: {e}")
        return False
    if done.returncode != 0:
        log(f"image cache {directory}: lfs setstripe -c -1: exit {done.returncode}: {done.stderr.strip()[-300:]}")
        return False
    log(f"image cache {directory}: striped over every OST (lfs setstripe -c -1): each image is read from all servers")
    return True
