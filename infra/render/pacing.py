"""How the nodes pace their AWS calls, so a 512-node cluster stays under SSM's default 40 requests/s
(Parameter Store quotas, AWS General Reference "AWS Systems Manager endpoints and quotas": GetParameter(s) and
PutParameter share the default throughput) while membership still converges within 2 minutes.

One pacer per node. Every AWS call a node makes - the bootstrap's and the membership agent's (`hpcc-node sync`)
alike - goes through one pacer file (/run/hpcc-aws.last-call, taken under `flock`): two calls of a node are at
least `api_interval_ms` apart, plus up to a quarter of that again of jitter. The cluster therefore makes at most
nodes / interval calls a second on average over any interval-long window, whatever its nodes are doing
(booting, polling, retrying, syncing, reporting), and the interval is sized to keep that at TARGET_SHARE of
SSM's 40/s: at 513 nodes, ceil(513 x 1000 / 30) = 17,100 ms, so 30 requests/s.

Before a booting node has read the settings it does not know the cluster's size: its first call waits a random
share of the interval of the largest cluster the config allows (first_call_pacing, a constant in the user data),
so a resize never changes the user data and 512 fresh nodes still spread their first calls.

The membership agent (convergence): each tick sleeps `sync_seconds` plus up to a quarter of that, then makes ONE
GetParameters call (hosts and settings together) and, only when something changed, one PutParameter (its
status). `sync_seconds` is at least 1.25 intervals, so in steady state a tick never waits for the pacer and
the agents alone ask at most nodes / sync_seconds requests a second (513 nodes: 22 s, 23.3/s <= 30/s). A change
to the hosts parameter is seen by every node within one tick plus one pacer turn: 1.25 x sync_seconds +
1.25 x interval (513 nodes: 27.5 + 21.4 = 48.9 s), plus the call itself, well within 2 minutes.

What a booting node calls (a small constant; polls for something not there yet repeat at the same pace):
- SSM GetParameters: the hosts and settings together, once (again while its own line is not there yet);
- SSM GetParameter: the FSx parameter once;
- SSM PutParameter: one status write per step (infra/render/steps.py) and a final ready or failed;
- Secrets Manager: the cluster key once, and with Slurm the munge key once (the head node also writes each once).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infra.config.model import Bootstrap
from infra.config.nodes import ComputeNodes
from infra.render.steps import STEPS

SSM_REQUESTS_PER_SECOND = 40  # default Parameter Store throughput, shared by GetParameter(s) and PutParameter
TARGET_SHARE = 0.75  # the nodes' share; the rest is left to the operator's tools (status, hostfile)
SSM_READS = 2  # hosts + settings (one GetParameters), fsx
STATUS_WRITES = len(STEPS) + 1  # one at the start of each step, then ready (or failed instead)
SECRET_CALLS = 4  # SSH and munge keys - head: read (empty), write; compute: read (and wait)
CALLS_PER_NODE = SSM_READS + STATUS_WRITES + SECRET_CALLS
MIN_INTERVAL_MS = 100  # small clusters: no real wait
MIN_POLL_SECONDS = 5  # waits for things that are not AWS calls (TCP 988, SSH of the other nodes)
MIN_SYNC_SECONDS = 10  # the agent's tick on small clusters
JITTER = 1.25  # every wait is its nominal length plus up to a quarter more
CONVERGENCE_TARGET_SECONDS = 120


def _bound(model, field: str, name: str) -> int:
    """A numeric bound the config model declares (pydantic Field(le=...)): the one place it is written."""
    return next(getattr(m, name) for m in model.model_fields[field].metadata if getattr(m, name, None) is not None)


MAX_COMPUTE_NODES = _bound(ComputeNodes, "count", "le")
MAX_TIMEOUT_MINUTES = _bound(Bootstrap, "timeout_minutes", "le")


@dataclass(frozen=True)
class Pacing:
    nodes: int
    api_interval_ms: int  # least time between two AWS calls of one node
    poll_seconds: int  # between two looks at something not there yet, plus up to as much again of jitter
    api_backoff_seconds: int = 2  # first retry delay after a failed call; doubles, at most 60 s
    api_attempts: int = 6

    def cluster_requests_per_second(self) -> float:
        """The most the whole cluster asks of AWS, on average over any window of one interval."""
        return self.nodes * 1000 / self.api_interval_ms

    def pacing_delay_seconds(self) -> float:
        """The most one node waits for its turn over its whole boot: one interval (plus jitter) per call."""
        return CALLS_PER_NODE * self.api_interval_ms * JITTER / 1000


def pacing_for(nodes: int) -> Pacing:
    """nodes: every node of the cluster, head included."""
    budget = SSM_REQUESTS_PER_SECOND * TARGET_SHARE
    interval_ms = max(MIN_INTERVAL_MS, math.ceil(nodes * 1000 / budget))
    return Pacing(
        nodes=nodes, api_interval_ms=interval_ms, poll_seconds=max(MIN_POLL_SECONDS, math.ceil(interval_ms / 1000))
    )


# The first call's spread stays that of the 512-node clusters it was sized for: spread over the 4,096-node cap
# (136 s) every node of every cluster would wait up to 2.8 minutes before its first call. Above 512 nodes the
# first calls of a mass boot exceed SSM's budget for a few seconds and are retried with backoff (api_attempts).
FIRST_CALL_NODES = 512


def first_call_pacing() -> Pacing:
    """The pacing a node uses before it has read the settings: that of a FIRST_CALL_NODES-node cluster."""
    return pacing_for(min(MAX_COMPUTE_NODES, FIRST_CALL_NODES) + 1)


def sync_seconds(pacing: Pacing) -> int:
    """The agent's tick: at least one interval plus its jitter, so a tick's call never waits for the pacer."""
    return max(MIN_SYNC_SECONDS, math.ceil(pacing.api_interval_ms * JITTER / 1000))


def agent_requests_per_second(pacing: Pacing) -> float:
    """What the agents of a settled cluster ask of SSM: one GetParameters per node per tick at most."""
    return pacing.nodes / sync_seconds(pacing)


def convergence_seconds(pacing: Pacing) -> float:
    """The longest a node takes to see a new hosts value (AWS's own answer time aside): one tick with its
    jitter, then at most one pacer turn (the status write of the tick before may have just gone out)."""
    return sync_seconds(pacing) * JITTER + pacing.api_interval_ms * JITTER / 1000
