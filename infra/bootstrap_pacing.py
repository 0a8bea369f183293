"""How the bootstrap paces its AWS calls, so a 512-node cluster stays under SSM's default 40 requests/s.

Every AWS call a node makes (SSM parameters and the Secrets Manager key) goes through one pacer in the
script: two calls of the same node are at least `api_interval_ms` apart, plus up to a quarter of that
again of jitter, and the node's first call waits a random share of one interval, so the nodes' calls
fall at independent times. The cluster then makes at most nodes / interval calls a second on average
over any interval-long window, whatever the nodes are doing - polling, retrying or reporting.

What one node calls (a small constant; polls for something not there yet repeat at the same pace):
- SSM GetParameter: the hosts list once, the FSx parameter once;
- SSM PutParameter: one status write per step (7) and a final ready or failed;
- Secrets Manager: the cluster key once (the head node also writes it once).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SSM_REQUESTS_PER_SECOND = 40  # default Parameter Store throughput, shared by GetParameter(s) and PutParameter
TARGET_SHARE = 0.75  # the bootstrap's share; the rest is left to the operator's tools (status, hostfile)
SSM_READS = 2  # hosts, fsx
STATUS_WRITES = 8  # os, lustre, mount, efa, ssh, join, launch-env, then ready (or failed instead)
SECRET_CALLS = 2  # head: read (empty), write; compute: read
CALLS_PER_NODE = SSM_READS + STATUS_WRITES + SECRET_CALLS
MIN_INTERVAL_MS = 100  # small clusters: no real wait
MIN_POLL_SECONDS = 5  # waits for things that are not AWS calls (TCP 988, SSH of the other nodes)


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
        return CALLS_PER_NODE * self.api_interval_ms * 1.25 / 1000


def pacing_for(nodes: int) -> Pacing:
    """nodes: every node of the cluster, head included."""
    budget = SSM_REQUESTS_PER_SECOND * TARGET_SHARE
    interval_ms = max(MIN_INTERVAL_MS, math.ceil(nodes * 1000 / budget))
    return Pacing(nodes=nodes, api_interval_ms=interval_ms,
                  poll_seconds=max(MIN_POLL_SECONDS, math.ceil(interval_ms / 1000)))
