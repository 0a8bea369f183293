"""What the controller observes (one Snapshot a loop) and what it decides (Actions), as plain values: decide() is
tested with these alone, no cloud and no Slurm.

Times are seconds since the epoch (float), from the injected clock; nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, Mapping, Optional, Tuple

# The prefix of every Slurm drain/down reason the controller writes: it acts only on nodes whose reason starts so.
REASON_PREFIX = "hpcc:"
ALERT_REASON = f"{REASON_PREFIX} alert "  # a drain for a Prometheus alert (metric_alerts.py): hpcc: alert <rule>: ...

# A slot's states in the ledger (a slot is a name: <group>-NNN).
BOOTING = "booting"  # an instance is named to the slot and has not reported ready
READY = "ready"
DRAINING = "draining"  # a soft failure or a shrink: waiting for Slurm to drain it
REPLACING = "replacing"  # the predecessor is being terminated; the name moves once it is shutting down
FAILED = "failed"  # kept failed, not replaced (bundle/hook, attempt cap, protected): reported
REMOVING = "removing"  # shrink: terminating, then the slot is forgotten (a hole in the names)
SHRINK = "shrink"  # the reason a shrink gives the slots it drains and removes
ENDED = "ended"  # its Capacity Block ended: neither a failure nor replaced
ACTIVE_STATES = (BOOTING, READY, DRAINING, REPLACING, FAILED)

# EC2 instance states (DescribeInstances `State.Name`) in which an instance is gone or going.
GONE = ("shutting-down", "terminated", "stopping", "stopped")
LIVE = ("pending", "running")


@dataclass(frozen=True)
class CapacityBlock:
    """A Capacity Block's window (DescribeCapacityReservations `StartDate`/`EndDate`)."""

    reservation_id: str
    start: float
    end: float


@dataclass(frozen=True)
class Group:
    """One node group as configured (`nodeGroups:`), with what the program created for it."""

    name: str
    instance_type: str
    count: int
    launch_template: str = ""  # its launch template's name or id
    subnet_id: str = ""
    availability_zone: str = ""
    market: str = "on-demand"  # on-demand | spot | capacity-block
    capacity_reservation_id: str = ""
    placement_group: str = ""
    efa: bool = False
    max_count: int = 0  # the size of its fixed Slurm node range; 0: the count
    capacity_block: Optional[CapacityBlock] = None
    spares: int = 0  # of `count`, healthy nodes held idle by the reservation hpcc-spares-<group> (health/decide.py)
    # Rolling replacement (decide_rolling.py; hpcc_contract/groups.py, whose DEFAULTS these are): no spec, no roll
    lt_version: int = 0  # its launch template's version, the one launched (0: not said, `$Latest`)
    spec: str = ""  # its launch spec (names.TAG_LAUNCH_SPEC)
    metadata_hop_limit: int = 1
    update_strategy: str = "rolling"
    max_unavailable: int = 1
    gpus: int = 0  # GPUs per node (its Slurm gres: __main__.slurm_gpus): dcgm-exporter targets (targets.py)

    @property
    def size_limit(self) -> int:
        return max(self.max_count, self.count)


@dataclass(frozen=True)
class Instance:
    """One EC2 instance with the cluster's tag, as DescribeInstances (and DescribeInstanceStatus) show it."""

    instance_id: str
    state: str  # pending | running | shutting-down | terminated | stopping | stopped
    launch_time: float
    group: str = ""  # its hpcc:group tag, given at launch
    private_ip: str = ""
    status_ok: Optional[bool] = None  # EC2 status checks: None while initializing or unknown
    events: Tuple[str, ...] = ()  # scheduled event codes: instance-retirement, system-reboot, ...
    name_tag: str = ""  # its hpcc:node tag: follows the ledger, never leads it
    launch_tag: str = ""  # its hpcc:launch tag, given at launch: the token of the launch that made it
    template_version: int = 0  # its hpcc:template-version tag, given at launch (0: none, launched before it)
    launch_spec: str = ""  # its hpcc:launch-spec tag, given at launch ("": none: never rolled automatically)
    hop_limit: int = 0  # its IMDS HttpPutResponseHopLimit (DescribeInstances MetadataOptions; 0: not seen)


@dataclass(frozen=True)
class Slot:
    """One name in the ledger and the instance it holds."""

    name: str
    group: str
    index: int
    instance_id: str = ""
    state: str = BOOTING
    since: float = 0.0  # when it entered its state
    attempts: int = 0  # replacements of this slot in a row (a boot that succeeds resets it)
    reason: str = ""  # why it is in its state (failure class and evidence)
    replace_requested: bool = False  # `hpcc replace NAME`: an operator's request, recorded by the controller
    version: int = 0  # the ledger item's version, for conditional writes


@dataclass(frozen=True)
class Report:
    """A node agent's verdict about its own instance (one write per change or heartbeat)."""

    name: str
    instance_id: str
    ok: bool
    failure: str = ""  # a hpcc_contract.taxonomy.FailureClass value when not ok
    evidence: str = ""  # e.g. "step efa failed", "bundle sha256 mismatch"
    at: float = 0.0
    # A health verdict's deciding check and what it asks (hpcc_node/health/verdict.py ACTIONS, REMEDIES); empty
    # when the report is not a running node's health verdict.
    check: str = ""
    action: str = ""
    remedy: str = ""
    heard: float = 0.0  # the status object's LastModified: the agent's last write or heartbeat (0: not known)
    deep_checked: float = 0.0  # when the node's deep checks last ran (at boot or as a spare; 0: not said)


@dataclass(frozen=True)
class SlurmNode:
    """One node as Slurm holds it (slurm_records.py): its states (DOWN, DRAIN, IDLE, NOT_RESPONDING...), its reason
    (a text of its own: never read for another field) and address."""

    name: str
    states: FrozenSet[str]
    reason: str = ""
    addr: str = ""


@dataclass(frozen=True)
class SlurmJob:
    """One job as Slurm holds it (slurm_records.py; finished jobs stay listed for MinJobAge, 300 s by default)."""

    job_id: str
    state: str  # RUNNING, PENDING, FAILED, NODE_FAIL, COMPLETED, ...
    nodes: FrozenSet[str] = frozenset()
    restarts: int = 0
    # epoch seconds: when it ended, but for a running job the time its limit ends it (squeue's end_time is start +
    # time limit, a year ahead for UNLIMITED), and 0 while it pends: never "has it ended" (that is `ended`)
    end: float = 0.0
    requeue: bool = True  # Requeue=1: the job may be requeued
    reason: str = ""  # why it is pending (Reason=BeginTime: waiting for its EligibleTime)
    eligible: float = 0.0  # EligibleTime, epoch seconds (0: unknown)
    name: str = ""  # JobName, as Slurm holds it ("" where only Slurm's fields were read: slurm_records.py)
    user: str = ""  # its owner's user name, as Slurm holds it

    @property
    def ended(self) -> bool:
        """Its base state is no longer one a job leaves (https://slurm.schedmd.com/job_state_codes.html)."""
        return self.state not in JOB_LIVE_STATES


# The base states of a job that has not ended (job_state_codes.html, "Job states"); every other base state is final.
JOB_LIVE_STATES = frozenset({"PENDING", "RUNNING", "SUSPENDED"})


@dataclass(frozen=True)
class GroupState:
    """What the controller keeps per group in the ledger."""

    name: str
    consecutive_failures: int = 0  # bootstrap failures in a row; any ready node resets it
    protected: str = ""  # why the group is protected; empty when it is not
    launch_failures: int = 0  # launch-class failures in a row (back-off, no budget)
    backoff_until: float = 0.0
    status: str = ""  # e.g. "waiting for capacity block until ..."
    version: int = 0


@dataclass(frozen=True)
class LaunchRecord:
    """A launch recorded before CreateFleet is called (token) and after (its instance ids). A controller killed
    in between finds the launch's instances by their hpcc:launch tag and records them (orphans.py by_launch_tag);
    only when none carries it does it retry with the same ClientToken, which EC2 answers with the same fleet."""

    token: str
    group: str
    count: int
    at: float
    instance_ids: Optional[Tuple[str, ...]] = None  # None: the call's result is not recorded yet
    minimum: int = 0  # MinTargetCapacity asked (0: count, all-or-nothing): a retry asks the same (ClientToken)


@dataclass(frozen=True)
class Event:
    """A past action, for the circuit breaker, the systemic window and `hpcc status`."""

    at: float
    kind: str
    node: str = ""
    failure: str = ""
    signature: str = ""  # failure class + evidence with the node's own details left out
    phase: str = "start"  # start (recorded before acting) | done | failed (after)
    detail: str = ""  # the reason, or what acting returned


@dataclass(frozen=True)
class MetricAlert:
    """One firing alert of the head's Prometheus rules (infra/render/prometheus.py; metric_alerts.py reads them):
    its rule, the node and instance its series named, what the rule lets the controller do (drain or event), its
    summary (the evidence) and since when it fires."""

    name: str
    node: str
    instance_id: str
    action: str  # one of hpcc_contract.metrics.ALERT_ACTIONS
    summary: str
    since: float = 0.0


@dataclass(frozen=True)
class Snapshot:
    now: float
    slots: Mapping[str, Slot] = field(default_factory=dict)
    instances: Mapping[str, Instance] = field(default_factory=dict)
    reports: Mapping[str, Report] = field(default_factory=dict)  # by node name
    slurm: Optional[Mapping[str, SlurmNode]] = None  # None: the cluster runs no Slurm
    group_states: Mapping[str, GroupState] = field(default_factory=dict)
    launches: Tuple[LaunchRecord, ...] = ()
    events: Tuple[Event, ...] = ()
    alerts: Mapping[str, float] = field(default_factory=dict)  # the alerts already raised: key -> when
    membership_digest: str = ""  # the digest of the last published membership body
    membership_generation: int = 0  # the generation the ledger recorded last: the next one is past it
    membership_etag: str = ""  # the ETag of the object the ledger recorded publishing
    membership_found: Optional[str] = None  # the ETag the object has now ("" : none; None: not read this loop)
    dropped: Mapping[str, str] = field(default_factory=dict)  # status key -> why it is malformed (no verdict)
    bundle: Mapping[str, Any] = field(default_factory=dict)  # what nodes must follow besides membership
    cluster: str = ""  # the cluster's name (launch tokens are unique per account, not per cluster)
    head: Mapping[str, Any] = field(default_factory=dict)  # the controller's own head: name, ip, instance
    jobs: Tuple[SlurmJob, ...] = ()  # Slurm's jobs, for the health rules' requeue (health/decide.py)
    reservations: Mapping[str, FrozenSet[str]] = field(default_factory=dict)  # Slurm reservation -> its nodes
    metric_alerts: Optional[Tuple[MetricAlert, ...]] = None  # firing now; None: no Prometheus, or it did not answer


# Action kinds.
LAUNCH = "launch"
ADOPT = "adopt-launch"  # record a launch's answer from the instances carrying its tag (a controller killed mid-launch)
NAME = "name"
PUBLISH = "publish-membership"
DRAIN = "drain"
DOWN = "down"
RESUME = "resume"
SET_ADDR = "set-address"  # scontrol update NodeName= NodeAddr= NodeHostname=
TAG = "tag"  # the instance's name tag, written again where it differs from the ledger
REPLACE = "replace"
MARK = "mark"  # record a slot's new state (ready, failed, ended) in the ledger
REMOVE = "remove"  # shrink: terminate and forget the slot
FORGET = "forget"  # the removed slot's instance is gone: delete the slot (a hole)
TERMINATE_ORPHAN = "terminate-orphan"
ALERT = "alert"
PROTECT = "protect"
WAIT_CAPACITY_BLOCK = "wait-for-capacity-block"
REQUEUE = "requeue"  # scontrol requeue <job>: a job that failed with its node
REBOOT = "reboot"  # scontrol reboot (EC2 RebootInstances without Slurm): the catalog's cheaper remedy
SPARES = "spares"  # the group's spare reservation holds these nodes (none: deleted)
START_NOW = "start-now"  # scontrol update JobId=<job> StartTime=now: a job requeued off a node hpcc took out
DEEP_CHECK = "deep-check"  # sbatch in the spares' reservation: a held spare's deep checks, on a timer
METADATA = "modify-metadata"  # ModifyInstanceMetadataOptions: the group's IMDS options on a running instance
# The actions recorded as ledger events (start, then done or failed): `hpcc status` and `hpcc events` show them.
RECORDED = (
    LAUNCH,
    ADOPT,
    REPLACE,
    REMOVE,
    TERMINATE_ORPHAN,
    PROTECT,
    ALERT,
    DRAIN,
    DOWN,
    RESUME,
    REQUEUE,
    REBOOT,
    SPARES,
    START_NOW,
    DEEP_CHECK,
    METADATA,
)


@dataclass(frozen=True)
class Why:
    failure: str = ""  # a FailureClass value, or "" for routine work
    evidence: str = ""

    def text(self) -> str:
        return f"{self.failure}: {self.evidence}" if self.failure else self.evidence


@dataclass(frozen=True)
class Action:
    kind: str
    group: str = ""
    node: str = ""
    instance_id: str = ""
    why: Why = Why()
    data: Dict[str, Any] = field(default_factory=dict, hash=False, compare=True)

    def line(self) -> str:
        """One log line: what, on which node or group, and why."""
        where = self.node or self.group or "cluster"
        inst = f" ({self.instance_id})" if self.instance_id else ""
        return f"{self.kind} {where}{inst}: {self.why.text()}"
