"""What the health rules read from Slurm besides node states: jobs (for requeue and the spares' deep checks) and
reservations (spares), as slurm_records.py reads them (Slurm's own record of each job, whatever its user-set
strings hold; a hostlist no longer than the cluster). Parsing is pure; the reads are injected.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Dict, FrozenSet, Tuple

from .. import slurm_records
from ..model import SlurmJob, Snapshot
from ..slurm_records import Reader, hostnames, local_time  # noqa: F401 - the health rules' names for them

Extras = Tuple[Tuple[SlurmJob, ...], Dict[str, FrozenSet[str]]]


def report_fields(doc: dict) -> dict:
    """A status body's health fields for model.Report (the node agent writes them: hpcc_node/health/service.py)."""
    deep = doc.get("deepChecked", 0)
    return {
        **{k: str(doc.get(k, ""))[:40] for k in ("check", "action", "remedy")},
        "deep_checked": float(deep) if isinstance(deep, (int, float)) and not isinstance(deep, bool) else 0.0,
    }


def reservations(text: str, limit: int = slurm_records.MAX_NODES) -> Dict[str, FrozenSet[str]]:
    """`scontrol show reservation --oneliner`: name -> its nodes (slurm_records.reservations)."""
    return slurm_records.reservations(text, limit)


def extras_reader(reader: Reader, limit: int) -> Callable[[], Extras]:
    """Slurm's jobs and reservations, each hostlist at most `limit` names (the cluster's node count)."""
    return lambda: (reader.jobs(limit), reader.reservations(limit))


def with_slurm_extras(snap: Snapshot, read: Callable[[], Extras]) -> Snapshot:
    """The snapshot with Slurm's jobs and reservations, where the cluster runs Slurm."""
    if snap.slurm is None:
        return snap
    jobs, reservations = read()
    return replace(snap, jobs=jobs, reservations=reservations)
