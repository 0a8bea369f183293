"""The node agent's status (hpcc_node/agent.py's Agent inherits it): its own status object in the state bucket,
written when what it says changes and again each heartbeat, with the bundle's, Slurm's and the health checks' fields
the controller and `hpcc status` read (hpcc_node/status.py)."""

from __future__ import annotations

import os
from typing import Any, Dict, List

from hpcc_contract.metrics import TEXTFILE_AGENT
from hpcc_contract.names import STATUS_HOSTS_VERSION_META
from hpcc_node import state, status
from hpcc_node.aws import AwsError
from hpcc_node.health import service as health
from hpcc_node.metrics import Sample, render, write_textfile


class StatusReporting:
    """Agent's status methods. What they use of the agent: its config `c`, `s3`, `clock`, `node`, `message`,
    `running`, `slurm_states`, `rollout_note`, `record`, `refused_field()` and the written-status and written-series
    fields and lock set in Agent.__init__."""

    def extra(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"drifted": self.record.drifted}
        refused = self.refused_field()
        if refused:
            out.update({"class": "bundle", "refused": refused})
        if self.rollout_note:
            out["rollout"] = f"halted: {self.rollout_note}"
        if self.slurm_states is not None:
            out["slurm"] = self.slurm_states
        if self.newer:
            out["newer"] = [self.newer[k] for k in sorted(self.newer)]
        out.update(health.status_fields(os.path.join(self.c.run, health.VERDICT_NAME)))  # the health thread's
        return out

    def report(self) -> None:
        extra = self.extra()
        key = (
            self.node.node,
            self.node.ip,
            self.node.instance_id,
            self.message,
            self.running,
            repr(sorted(extra.items())),
        )
        if key == self.written:  # unchanged: the same bytes again each heartbeat (same ETag, a new LastModified)
            if self.written_version != self.node.hosts_version:  # a membership applied: the metadata says so now
                self.put_status(self.written_body)
            self.beat()
            return
        # No hostsVersion in the body: an apply at every node must not change 4,096 bodies the controller then reads
        identity = {"node": self.node.node, "ip": self.node.ip, "instanceId": self.node.instance_id}
        tail = (state.read_text(self.c.log) or "").splitlines()
        body = status.status(
            identity, "ready", True, self.message, bundle=self.running, log_tail=tail, now=self.clock(), extra=extra
        )
        self.put_status(body.encode())
        self.written = key

    def report_series(self) -> None:
        """The agent's series (TEXTFILE_AGENT), written when the bundle it runs or the membership generation it
        applied changed; a failed write is logged and tried again next tick."""
        now = (self.running, self.node.hosts_version)
        if now == self.series_written or not self.c.metrics:
            return
        try:
            write_textfile(self.c.metrics, TEXTFILE_AGENT, render(agent_samples(*now)))
        except OSError as e:
            self.log(f"agent series not written to {self.c.metrics}: {e}; next tick")
            return
        self.series_written = now

    def beat(self) -> None:
        """The heartbeat thread's: the last status again once it is heartbeat_seconds old, whatever the tick is
        doing, so a tick that takes minutes (an apply-membership waiting on a restarting slurmctld) is not taken
        for a dead agent (the controller's Timers.heartbeat_timeout_seconds)."""
        with self.status_lock:
            if self.written_body and self.clock() - self.written_at >= self.c.heartbeat_seconds:
                self.put_status(self.written_body)

    def put_status(self, body: bytes) -> None:
        """The body, with the membership generation applied as the object's metadata: S3's ETag is the body's
        MD5 (S3 User Guide, "Checking object integrity"), so new metadata over the same bytes is no change to the
        controller (observe.reports reads an object again only when its ETag changed)."""
        with self.status_lock:
            version = self.node.hosts_version
            try:
                self.s3.put_object(
                    Bucket=self.c.state_bucket,
                    Key=self.c.status_key,
                    Body=body,
                    ContentType="application/json",
                    Metadata={STATUS_HOSTS_VERSION_META: str(version)},
                )
            except Exception as e:  # noqa: BLE001 - written again next tick (self.written unchanged)
                raise AwsError(f"status s3://{self.c.state_bucket}/{self.c.status_key}: {e}") from None
            self.written_body, self.written_at, self.written_version = body, self.clock(), version


# A bundle is named by its sha256 alone (no counter: infra/render/bundle.py builds it from its content), so its
# "generation" is the sha256's first 52 bits: a float64 holds them exactly, two bundles differ, and
# count_values() over the nodes shows a rollout's progress. None running (a node not yet switched to a bundle): 0.
BUNDLE_ID_HEX = 13


def bundle_number(sha256: str) -> int:
    try:
        return int(sha256[:BUNDLE_ID_HEX], 16)
    except ValueError:
        return 0


def agent_samples(bundle_sha256: str, generation: int) -> List[Sample]:
    return [
        Sample("hpcc_bundle_generation", {}, bundle_number(bundle_sha256)),
        Sample("hpcc_membership_generation", {}, generation),
    ]
