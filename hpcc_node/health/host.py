"""Checks of the node's own file systems, run in a child process (`python -m hpcc_node.health.host ...`) because
a hung Lustre mount blocks whoever touches it in uninterruptible sleep: the runner abandons the child at its
timeout, the agent never blocks. The child prints its result as one JSON line; parse_probe reads it back.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import asdict
from typing import Callable, List, Optional

from hpcc_node.health.verdict import DISK_FREE, SHARED_MOUNT, CheckResult, fail, ok, unknown

DISK_MIN_FREE_GIB = 20  # below it checkpoints, container layers and core dumps start failing jobs
PROBE_FILE = ".hpcc-health-{host}"  # one per node at the mount's root, removed after each probe


def probe_mount(path: str, host: str, is_mount: Callable[[str], bool] = os.path.ismount) -> CheckResult:
    """The shared file system is mounted, answers, and takes a write that reads back."""
    if not is_mount(path):
        return fail(SHARED_MOUNT, f"{path} is not mounted", "drain", "reboot")
    probe = os.path.join(path, PROBE_FILE.format(host=host))
    token = f"{host} {os.getpid()}\n"
    try:
        os.statvfs(path)
        with open(probe, "w") as f:
            f.write(token)
            f.flush()
            os.fsync(f.fileno())
        with open(probe) as f:
            back = f.read()
        os.unlink(probe)
    except OSError as e:
        return fail(SHARED_MOUNT, f"{path} is mounted but not writable: {e.strerror or e}", "drain", "reboot")
    if back != token:
        return fail(SHARED_MOUNT, f"{path}: a write read back differently", "drain", "reboot")
    return ok(SHARED_MOUNT, f"{path} answers and is writable")


def probe_disk(path: str, min_free_gib: float = DISK_MIN_FREE_GIB) -> CheckResult:
    usage = shutil.disk_usage(path)
    free_gib = usage.free / 2**30
    if free_gib < min_free_gib:
        return fail(DISK_FREE, f"{path} has {free_gib:.1f} GiB free, under {min_free_gib:g} GiB", "drain", "none")
    return ok(DISK_FREE, f"{path} has {free_gib:.0f} GiB free")


def parse_probe(out: str, rc: int, check: str) -> CheckResult:
    """A probe child's one JSON line; anything else (a crash, a traceback) is `unknown`, never a pass."""
    lines = [line for line in out.splitlines() if line.strip()]
    try:
        data = json.loads(lines[-1]) if rc == 0 and lines else None
        result = CheckResult(**data) if isinstance(data, dict) else None
    except (ValueError, TypeError):
        result = None
    if result is None or result.check != check:
        tail = lines[-1][:160] if lines else "no output"
        return unknown(check, f"the {check} probe gave no result (exit {rc}): {tail}")
    return result


def probe_argv(kind: str, *args: str) -> List[str]:
    return [sys.executable, "-m", "hpcc_node.health.host", kind, *args]


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 3 and argv[0] == "mount":
        result = probe_mount(argv[1], argv[2])
    elif len(argv) == 3 and argv[0] == "disk":
        result = probe_disk(argv[1], float(argv[2]))
    else:
        print("usage: python -m hpcc_node.health.host mount PATH HOST | disk PATH MIN_FREE_GIB", file=sys.stderr)
        return 2
    print(json.dumps(asdict(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
