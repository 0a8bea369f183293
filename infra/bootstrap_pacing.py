"""How the bootstrap paces its AWS calls, so a 512-node cluster stays under SSM's default 40 requests/s.

Per node the bootstrap makes a fixed number of calls: the hosts and FSx parameters (each polled until it
exists), the SSH secret (read, and on the head node written once), and one status write per step. Polls
wait `poll_seconds` plus up to as much again of jitter, and the first call waits a random share of
`start_jitter_seconds`, so the cluster's calls spread over time instead of arriving together.
"""

from __future__ import annotations

from dataclasses import dataclass

SSM_REQUESTS_PER_SECOND = 40  # default throughput of GetParameter/PutParameter (standard tier)
STEPS = 8  # os, lustre, mount, efa, ssh, join, launch-env, ready: one status write each
TARGET_SHARE = 0.5  # aim for half the limit: the operator's own tools share it


@dataclass(frozen=True)
class Pacing:
    poll_seconds: int
    start_jitter_seconds: int
    api_backoff_seconds: int = 2
    api_attempts: int = 6

    def peak_requests_per_second(self, nodes: int) -> float:
        """Steady-state rate while every node polls (mean wait 1.5 x poll_seconds), plus the status writes
        spread over the start window: the worst case of the two phases."""
        polling = nodes / (1.5 * self.poll_seconds)
        starting = nodes * STEPS / max(self.start_jitter_seconds, 1)
        return max(polling, starting)


def pacing_for(nodes: int) -> Pacing:
    budget = SSM_REQUESTS_PER_SECOND * TARGET_SHARE
    poll = max(5, -(-nodes // int(1.5 * budget)))  # ceil(nodes / 30)
    start = max(10, -(-nodes * STEPS // int(budget)))
    return Pacing(poll_seconds=poll, start_jitter_seconds=start)
