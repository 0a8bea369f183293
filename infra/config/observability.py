"""The stack file's `observability:` section (issue 34): Prometheus on the head, listening on the head's own address
and reachable from the cluster's nodes only (their security group; nothing outside the VPC reaches it), scraping
every node's exporters (hpcc_contract/metrics.py: node_exporter, dcgm-exporter on GPU nodes, hpcc's own series).

- `enabled`: default on with `scheduler: slurm`, off otherwise (a cluster made before this section keeps running
  what it ran; Slurm clusters are the training clusters the issue asks metrics for). `true` without Slurm is
  allowed: the exporters and Prometheus need no scheduler, and hpcc's own series (health checks, agent, controller)
  are written without one; only the Slurm queue's series are missing. `false` turns it off everywhere.
- `scrapeInterval` (default 30s) and `retention` (default 15d, Prometheus's own): Prometheus durations, their syntax
  checked here, their bounds by the config rules (infra/config/validators/metrics.py).
- `retentionSize` (default 40% of the head's root volume, e.g. 80GB of 200): the most Prometheus keeps on disk
  (--storage.tsdb.retention.size; units B to EB, powers of 2), its oldest blocks deleted first, so a big cluster's
  series never fill the head's disk whatever `retention` says; over 80% of the volume is refused.
- `remoteWrite.workspaceArn`: an Amazon Managed Service for Prometheus workspace the head's Prometheus also writes
  to, signed with the head's role (SigV4), so one of the cluster's account (another account's would need a role
  assumed there); the head's role gets `aps:RemoteWrite` on that workspace alone, and only while metrics are on.

The nodes get all of it through the bundle (infra/render/bundle.py metrics_files: the head's Prometheus configuration;
infra/render/roles.py: the role scripts' metrics step and its flags), so a change is a new bundle the nodes upgrade to
in place."""

from __future__ import annotations

from pydantic import field_validator

from infra.config.nodes import ConfigModel
from infra.config.validators.metrics import (
    METRICS_RETENTION_DEFAULT,
    METRICS_SCRAPE_INTERVAL_DEFAULT,
    duration_problem,
    size_problem,
    workspace_arn_problem,
)


class RemoteWrite(ConfigModel):
    workspace_arn: str

    @field_validator("workspace_arn")
    @classmethod
    def _arn(cls, v: str) -> str:
        problem = workspace_arn_problem(v)
        if problem:
            raise ValueError(problem)
        return v


class Observability(ConfigModel):
    enabled: bool | None = None  # None: on with Slurm (ClusterConfig.metrics_on)
    scrape_interval: str = METRICS_SCRAPE_INTERVAL_DEFAULT
    retention: str = METRICS_RETENTION_DEFAULT
    retention_size: str | None = None  # None: 40% of the head's root volume (validators/metrics.py)
    remote_write: RemoteWrite | None = None

    @field_validator("retention_size", mode="before")
    @classmethod
    def _size(cls, v: object) -> object:
        text = str(v) if isinstance(v, int) and not isinstance(v, bool) else v
        if isinstance(text, str):
            problem = size_problem(text)
            if problem:
                raise ValueError(problem)
        return text

    @field_validator("scrape_interval", "retention", mode="before")
    @classmethod
    def _number(cls, v: object) -> object:
        """YAML reads `30` as a number: say which unit it lacks, not that it is not text."""
        if isinstance(v, int) and not isinstance(v, bool):
            raise ValueError(duration_problem(str(v)))
        return v

    @field_validator("scrape_interval", "retention")
    @classmethod
    def _duration(cls, v: str) -> str:
        problem = duration_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    def on(self, scheduler: str) -> bool:
        return self.enabled if self.enabled is not None else scheduler == "slurm"
