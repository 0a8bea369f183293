"""The controller's process: one reconcile every Timers.loop_seconds, the groups re-read each loop (as clustermgtd
re-reads its config), a loop that fails logged and retried by the next, and a head without the lease standing by.
What wires it to a real head (clients, the table and bucket names, the Slurm commands) is the bundle's."""

from __future__ import annotations

import logging
import subprocess
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from . import observe as obs
from .observe_health import scontrol_read
from .act import LOG, Executor, reconcile_once
from .decide import decide
from .ledger import LeaseLost, Ledger
from .model import Group, Report
from .timers import DEFAULT, Timers


def slurm_command(argv: List[str]) -> subprocess.CompletedProcess:
    """Runs one Slurm command (scontrol, sbatch, scancel); a failure is an exception (act logs it; the next loop
    tries again)."""
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60)


def scontrol_nodes() -> str:
    return subprocess.run(["scontrol", "show", "nodes", "--oneliner"], check=True, capture_output=True, text=True,
                          timeout=60).stdout


def build_step(ec2: Any, ddb: Any, s3: Any, cluster: str, table: str, bucket: str,
               groups: Callable[[], Sequence[Group]], owner: str, clock: Callable[[], float],
               slurm_run: Optional[Callable[[List[str]], Any]] = None,
               slurm_read: Optional[Callable[[], str]] = None,
               bundle: Callable[[], Mapping[str, Any]] = dict, head: Optional[Mapping[str, Any]] = None,
               timers: Timers = DEFAULT,
               log: logging.Logger = LOG) -> Callable[[], Mapping[str, Any]]:
    """One loop of observe -> decide -> act, as a function of nothing (its clients and state are captured)."""
    ledger = Ledger(ddb, table, owner, clock, timers)
    cache: Dict[str, Tuple[str, Optional[Report]]] = {}

    def step() -> Mapping[str, Any]:
        current = obs.capacity_blocks(ec2, list(groups()))
        executor = Executor(ec2, ledger, s3, bucket, cluster, current, clock, slurm_run, timers, log)
        return reconcile_once(
            lambda: obs.observe(ec2, ledger, cluster, clock, lambda: obs.reports(s3, bucket, cache), slurm_read,
                                bundle(), head, scontrol_read if slurm_read is not None else None),
            lambda snap: decide(snap, current, snap.now, timers), executor, ledger)
    return step


def forever(step: Callable[[], Mapping[str, Any]], clock: Callable[[], float], sleep: Callable[[float], None],
            stop: Callable[[], bool] = lambda: False, timers: Timers = DEFAULT, log: logging.Logger = LOG) -> int:
    """Loops until `stop()`; returns how many loops ran."""
    loops = 0
    while not stop():
        started = clock()
        loops += 1
        try:
            result = step()
            if not result["lease"]:
                log.info("standing by: %s holds the lease until %.0f", result["holder"], result["until"])
        except LeaseLost as e:
            log.warning("lease lost mid-loop (%s): standing by", e)
        except Exception:  # the next loop reads everything again
            log.exception("loop %d failed; retrying in the next loop", loops)
        sleep(max(0.0, timers.loop_seconds - (clock() - started)))
    return loops
