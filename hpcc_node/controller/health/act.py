"""Carrying out the health rules' actions (health/decide.py): requeue a job, reboot a node, hold the spares. A
mixin of act.Executor, which records each action in the ledger before and after it runs.

Slurm commands (scontrol(1), sbatch(1), scancel(1)):
- `scontrol requeue <job>`: the job goes back to pending and keeps its id; SLURM_RESTART_COUNT rises.
- `scontrol update JobId=<job> StartTime=now`: Slurm holds a requeued batch job until its EligibleTime, minutes
  later (Reason=BeginTime); one requeued off a node hpcc took out may start at once, on a spare.
- `scontrol reboot ASAP nextstate=DOWN reason=<r> <node>`: reboots the node through slurm.conf's RebootProgram
  once it is idle; it comes back DOWN with the reason, and the controller resumes it when its agent's next verdict
  is healthy (assess.py). A reboot resets every GPU, which covers the catalog's RESET_GPU too.
- `scontrol create|update|delete reservation`: the spares' reservation, `Flags=MAINT,IGNORE_JOBS`, for root only,
  so no user's job lands on a spare while it is held; `scancel --user=root --name=hpcc-deep-check <job>` a released
  spare's deep check: with job ids and filters, scancel signals only the jobs that match both (scancel(1)), so
  Slurm itself confirms the job is the controller's own.
A requeue or a start-now names a job whose owner and name decide() read from Slurm's record (slurm_records.py);
Slurm's jobs are read again just before, and the command runs only if that job still has that owner and name.
- `sbatch --reservation=<r> --nodelist=<node> --exclusive`: a held spare's deep check (sbatch(1)), the node's
  /usr/local/sbin/hpcc-deep as its batch script (templates/steps/health.sh.j2 writes it); its output goes to the
  node's /var/log/hpcc-deep-check.log. It reports through the node's verdict, like every other check.
Without Slurm the reboot is EC2's RebootInstances.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

from hpcc_node.health.checks import DCGM_TIMEOUT_S
from hpcc_node.health.verdict import clean_reason

from ..model import Action, SlurmJob
from ..slurm_records import DEEP_CHECK_JOB, DEEP_CHECK_USER

DEEP_CHECK_PROGRAM = "/usr/local/sbin/hpcc-deep"
DEEP_CHECK_LOG = "/var/log/hpcc-deep-check.log"
# A bound for a check that hangs past its own deadlines: DCGM's longest level and ten minutes for the rest.
DEEP_CHECK_MINUTES = max(DCGM_TIMEOUT_S.values()) // 60 + 10


class NotConfirmed(RuntimeError):
    """The job an action names is not (or no longer) the one decide() saw: nothing is done to it."""


class HealthActs:
    ec2: Any
    slurm: Optional[Callable[[List[str]], Any]]
    jobs_now: Optional[Callable[[], Sequence[SlurmJob]]] = None

    def _scontrol(self, *args: str) -> None:
        if self.slurm is not None:
            self.slurm(["scontrol", *args])

    def _confirmed(self, a: Action) -> str:
        """The job id of the action, once Slurm's jobs, read again, hold it with the owner and name decide() saw."""
        job, user, name = str(a.data["job"]), a.data.get("user"), a.data.get("name")
        if user is None or name is None or self.jobs_now is None:
            raise NotConfirmed(f"job {job}: its owner and name were not read from Slurm; not touched")
        found = next((j for j in self.jobs_now() if j.job_id == job), None)
        if found is None or (found.user, found.name) != (user, name):
            now = f"{found.user}, {found.name!r}" if found else "gone"
            raise NotConfirmed(f"job {job} is not {user}'s {name!r} any more ({now}); not touched")
        return job

    def _requeue(self, a: Action) -> str:
        self._scontrol("requeue", self._confirmed(a))
        return f"job {a.data['job']} requeued (restart {a.data.get('restarts', 0) + 1})"

    def _start_now(self, a: Action) -> str:
        self._scontrol("update", f"JobId={self._confirmed(a)}", "StartTime=now")
        return f"job {a.data['job']} eligible now"

    def _reboot(self, a: Action) -> str:
        if a.data.get("via") == "ec2" or self.slurm is None:
            self.ec2.reboot_instances(InstanceIds=[a.instance_id])
            return f"EC2 reboot of {a.instance_id}"
        self._scontrol("reboot", "ASAP", "nextstate=DOWN", f"reason={clean_reason(a.data['reason'])}", a.node)
        return f"reboot of {a.node} once idle"

    def _deep_check(self, a: Action) -> str:
        if self.slurm is None:
            return "no Slurm: no deep check"
        out = self.slurm(
            [
                "sbatch",
                "--parsable",
                f"--job-name={DEEP_CHECK_JOB}",
                f"--reservation={a.data['reservation']}",
                f"--partition={a.data['partition']}",
                f"--nodelist={a.node}",
                "--nodes=1",
                "--exclusive",
                f"--time={DEEP_CHECK_MINUTES}",
                f"--output={DEEP_CHECK_LOG}",
                "--open-mode=append",
                "--no-requeue",
                DEEP_CHECK_PROGRAM,
            ]
        )
        job = str(getattr(out, "stdout", "") or "").strip().split(";")[0]
        return f"deep check of {a.node}: job {job}" if job else f"deep check of {a.node} submitted"

    def _spares(self, a: Action) -> str:
        name, nodes = a.data["reservation"], a.data["nodes"]
        if a.data.get("cancel") and self.slurm is not None:  # Slurm cancels only the ids that match both filters
            self.slurm(["scancel", f"--user={DEEP_CHECK_USER}", f"--name={DEEP_CHECK_JOB}", *a.data["cancel"]])
        if not nodes:
            if a.data.get("exists"):
                self._scontrol("delete", f"ReservationName={name}")
            return f"{name}: no spare held"
        if a.data.get("exists"):
            self._scontrol("update", f"ReservationName={name}", f"Nodes={','.join(nodes)}")
        else:
            self._scontrol(
                "create",
                "reservation",
                f"ReservationName={name}",
                "StartTime=now",
                "Duration=infinite",
                "Users=root",
                "Flags=MAINT,IGNORE_JOBS",
                f"Nodes={','.join(nodes)}",
            )
        return f"{name}: {', '.join(nodes)}"
