"""How the nodes pace their AWS calls: the account-wide rates of SSM and Secrets Manager are shared by every node
(Parameter Store quotas, AWS General Reference "AWS Systems Manager endpoints and quotas": GetParameter(s) and
PutParameter share a default 40 requests/s), while S3, where the membership, the statuses and the host keys live,
takes at least 3,500 PUTs and 5,500 GETs a second per prefix (S3 User Guide, "Best practices design patterns:
optimizing Amazon S3 performance") and is not paced per node.

One pacer per node for SSM and Secrets Manager. Those calls of a node - the bootstrap's and the membership agent's
alike - go through one pacer file (/run/hpcc-aws.last-call, taken under `flock`): two of them are at least
`api_interval_ms` apart, plus up to a quarter of that again of jitter. The cluster therefore makes at most
nodes / interval such calls a second over any interval-long window, whatever its nodes are doing, and the interval
is sized to keep that at TARGET_SHARE of SSM's 40/s: at 513 nodes, ceil(513 x 1000 / 30) = 17,100 ms, so 30/s.
A booting node makes CALLS_PER_NODE of them (below); its S3 calls (a status write per step, the membership, the
host keys) go straight out.

Before a booting node has read the settings it does not know the cluster's size: its first call waits a random
share of the interval of the largest cluster the config allows (first_call_pacing, a constant in the user data),
so a resize never changes the user data and 512 fresh nodes still spread their first calls.

The membership agent (convergence): each tick sleeps `sync_seconds` plus up to a quarter of that, then makes
AGENT_S3_CALLS_PER_TICK conditional GETs (the membership, its own certificates: 304 when unchanged), and reads
SSM only when the membership says the settings changed. `sync_seconds` keeps the agents at S3_TARGET_SHARE of
S3's per-prefix rate: 10 s up to 13,750 nodes, so a new membership generation is seen by every node within one
tick and its jitter, 12.5 s, after the controller publishes it, whatever the cluster's size.

What a booting node calls through the pacer (a small constant; polls for something not there yet repeat at the
same pace):
- SSM GetParameters: the settings, once (again while they are missing); SSM GetParameter: the FSx parameter once;
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
SSM_READS = 2  # settings (GetParameters), fsx
# S3, unpaced, at most: a step's start (fewer: steps.STATUS_EVERY_SECONDS), then ready or failed
STATUS_WRITES = len(STEPS) + 1
SECRET_CALLS = 4  # SSH and munge keys - head: read (empty), write; compute: read (and wait), and the NGC key
CALLS_PER_NODE = SSM_READS + SECRET_CALLS  # the paced calls of one boot
S3_REQUESTS_PER_SECOND = 3500  # PUTs per prefix (GETs: 5,500), the lower of the two
S3_TARGET_SHARE = 0.5  # the agents' share; the rest for boots, the controller and the operator's tools
AGENT_S3_CALLS_PER_TICK = 2  # the membership and the node's certificates, both conditional GETs
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
    """The agent's tick: its calls are S3's, unpaced, at S3_TARGET_SHARE of S3's per-prefix rate at most."""
    budget = S3_REQUESTS_PER_SECOND * S3_TARGET_SHARE
    return max(MIN_SYNC_SECONDS, math.ceil(pacing.nodes * AGENT_S3_CALLS_PER_TICK / budget))


def agent_requests_per_second(pacing: Pacing) -> float:
    """What the agents of a settled cluster ask of S3: AGENT_S3_CALLS_PER_TICK per node per tick at most."""
    return pacing.nodes * AGENT_S3_CALLS_PER_TICK / sync_seconds(pacing)


def agent_ssm_requests_per_second(pacing: Pacing) -> float:
    """What they ask of SSM: nothing while the settings stay as they are (a change costs one read per node)."""
    del pacing
    return 0.0


def convergence_seconds(pacing: Pacing) -> float:
    """The longest a node takes to see a new membership generation once it is published (S3's own answer time
    aside): one tick with its jitter; no pacer turn (S3 is not paced)."""
    return sync_seconds(pacing) * JITTER
