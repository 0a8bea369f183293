"""Every timer and limit of the controller, each a named default with why, in one place (as clustermgtd keeps
`ClustermgtdConfig.DEFAULTS`, aws/aws-parallelcluster-node src/slurm_plugin/clustermgtd.py). decide() reads only
these; a cluster may override a field, never add a hidden constant elsewhere."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Timers:
    # One reconcile loop a minute, as clustermgtd's LOOP_TIME: EC2's describe calls and Slurm's reads stay cheap
    # at 4,096 nodes, and a node's death is seen within a minute.
    loop_seconds: int = 60
    # A launched node has this long to report ready (its bootstrap passed, it reaches the head, slurmd registered)
    # before it is a bootstrap failure; clustermgtd's node_replacement_timeout (1800 s, "should be the same as
    # ResumeTimeout"). A p5 takes several minutes to pass its status checks and load drivers.
    boot_grace_seconds: int = 1800
    # An instance with the cluster's tag and no name in the ledger after this long is an orphan (a launch whose
    # naming was lost, a grown-then-shrunk group) and is terminated; clustermgtd's orphaned_instance_timeout.
    # Longer than a loop plus EC2's eventual consistency, so a fresh launch is named before it could qualify.
    orphan_timeout_seconds: int = 300
    # Consecutive bootstrap failures in a group that stop its replacements (protected mode, reset by any node
    # of the group becoming ready); clustermgtd's protected_failure_count. A bad image or launch template fails
    # every node the same way: replacing them forever only burns money.
    protected_failure_count: int = 10
    # Replacements of one slot (one name) in a row before it is left failed: a slot that fails every time points at
    # something no new instance fixes, and it must not take the whole group's budget. A boot that succeeds starts
    # the count again: three failures a year apart are three bad machines, not a bad slot.
    slot_attempt_cap: int = 3
    # Circuit breaker: at most max(breaker_min, breaker_fraction of the cluster) replacements in any window,
    # so a head that loses its network, or throttled S3, never replaces the cluster. Meta's Llama 3 run saw
    # 419 interruptions in 54 days on 16k GPUs (about 0.3 an hour on 2,000 nodes): 16 an hour is far above that.
    breaker_window_seconds: int = 3600
    breaker_min: int = 16
    breaker_fraction: float = 0.02
    # Systemic: this many distinct nodes failing the same way within the window is the cluster's failure, not
    # theirs: one alert, no node touched. A fraction of the cluster, at least systemic_min nodes, and never more
    # than half of a small cluster (a 4-node cluster whose head lost its network has all four "not responding").
    systemic_window_seconds: int = 600
    systemic_min: int = 5
    systemic_fraction: float = 0.05
    # ... but not forever (systemic_guard.py): after this hold one node of the burst is acted on as a canary, and
    # once it is back in service the rest follow, this many in flight at a time. 15 minutes lets a person see the
    # alert and a passing cause (a file system's failover) clear; a dead node held longer is a job's lost hour.
    # Failures of the instance itself (EC2's status checks, a node neither Slurm nor S3 hears from while others
    # answer) are each their own instance's and never one burst.
    systemic_hold_seconds: int = 900
    systemic_batch_size: int = 8
    # Insufficient capacity, quotas and a Capacity Block not yet active back off, doubling from the first delay
    # up to the maximum (clustermgtd's insufficient_capacity_timeout is 600 s), and spend no budget.
    launch_backoff_first_seconds: int = 60
    launch_backoff_max_seconds: int = 600
    # Instances per CreateFleet call and per loop: EC2's RunInstances resource-rate bucket (EC2 API reference,
    # "Request throttling for the Amazon EC2 API") refills a few instances a second, and clustermgtd's
    # launch_max_batch_size is 500. Larger groups launch in waves, one batch a loop.
    launch_batch_size: int = 500
    launch_batches_per_loop: int = 2
    # All groups together launch no more than that bucket holds, as this controller's recorded launches drew on it:
    # 1,000 instances, refilling 2 a second (the same page: 4,096 fresh instances take at least ~26 minutes).
    launch_bucket_size: int = 1000
    launch_bucket_refill_per_second: float = 2.0
    # Capacity Blocks end with an EC2 warning 40 minutes before the end and terminations from 30 minutes before
    # (EC2 User Guide, capacity-blocks-monitor): drain at the first, and a termination after the second is the
    # block ending, neither a failure nor replaced.
    capacity_block_warning_seconds: int = 40 * 60
    capacity_block_termination_seconds: int = 30 * 60
    # The controller's lease in the ledger: renewed every loop, and between a slow loop's actions once half of it
    # has passed, so three missed loops hand the cluster to another head; a controller that cannot renew stops
    # writing (the ledger's conditions refuse it anyway).
    lease_seconds: int = 180
    # A named instance that EC2 does not list yet (describe is eventually consistent: EC2 API reference,
    # "Eventual consistency in the Amazon EC2 API") is not taken for terminated before this.
    describe_lag_seconds: int = 300
    # A ready node whose status object has not been written (a change or the agent's heartbeat, every
    # hpcc_node/status.py HEARTBEAT_SECONDS) for this long lost its agent, and its health checks with it; without
    # Slurm's ping it may be the node itself. Five beats: one late tick under API pacing is not a death.
    heartbeat_timeout_seconds: int = 600
    # Health (health/decide.py). A failed verdict younger than this is not acted on yet: the same fault on many
    # nodes at once (a driver, a parser, the file system's server) reaches their verdicts within one health period
    # (15 s) and their statuses at once (the agent writes a changed verdict without waiting for its tick), so a
    # systemic burst is seen whole before its first node would be taken out.
    health_settle_seconds: int = 20
    # Between loops the controller lists the status objects (one request per 1,000 nodes; only a changed ETag is
    # fetched: a heartbeat keeps it) every this many seconds, and runs the next loop early, once a failed verdict
    # no loop has acted on is settled: a fatal Xid is then out of service within one health period, this poll and
    # the settle time (about 50 s), not a whole loop later (the target is 60 s).
    wake_poll_seconds: int = 15
    # A job that failed on a node within this many seconds of the node's fatal verdict
    # failed with it and is requeued; Slurm keeps a finished job listed for MinJobAge (300 s by default).
    requeue_window_seconds: int = 300
    # Requeues of one job before it is left failed: slurm.conf's MaxBatchRequeue (templates/steps/slurm.sh.j2
    # writes this value; a test compares them), Slurm's own default of 5.
    max_batch_requeue: int = 5
    # A rebooted node whose agent has not reported again within this long failed its remedy: it is replaced.
    # A p5's reboot with driver load and the boot checks (DCGM level 2 takes minutes) fits well within it.
    reboot_timeout_seconds: int = 1200
    # A held spare runs the deep checks again (hpcc_node/health `deep`, DCGM at the settings' level) once it has
    # sat this long since its last (at boot, or the last spare's): an idle node can rot, and the periodic checks
    # only read (Xids, counters), they never exercise a GPU. Twice a day costs a few minutes of an idle node;
    # 0 turns it off.
    spare_check_seconds: int = 12 * 3600
    # Recent actions kept in the ledger for the breaker, the systemic window and `hpcc status`.
    event_keep_seconds: int = 24 * 3600

    def breaker_limit(self, cluster_nodes: int) -> int:
        return max(self.breaker_min, math.ceil(self.breaker_fraction * cluster_nodes))

    def systemic_threshold(self, cluster_nodes: int) -> int:
        wide = max(self.systemic_min, math.ceil(self.systemic_fraction * cluster_nodes))
        return max(2, min(wide, math.ceil(cluster_nodes / 2)))

    def launch_backoff(self, failures: int, jitter: float = 1.0) -> int:
        """Seconds to wait after the `failures`-th launch failure in a row (1 = the first): the doubling cap, of
        which the upper half is `jitter` (0..1, random in the controller) so groups that failed together do not
        retry together ("equal jitter": AWS Architecture Blog, "Exponential Backoff And Jitter")."""
        if failures <= 0:
            return 0
        cap = min(self.launch_backoff_max_seconds, self.launch_backoff_first_seconds * 2 ** (failures - 1))
        return math.ceil(cap / 2 + cap / 2 * min(1.0, max(0.0, jitter)))


DEFAULT = Timers()
