"""A GPU compute node's agent keeps its dcgm-exporter on the answer of the bundle it runs (issue 34, day 2). The
metrics step installs the exporter release hpcc_contract/dcgm.py PAIRED names for the node's DCGM, and hpcc's
counters file, at boot only; a bundle that pairs the node's DCGM with another release (or with one where the last
paired none), or brings another counters file, reaches the running node here, no replacement.

The step records what it applied (hpcc_contract/dcgm.py APPLIED_PATH: the DCGM it found, the exporter release and
the counters file's sha256, hpcc_node/dcgm.py applied_record). Each tick the agent asks its own bundle the same for
the recorded DCGM (dcgm_due); when the answers differ, or a node that booted before the record has none, it runs
the role script's `apply-dcgm` (templates/steps/metrics.sh.j2: the step's dcgm part alone, which installs, rewrites
and restarts only what changed, and records again). Never on the head, a CPU node (health.env's GPUS) or with
observability off (the bundle has no metrics/). A failed apply is logged with its output and tried again after
RETRY_S, not every tick; the agent goes on either way."""

from __future__ import annotations

import os
from typing import Optional

from hpcc_contract import dcgm as contract
from hpcc_node.agent_metrics import METRICS_DIR, RETRY_S
from hpcc_node.dcgm import applied_record, parse_record
from hpcc_node.health import service as health


def dcgm_due(role: str, gpus: int, observability: bool, recorded: Optional[str]) -> Optional[str]:
    """Why the node should run `apply-dcgm` under this bundle (the reason the agent logs), or None. `recorded`: the
    node's record of what the metrics step applied (None: it has none)."""
    if role != "compute" or gpus <= 0 or not observability:
        return None
    if recorded is None:
        return "no record of what the metrics step applied (the node booted on a bundle that kept none)"
    had = parse_record(recorded)
    if had is None:
        return f"its record {recorded.strip()[:80]!r} is unreadable"
    want = parse_record(applied_record(had["dcgm"]))
    assert want is not None  # applied_record writes what parse_record reads (tests/node/test_agent_dcgm.py)
    if want["exporter"] != had["exporter"]:
        return (
            f"this bundle pairs DCGM {had['dcgm']} with dcgm-exporter {want['exporter']}, "
            f"the node applied {had['exporter']}"
        )
    if want["counters"] != had["counters"]:
        return f"this bundle's counters file is another (sha256 {want['counters'][:12]}, was {had['counters'][:12]})"
    return None


def node_gpus(path: str, host: str) -> int:
    """The GPUs the node's health step found it has (health.env's GPUS); 0 when the file is missing or malformed."""
    try:
        return health.load_facts(host, path)[0].gpus
    except (health.FactsError, OSError):
        return 0


def read_record(path: str) -> Optional[str]:
    """The record's text; None when there is none to read (a record that cannot be read is applied again)."""
    try:
        with open(path) as f:
            return f.read()
    except (OSError, ValueError):
        return None


class DcgmFollowing:
    """Agent's dcgm-exporter method. What it uses of the agent: its config `c`, `node`, `run`, `clock`, `log`,
    `running`, `current_dir()`, `run_role()` (this node's group's script)."""

    dcgm_retry_at: Optional[float] = None
    dcgm_gpus: Optional[int] = None  # health.env's GPUS, read once: the health step writes it at boot

    def follow_dcgm(self) -> None:
        if self.c.role != "compute":
            return
        if self.dcgm_gpus is None:
            self.dcgm_gpus = node_gpus(self.c.path(os.path.basename(health.HEALTH_ENV)), self.node.node)
        observability = os.path.isdir(os.path.join(self.current_dir(), METRICS_DIR))
        record_path = self.c.path(os.path.basename(contract.APPLIED_PATH))
        why = dcgm_due(self.c.role, self.dcgm_gpus, observability, read_record(record_path))
        if why is None:
            return
        now = self.clock()
        if self.dcgm_retry_at is not None and now < self.dcgm_retry_at:
            return
        bundle = self.running[:12]
        self.log(f"apply-dcgm of bundle {bundle}: {why}")
        rc, said = self.run_role("apply-dcgm")
        if rc == 0:
            still = dcgm_due(self.c.role, self.dcgm_gpus, observability, read_record(record_path))
            if still is None:
                self.dcgm_retry_at = None
                applied = (read_record(record_path) or "").strip()[:200]
                self.log(f"dcgm-exporter on bundle {bundle}'s answer (apply-dcgm): {applied}")
                return
            said = f"it ran, but still {still}"
        self.dcgm_retry_at = now + RETRY_S
        self.log(f"apply-dcgm of bundle {bundle} failed (exit {rc}): {said or 'no output'}; again in {RETRY_S:.0f} s")
