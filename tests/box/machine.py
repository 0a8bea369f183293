"""The machine side of the box: one box at a time (a lock), and removing whatever a box leaves behind."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

PREFIX = "hpccbox"  # network namespaces hpccbox-0.. (0 is the head node)
BRIDGE = "hpccbr0"
VETH = "hbv"  # host ends of the nodes' veth pairs: hbv0..
NETWORK = "10.200.0.0/16"  # the bridge's network: the box's VPC (tests/box/cloud.py)
GATEWAY = "10.200.0.1"  # the bridge; the moto server listens here
MOTO_PORT = 5123
TMP_PREFIX = "hpcc-box-"
LOCK = Path("/run/hpcc-box.lock")
MOUNTPOINTS_MADE = Path("/run/hpcc-box.mountpoints")  # host directories a box created as mount points
DEVICES_MADE = Path("/run/hpcc-box.devices")  # the GPU device nodes a box created (make_gpu_devices)
NVIDIA_MAJOR = 195  # the NVIDIA driver's character devices, /dev/nvidia<minor> (Documentation/admin-guide/devices.txt)


def make_gpu_devices(count: int) -> None:
    """/dev/nvidia0 .. /dev/nvidia<count-1> on a machine without NVIDIA's driver (its /proc/driver/nvidia absent), for
    slurmd's gres.conf `File=` (it stats them; nothing opens them: without the driver an open fails, ENXIO). The host's
    /dev is every node's. Removed by cleanup_leftovers."""
    if Path("/proc/driver/nvidia").exists():
        raise RuntimeError("this machine has NVIDIA's driver: the box will not make GPU device nodes beside it")
    made = set(DEVICES_MADE.read_text().split()) if DEVICES_MADE.exists() else set()
    for minor in range(count):
        path = Path(f"/dev/nvidia{minor}")
        if not path.exists():
            sh("mknod", "-m", "0666", str(path), "c", str(NVIDIA_MAJOR), str(minor))
            made.add(str(path))
    DEVICES_MADE.write_text("".join(f"{p}\n" for p in sorted(made)))


def sh(*cmd: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True, **kw)


class Lock:
    """One box per machine: the lock is held from start() to stop() and dies with its process."""

    def __init__(self):
        self.fd: int | None = None

    def acquire(self, timeout: float = 900) -> None:
        fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.time() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.time() > deadline:
                    os.close(fd)
                    raise RuntimeError(f"another box holds {LOCK} (pid {LOCK.read_text().strip()})") from None
                time.sleep(1)
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def _links(prefix: str) -> list[str]:
    out = []
    for line in sh("ip", "-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if name.startswith(prefix):
                out.append(name)
    return out


def box_namespaces() -> list[str]:
    return [
        line.split()[0]
        for line in sh("ip", "netns", "list", check=False).stdout.splitlines()
        if line.split() and line.split()[0].startswith(PREFIX)
    ]


def cleanup_leftovers() -> None:
    """Remove everything a box leaves: processes in its namespaces (sshd, bootstraps, jobs, the mount
    namespace holders), the namespaces, veth pairs and bridge, temp dirs, mount points it made.
    Call only while holding the lock, so what is found belongs to no live box."""
    for ns in box_namespaces():
        for pid in sh("ip", "netns", "pids", ns, check=False).stdout.split():
            sh("kill", "-9", pid, check=False)
        sh("ip", "netns", "del", ns, check=False)
    for name in _links(VETH):  # a namespace dies asynchronously; its veth peers would block the next names
        sh("ip", "link", "del", name, check=False)
    sh("ip", "link", "del", BRIDGE, check=False)
    for stale in Path(tempfile.gettempdir()).glob(f"{TMP_PREFIX}*"):
        shutil.rmtree(stale, ignore_errors=True)
    made = set(MOUNTPOINTS_MADE.read_text().split()) if MOUNTPOINTS_MADE.exists() else set()
    made.add("/etc/hpcc")  # made by boxes older than the record; exists only on an hpcc node, never empty there
    for path in made:
        try:
            Path(path).rmdir()  # only if still empty
        except OSError:
            pass
    MOUNTPOINTS_MADE.unlink(missing_ok=True)
    for device in DEVICES_MADE.read_text().split() if DEVICES_MADE.exists() else []:
        if not Path("/proc/driver/nvidia").exists():
            Path(device).unlink(missing_ok=True)
    DEVICES_MADE.unlink(missing_ok=True)


def leftovers() -> list[str]:
    """What of a box is still on this machine (empty after stop())."""
    found = [f"netns {ns}" for ns in box_namespaces()] + [f"link {n}" for n in _links(VETH) + _links(BRIDGE)]
    found += [f"dir {p}" for p in Path(tempfile.gettempdir()).glob(f"{TMP_PREFIX}*")]
    found += [f"listener {GATEWAY}:{MOTO_PORT}"] if _listening(GATEWAY, MOTO_PORT) else []
    made = MOUNTPOINTS_MADE.read_text().split() if MOUNTPOINTS_MADE.exists() else []
    found += [f"mount point {p}" for p in {*made, "/etc/hpcc"} if Path(p).is_dir() and not any(Path(p).iterdir())]
    devices = DEVICES_MADE.read_text().split() if DEVICES_MADE.exists() else []
    found += [f"device {d}" for d in devices if Path(d).exists()]
    return found


def _listening(ip: str, port: int) -> bool:
    """Asks the kernel (ss), sends nothing: with the bridge gone, a connect would leave the machine."""
    return f"{ip}:{port}" in sh("ss", "-Hltn", check=False).stdout
