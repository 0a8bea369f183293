"""The bootstrap's steps, in order: the one list the template's main() runs (rendered by infra/render/userdata.py),
`hpcc status` shows (infra/ops/status/cluster.py) and the pacing counts (at most one status write per
step, infra/render/pacing.py). Each step is a bash function of templates/steps/<partial>.sh.j2."""

from __future__ import annotations

from typing import NamedTuple

# A step's start is reported (a status PutObject, one AWS CLI run) only when the node's last report is this old or
# older, and a step still unreported is reported from its waits (poll_pause) once it is: a boot of quick steps costs a
# few writes, not one a step. A step that waits shows within about this long; one that works without a wait (a
# package install) may show the previous step's name until it ends. A failure and ready always report, naming it.
STATUS_EVERY_SECONDS = 10


class Step(NamedTuple):
    name: str  # the status parameter's phase/step and the log's [label]; HPCC_SKIP_STEPS names it
    function: str  # the bash function that runs it


STEPS: tuple[Step, ...] = (
    Step("os", "step_os"),
    Step("imds", "step_imds"),  # before anyone's key is installed (ssh, launch-env): only root reaches IMDS
    Step("lustre", "step_lustre"),
    Step("mount", "step_mount"),
    Step("efa", "step_efa"),
    Step("health", "step_health"),  # after the devices and the mount it checks, before slurmd can take jobs
    Step("ssh", "step_ssh"),
    Step("join", "step_join"),
    Step("launch-env", "step_launch_env"),
    # after the mount (the shared pyxis build) and before slurm: the plugin and, on the head, plugstack.conf in place
    # before slurmctld ships its files and slurmd takes a job (templates/steps/containers.sh.j2)
    Step("containers", "step_containers"),
    Step("slurm", "step_slurm"),  # after launch-env: the head's slurm.conf follows the same membership
    Step("metrics", "step_metrics"),  # the exporters, and the head's Prometheus, before the controller writes targets
    Step("sync", "step_sync"),
)
STEP_NAMES: tuple[str, ...] = tuple(step.name for step in STEPS)
