"""dcgm-exporter's job map on a GPU node, and the facts its bootstrap step asks of the contract.

The map (dcgm-exporter's README, "How to include HPC jobs in metric labels": https://github.com/NVIDIA/dcgm-exporter):
one file per GPU in hpcc_contract.dcgm.JOB_MAP_DIR, named by its index, holding the ids of the jobs on it, one a
line; the exporter gives that GPU's series one copy per job, labelled hpc_job, and leaves an unmapped GPU's
unlabelled. Slurm's Prolog writes it and its Epilog takes the job out again (hpcc_node/health/__main__.py): both see
the job's GPUs in SLURM_JOB_GPUS, "The GPU IDs of GPUs in the job allocation (if any). Available in the Prolog and
Epilog" (https://slurm.schedmd.com/prolog_epilog.html; the Epilog from Slurm 21.08). Those are Slurm's GRES indices,
which are the NVML indices DCGM's `gpu` label uses when gres.conf lists the GPUs in NVML order (AutoDetect=nvml, or
File=/dev/nvidia[0-N] where the minors follow the bus order, as on EC2). A GPU shared by jobs keeps a line for each.
A mapping error never refuses a job: it is logged, and the job's series go unlabelled.

    python3 -m hpcc_node.dcgm exporter-version DCGM_VERSION   the paired exporter release, else exit 1 saying why
    python3 -m hpcc_node.dcgm counters                        hpcc's counters file (dcgm-exporter -f)
    python3 -m hpcc_node.dcgm applied DCGM_VERSION            the record of what the step applied (applied_record)
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import sys
import tempfile
from typing import Callable, Dict, List, Mapping, Optional

from hpcc_contract import dcgm

MAX_GPUS = 64  # more GPU indices than any EC2 instance has: a longer list is no GPU list
_ITEM = re.compile(r"^([0-9]{1,3})(?:-([0-9]{1,3}))?$")
_GPU_FILE = re.compile(r"^[0-9]+$")  # the exporter's own (^\d+(\.\d+)?$) less MIG instances: hpcc maps none
LOCK = ".lock"  # a name the exporter skips
RECORD_FIELDS = ("dcgm", "exporter", "counters")
_RECORD_VALUE = re.compile(r"^[0-9A-Za-z.+~:-]{1,64}$")  # a dpkg version (deb-version(7)), a release, a sha256
NONE = "none"


def applied_record(dcgm_version: str) -> str:
    """What the metrics step applies on a GPU node under this bundle, one line: the DCGM it found (dpkg's version,
    `none` for none or anything that is no version), the exporter release this bundle pairs with it (`none`: no
    exporter) and the sha256 of the counters file. The step writes it to dcgm.APPLIED_PATH after it applied it
    (`python3 -m hpcc_node.dcgm applied DCGM_VERSION`); the agent asks the same of its own bundle, for the DCGM the
    record names (hpcc_node/agent_dcgm.py dcgm_due)."""
    found = dcgm_version.strip()
    found = found if _RECORD_VALUE.match(found) else NONE
    counters = hashlib.sha256(dcgm.COUNTERS_CSV.encode()).hexdigest()
    return f"dcgm={found} exporter={dcgm.exporter_for(found) or NONE} counters={counters}"


def parse_record(text: str) -> Optional[Dict[str, str]]:
    """The fields of an applied_record line; None when it is no such line."""
    fields = dict(item.partition("=")[::2] for item in text.split())
    if sorted(fields) != sorted(RECORD_FIELDS) or len(text.split()) != len(RECORD_FIELDS):
        return None
    if not all(_RECORD_VALUE.match(value) for value in fields.values()):
        return None
    return fields


def gpu_indices(value: str) -> List[int]:
    """The GPU indices of SLURM_JOB_GPUS (`0,1,4-7`), in order without repeats; ValueError when it is no such list."""
    out: List[int] = []
    for item in value.strip().split(","):
        found = _ITEM.match(item.strip())
        if not found:
            raise ValueError(f"SLURM_JOB_GPUS item {item[:20]!r} is no GPU index or range")
        low = int(found.group(1))
        high = int(found.group(2)) if found.group(2) is not None else low
        if high < low or high >= MAX_GPUS:
            raise ValueError(f"SLURM_JOB_GPUS item {item!r} is no range of GPU indices below {MAX_GPUS}")
        out += [i for i in range(low, high + 1) if i not in out]
    return out


def _lines(path: str) -> List[str]:
    try:
        with open(path) as f:
            return [line.strip() for line in f if line.strip()]
    except FileNotFoundError:
        return []


def _write(path: str, lines: List[str]) -> None:
    """The file whole or not at all: the exporter reads the directory at every collection."""
    if not lines:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write("".join(f"{line}\n" for line in lines))
        os.chmod(tmp, 0o644)
        os.rename(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


class _Locked:
    """The directory's lock: two Prologs (or a Prolog and an Epilog) of jobs sharing a GPU keep each other's line."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, LOCK)

    def __enter__(self) -> _Locked:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def _job(job: str) -> str:
    if not job.isdigit() or len(job) > 20:
        raise ValueError(f"SLURM_JOB_ID {job[:20]!r} is no job id")
    return job


def map_job(directory: str, job: str, gpus: List[int]) -> None:
    """Add `job` to each of its GPUs' files (a line once, however often the Prolog runs)."""
    job = _job(job)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    with _Locked(directory):
        for index in gpus:
            path = os.path.join(directory, str(index))
            lines = _lines(path)
            if job not in lines:
                _write(path, lines + [job])


def unmap_job(directory: str, job: str) -> None:
    """Take `job` out of every GPU's file (whatever the Epilog's SLURM_JOB_GPUS says); a file left empty goes."""
    job = _job(job)
    if not os.path.isdir(directory):
        return
    with _Locked(directory):
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            if _GPU_FILE.match(name) and os.path.isfile(path):
                lines = _lines(path)
                if job in lines:
                    _write(path, [line for line in lines if line != job])


def _directory(env: Mapping[str, str]) -> str:
    return env.get("HPCC_DCGM_JOB_MAP_DIR") or dcgm.JOB_MAP_DIR  # tests name another


def job_started(env: Mapping[str, str], log: Callable[[str], None]) -> None:
    """The Prolog's part: never raises (a mapping error costs the job its labels, not its start)."""
    gpus = env.get("SLURM_JOB_GPUS", "").strip()
    if not gpus:
        return
    try:
        map_job(_directory(env), env.get("SLURM_JOB_ID", ""), gpu_indices(gpus))
    except (OSError, ValueError) as e:
        log(f"dcgm job map: job {env.get('SLURM_JOB_ID', '')[:20]!r} not mapped: {e}")


def job_ended(env: Mapping[str, str], log: Callable[[str], None]) -> None:
    """The Epilog's part: never raises."""
    try:
        unmap_job(_directory(env), env.get("SLURM_JOB_ID", ""))
    except (OSError, ValueError) as e:
        log(f"dcgm job map: job {env.get('SLURM_JOB_ID', '')[:20]!r} not unmapped: {e}")


def main(argv: List[str]) -> int:
    if argv[:1] == ["counters"] and len(argv) == 1:
        sys.stdout.write(dcgm.COUNTERS_CSV)
        return 0
    if argv[:1] == ["applied"] and len(argv) == 2:
        print(applied_record(argv[1]))
        return 0
    if argv[:1] == ["exporter-version"] and len(argv) == 2:
        found = dcgm.exporter_for(argv[1])
        if found is None:
            paired = ", ".join(f"{d} -> {e}" for d, e in dcgm.PAIRED.items())
            print(
                f"DCGM {argv[1][:40]!r} has no dcgm-exporter hpcc verified (paired: {paired}): no GPU metrics on "
                f"this node; health checks unaffected (README, {dcgm.README_SECTION!r})"
            )
            return 1
        print(found)
        return 0
    usage = "usage: python3 -m hpcc_node.dcgm {counters | exporter-version DCGM_VERSION | applied DCGM_VERSION}"
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
