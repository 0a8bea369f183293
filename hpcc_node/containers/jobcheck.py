"""The image service's job check (issue 35): does the process that connected (its pid and uid as the kernel gave them,
SO_PEERCRED) run the Slurm job its request names, on this node? Read from the process's own cgroup, which only Slurm
(root's slurmstepd) places it in, never from anything the caller says about itself. Anything else is refused: no
/proc entry, no Slurm cgroup, another job, a job of another uid, an unreadable or odd file.

Slurm's layouts, as /proc/<pid>/cgroup shows them (cgroups(7): `hierarchy-ID:controller-list:cgroup-path` a line):
  - cgroup v1 (Slurm's cgroup/v1 plugin, https://slurm.schedmd.com/cgroups.html): in each controller Slurm uses,
    `/slurm/uid_<uid>/job_<job>/step_<step>/task_<n>` (`/slurm_<node>/...` where several slurmd share a host). The uid
    in the path is the job's owner's: it must be the caller's.
  - cgroup v2 (https://slurm.schedmd.com/cgroup_v2.html, "Slurm cgroup v2 hierarchy"): one line `0::<path>` with
    `.../slurmstepd.scope/job_<job>/step_<step>/{slurm,user/task_<n>}` (`<node>_slurmstepd.scope` for several
    slurmd): the job's tasks under the step's `user/`, its slurmstepd and what that forks under `slurm/`. pyxis runs
    the importer from slurmstepd (its SPANK callbacks, after setreuid to the job's user: importer.c), so the whole
    job's subtree is accepted; only root moves a process into it (cgroup.procs is root's). The path names no uid; the
    caller's is SO_PEERCRED's, of a process Slurm started for that job.
A job id with an array task or het component (`12_3`, `12+1`) is not what SLURM_JOB_ID holds in a job (the numeric
id, also in the cgroup's name), so it never matches.

Without cgroups (proctrack/linuxproc, as in the box: HPCC_SLURM_CGROUP=0) no process is in a job cgroup. Then Slurm
itself is asked: `scontrol pidinfo PID` (slurmd's proctrack plugin answers which job a local process belongs to,
whatever the plugin: https://slurm.schedmd.com/scontrol.html, "pidinfo"), printed by scontrol as
"Slurm JobId=<id> ends at <time>" (src/scontrol/info_job.c scontrol_pid_info: 22.05 prints the job id, later releases
the step's too, `<id>.<step>`), and the job's owner from `squeue --json --jobs <id>` (`user_id`; squeue has --json
from 21.08, scontrol only from 23.02) must be the caller's uid. Both answers are Slurm's, about a pid the
kernel gave; a cgroup that names another job or uid is refused before Slurm is asked."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Callable, Optional, Sequence

from hpcc_node.containers.service import JobCheck, Peer

_V1 = re.compile(r"/slurm(?:_[A-Za-z0-9._-]+)?/uid_([0-9]{1,10})/job_([0-9]{1,12})(?:/|$)")
_V2 = re.compile(r"/(?:[A-Za-z0-9._-]+_)?slurmstepd\.scope/job_([0-9]{1,12})/step_[A-Za-z0-9_.]{1,40}(?:/|$)")
MAX_CGROUP_FILE = 64 * 1024  # a real one is a few hundred bytes

Reader = Callable[[int], Optional[str]]  # pid -> /proc/<pid>/cgroup's text, None when there is none


Runner = Callable[[Sequence[str]], Optional[str]]  # argv (scontrol or squeue ...) -> stdout, None when it failed
_PIDINFO = re.compile(r"Slurm JobId=([0-9]{1,12})(?:\.[a-z0-9]{1,12})? ends at ")
SCONTROL_TIMEOUT_S = 10


def slurm_lines(cgroup_text: str) -> bool:
    """Whether any line of /proc/<pid>/cgroup's text is a Slurm job's (known or not)."""
    return any("/job_" in line.split(":", 2)[-1] for line in cgroup_text.splitlines())


def pidinfo_job(stdout: str) -> Optional[str]:
    """The job id in `scontrol pidinfo`'s answer, None when it names none."""
    found = _PIDINFO.match(stdout.strip())
    return found.group(1) if found else None


def job_owner(stdout: str, job: str) -> Optional[int]:
    """`user_id` of `job` in `squeue --json --jobs <job>`'s answer; None when it is not there or malformed."""
    try:
        jobs = json.loads(stdout).get("jobs") or []
    except (ValueError, AttributeError):
        return None
    for entry in jobs if isinstance(jobs, list) else []:
        if isinstance(entry, dict) and str(entry.get("job_id")) == job and isinstance(entry.get("user_id"), int):
            return entry["user_id"]
    return None


def slurm_command(argv: Sequence[str]) -> Optional[str]:
    """`scontrol ...` or `squeue ...`: its stdout; None when it fails or outlasts SCONTROL_TIMEOUT_S."""
    if not argv or argv[0] not in ("scontrol", "squeue"):
        raise ValueError(f"not a Slurm query: {list(argv)[:1]}")
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def slurm_says(pid: int, job: str, uid: int, run: Runner = slurm_command) -> bool:
    """Slurm's own answer: `pid` runs in `job` (scontrol pidinfo) and `job` is `uid`'s (squeue --json)."""
    if pid <= 0 or not re.fullmatch(r"[0-9]{1,12}", job):
        return False
    said = run(["scontrol", "pidinfo", str(pid)])
    if said is None or pidinfo_job(said) != job:
        return False
    owner = run(["squeue", "--json", "--jobs", job])
    return owner is not None and job_owner(owner, job) == uid


def in_job(cgroup_text: str, job: str, uid: int) -> bool:
    """Whether /proc/<pid>/cgroup's text puts the process in Slurm's cgroup of `job`, for a caller of `uid`: every
    line that names a Slurm job names this one (a process in two jobs' cgroups is no caller of either), at least one
    does, and a v1 line's uid is `uid`."""
    if not re.fullmatch(r"[0-9]{1,12}", job) or uid < 0 or len(cgroup_text) > MAX_CGROUP_FILE:
        return False
    found = False
    for line in cgroup_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        path = parts[2]
        v1, v2 = _V1.search(path), _V2.search(path)
        if v1:
            if v1.group(2) != job or int(v1.group(1)) != uid:
                return False
            found = True
        elif v2:
            if v2.group(1) != job:
                return False
            found = True
        elif "/job_" in path:  # a Slurm-looking path hpcc does not know: no guess
            return False
    return found


def read_proc_cgroup(pid: int, proc: str = "/proc") -> Optional[str]:
    """/proc/<pid>/cgroup, None when the process is gone or the file unreadable."""
    if pid <= 0:
        return None
    try:
        with open(f"{proc}/{pid}/cgroup", encoding="ascii", errors="replace") as f:
            return f.read(MAX_CGROUP_FILE + 1)
    except OSError:
        return None


def slurm_job_check(read: Reader = read_proc_cgroup, run: Runner = slurm_command) -> JobCheck:
    """The service's JobCheck: the caller's cgroup, read through `read`; where it is in no Slurm cgroup at all (a
    node without cgroups), Slurm's own answer through `run` (both injected: tests give fixtures)."""

    def check(peer: Peer, job: str) -> bool:
        text = read(peer.pid)
        if text is None:
            return False
        if slurm_lines(text):
            return in_job(text, job, peer.uid)
        return slurm_says(peer.pid, job, peer.uid, run)

    return check
