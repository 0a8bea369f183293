"""`hpcc status` and `hpcc up`'s wait: a controller-run cluster as groups and nodes, decided in one place.

Sources (infra/ops/store.py): the ledger (each name's slot and state, the groups' protected state, the controller's
recent actions and alerts, the membership generation), EC2 by the cluster's tag (`hpcc:group` set at launch,
`hpcc:node` following the ledger), and each node's `status/<instance-arn>.json` in the state bucket. A status counts
only for the instance that wrote it and is named by its key: a replaced node's old `ready` never stands for the new.
A compute node is ready when the controller marked its slot ready (its bootstrap passed, it reaches the head and,
with Slurm, slurmd registered: hpcc_node/controller/assess.py) and its instance runs; the head when its own status
says so. A node has converged when it applied the membership generation the controller last published.

With Slurm on, each node's Slurm state comes from the head's own status (`"slurm": {"idle": "gpu-[000-002]"}`).
"""

from __future__ import annotations

import ipaddress
import re
import time
from dataclasses import dataclass, field

import hostlist

from hpcc_contract import formats
from hpcc_contract.names import HEAD, TAG_GROUP, TAG_NODE, TAG_ROLE
from hpcc_contract.settings import OPTIONAL_DEFAULTS
from hpcc_node import certstore
from hpcc_node.controller import model
from hpcc_node.controller.ledger import Loaded
from infra.ops import OpsError, rotate_keys, store
from infra.ops.aws import Aws, tag_dict
from infra.ops.status.notes import alerts, int_or_none, roll_text, specs, unread_notes
from infra.ops.terminal import plain
from infra.render.steps import STEP_NAMES

STEPS = STEP_NAMES  # the bootstrap's, in order (infra/render/steps.py)
PHASES = ("pending", *STEPS, "ready")
DEAD_STATES = ("terminated", "shutting-down", "stopping", "stopped", "missing")
EVENTS_SHOWN = 15  # the controller's most recent actions `hpcc status` prints


@dataclass
class NodeStatus:
    node: str
    role: str = "compute"
    instance_id: str | None = None
    instance_type: str | None = None
    state: str = "missing"  # the instance's state; "missing" when EC2 lists none
    private_ip: str | None = None
    phase: str = "unknown"  # pending | <step> | ready | failed | unknown (no or unreadable status)
    step: str | None = None
    message: str = ""
    updated: str | None = None
    log_tail: list[str] = field(default_factory=list)
    generation: int | None = None  # the membership generation this node applied (its own status)
    generation_target: int | None = None  # the one the controller published last; None before the first
    slurm: str | None = None
    bundle: str | None = None
    drifted: str | None = None
    rollout: str | None = None
    group: str = ""
    slot: str | None = None  # the ledger's state of its name (booting, ready, replacing, failed ...); None: unnamed
    reason: str = ""  # the ledger's reason for that state
    attempts: int = 0
    replace_requested: bool = False
    failure: str = ""  # the failure class the node reported (hpcc_contract/taxonomy.py), "" when none
    health: str = ""  # its health verdict (hpcc_node/health/service.status_fields): `fail xid: drain`, `ok`; "": none
    heard: float | None = None  # seconds since its agent last wrote its status (a change or its heartbeat)

    @property
    def replacing(self) -> bool:
        return self.slot == model.REPLACING or self.replace_requested

    @property
    def failed(self) -> bool:
        if self.role == HEAD:
            return self.phase == "failed" or self.state in DEAD_STATES
        return self.slot == model.FAILED or (self.phase == "failed" and not self.replacing)

    @property
    def ready(self) -> bool:
        if self.role == HEAD:
            return self.phase == "ready" and self.state == "running"
        return self.slot == model.READY and self.state == "running"

    @property
    def converged(self) -> bool:
        return self.generation_target is None or (
            self.generation is not None and self.generation >= self.generation_target
        )


@dataclass
class GroupRow:
    name: str
    asked: int = 0
    launched: int = 0  # live instances (pending, running) carrying the group's tag, named or not
    ready: int = 0
    failed: int = 0
    replacing: int = 0
    protected: str = ""
    note: str = ""  # a Capacity Block wait, a launch back-off


@dataclass
class ClusterStatus:
    cluster: str
    nodes: list[NodeStatus] = field(default_factory=list)
    groups: list[GroupRow] = field(default_factory=list)
    events: list[model.Event] = field(default_factory=list)  # the most recent, oldest first
    alerts: list[str] = field(default_factory=list)
    generation: int | None = None
    notes: list[str] = field(default_factory=list)
    controller: str = ""  # who holds the ledger's lease ("" : nobody)
    lease_left: float = 0.0  # seconds the lease still runs; <= 0: expired, the controller is not running
    rotation: certstore.Rotation | None = None  # the host CA's rotation (`hpcc rotate-keys`), as last stepped

    @property
    def controller_down(self) -> bool:
        return self.lease_left <= 0 and bool(self.nodes or self.groups)

    def rows(self) -> dict[str, NodeStatus]:
        return {r.node: r for r in self.nodes}


def status_ip(value: object) -> str | None:
    """A node-written `ip` that parses as an IPv4 address, else None."""
    try:
        return str(ipaddress.IPv4Address(value)) if isinstance(value, str) else None
    except ValueError:
        return None


def apply_status(row: NodeStatus, status: dict) -> NodeStatus:
    """Fill `row` (which knows the node's live instance) from the status its instance wrote; a status naming
    another instance is not this node's and leaves it pending."""
    writer = status.get("instance_id") or status.get("instanceId")
    if not writer or writer != row.instance_id:
        row.phase, row.step = "pending", None
        row.message = f"status written by {plain(writer)} (a previous instance)" if writer else row.message
        return row
    try:  # a newer hpcc wrote it (its node follows a newer bundle): said, not read as this format
        formats.check_doc("status", status, formats.STATUS)
    except (formats.NewerFormat, formats.BadFormat) as e:
        row.phase, row.step, row.message = "unknown", None, str(e)
        return row
    ok = status.get("ok")
    row.phase = str(status.get("phase") or ("ready" if ok is True else "failed" if ok is False else "unknown"))
    row.step = None if status.get("step") is None else str(status["step"])
    why = status.get("message") or status.get("evidence") or ""
    row.failure = plain(status.get("failure") or "")[:40]
    row.message = str(why) if not row.failure else f"{row.failure}: {why}"
    newer = status.get("newer")  # the documents its agent refused as newer than it reads (hpcc_node/agent.py)
    if isinstance(newer, list) and newer:
        row.message += "; refused: " + "; ".join(plain(str(x))[:300] for x in newer[:4])
    row.updated = None if status.get("updated") is None else str(status["updated"])
    tail = status.get("logTail") or []
    row.log_tail = [str(x) for x in tail] if isinstance(tail, list) else [str(tail)]
    row.generation = int_or_none(status.get("generation", status.get("hostsVersion")))
    if not row.private_ip:  # EC2 gives none (a terminated instance): the node's own word, if it is an address
        row.private_ip = status_ip(status.get("ip"))
    bundle = status.get("bundle")
    row.bundle = bundle[:12] if isinstance(bundle, str) and re.fullmatch(r"[0-9a-f]{64}", bundle) else None
    row.drifted = plain(status["drifted"])[:200] if status.get("drifted") else None
    row.rollout = plain(status["rollout"])[:300] if status.get("rollout") else None
    row.health = health_text(status)
    return row


def health_text(status: dict) -> str:
    """The node's health verdict as its row shows it: the status, and for a failing one the deciding check and
    the controller's action (`fail xid: drain`); for one that warns or could not tell, its check (`unknown xid`:
    no kernel log to read Xids from); node-written, so plain and short."""
    verdict = plain(status.get("health") or "")[:10]
    check, action = (plain(status.get(k) or "")[:40] for k in ("check", "action"))
    check = check or plain(status.get("healthCheck") or "")[:40]
    if not check:
        return verdict
    return f"{verdict or 'fail'} {check}" + (f": {action}" if action else "")


def slurm_states(reported: object) -> dict[str, str]:
    """node -> Slurm state, from the head's `slurm` field ({state: hostlist}). Node-written: what is not a string
    pair or not a host list (python-hostlist's syntax, which is Slurm's) is left out."""
    states: dict[str, str] = {}
    if not isinstance(reported, dict):
        return states
    for state, nodes in reported.items():
        if not isinstance(state, str) or not isinstance(nodes, str):
            continue
        try:
            states.update(dict.fromkeys(hostlist.expand_hostlist(nodes), state))
        except hostlist.BadHostlist:
            continue
    return states


def _launched(raw: dict) -> str:
    at = raw.get("LaunchTime")
    return at.isoformat() if hasattr(at, "isoformat") else str(at or "")


def _row(raw: dict, node: str, role: str) -> NodeStatus:
    return NodeStatus(
        node,
        role,
        raw["InstanceId"],
        raw.get("InstanceType"),
        raw["State"]["Name"],
        raw.get("PrivateIpAddress"),
        group=tag_dict(raw.get("Tags")).get(TAG_GROUP, ""),
    )


def head_instance(raw_instances: list[dict]) -> dict | None:
    """The head's instance: a live one before a terminated one, then the latest launched."""
    heads = [i for i in raw_instances if tag_dict(i.get("Tags")).get(TAG_ROLE) == HEAD]
    return max(heads, key=lambda i: (i["State"]["Name"] != "terminated", _launched(i)), default=None)


def build(
    cluster: str,
    raw_instances: list[dict],
    loaded: Loaded,
    statuses: dict[str, dict],
    groups: list[dict],
    now: float,
    slurm_on: bool = False,
    heard: dict[str, float] | None = None,
) -> ClusterStatus:
    """The cluster's status from what was read; pure, so `hpcc status`, `hpcc up` and the tests share it."""
    out = ClusterStatus(cluster, generation=int_or_none(loaded.membership.get("generation")) or None)
    by_id = {i["InstanceId"]: i for i in raw_instances}
    head = head_instance(raw_instances)
    if head is not None:
        out.nodes.append(_row(head, HEAD, HEAD))
    named = set()
    for slot in sorted(loaded.slots.values(), key=lambda s: (s.group, s.index)):
        raw = by_id.get(slot.instance_id)
        row = _row(raw, slot.name, "compute") if raw else NodeStatus(slot.name, instance_id=slot.instance_id or None)
        row.group, row.slot, row.reason, row.attempts = slot.group, slot.state, slot.reason, slot.attempts
        row.replace_requested = slot.replace_requested
        named.add(slot.instance_id)
        out.nodes.append(row)
    for raw in raw_instances:  # launched, not named (yet): the controller names it, or ends it as an orphan
        tags = tag_dict(raw.get("Tags"))
        if tags.get(TAG_ROLE) == HEAD or raw["InstanceId"] in named or raw["State"]["Name"] not in model.LIVE:
            continue
        row = _row(raw, raw["InstanceId"], "compute")
        row.message = (
            f"launched, not named yet (tag {tags[TAG_NODE]!r} does not lead the ledger)"
            if tags.get(TAG_NODE)
            else "launched, not named yet"
        )
        out.nodes.append(row)
    for row in out.nodes:
        row.generation_target = out.generation
        if row.instance_id in statuses:
            apply_status(row, statuses[row.instance_id])
            if heard and row.instance_id in heard:
                row.heard = max(0.0, now - heard[row.instance_id])
        elif row.slot == model.BOOTING:
            row.phase = "pending"
        if row.role != HEAD and row.slot == model.READY:
            row.phase = "ready" if row.phase in ("unknown", "pending") else row.phase
    reported = statuses.get(head["InstanceId"], {}).get("slurm") if head is not None else None
    if slurm_on or reported is not None:
        states = slurm_states(reported)
        for row in out.nodes:
            row.slurm = states.get(row.node, "-")
    out.groups = group_rows(groups, out.nodes, loaded, now, specs(raw_instances))
    out.events = loaded.events[-EVENTS_SHOWN:]
    out.alerts = alerts(loaded, now)
    out.notes += unread_notes(loaded)
    return out


def group_rows(
    groups: list[dict],
    nodes: list[NodeStatus],
    loaded: Loaded,
    now: float,
    instances: dict[str, model.Instance] | None = None,
) -> list[GroupRow]:
    """Per group: asked (the groups parameter's count), launched, ready, failed, being replaced, protected, and
    a roll's progress. A group seen only in the ledger or on instances (removed from the config, still draining)
    is listed too."""
    names = [g["name"] for g in groups]
    names += sorted({r.group for r in nodes if r.group and r.group not in names} | (set(loaded.groups) - set(names)))
    out = []
    for name in names:
        asked = next((int_or_none(g.get("count")) or 0 for g in groups if g["name"] == name), 0)
        mine = [r for r in nodes if r.group == name and r.role != HEAD]
        state = loaded.groups.get(name)
        note = state.status if state else ""
        if state and state.backoff_until > now:
            note = (note + "; " if note else "") + f"launches backing off ({state.launch_failures} failed in a row)"
        rolling = next((roll_text(g, loaded, instances or {}) for g in groups if g["name"] == name), "")
        note = "; ".join(n for n in (note, rolling) if n)
        out.append(
            GroupRow(
                name,
                asked,
                sum(r.state in model.LIVE for r in mine),
                sum(r.ready for r in mine),
                sum(r.failed for r in mine),
                sum(r.replacing for r in mine),
                state.protected if state else "",
                note,
            )
        )
    return out


def scheduler(settings: dict[str, str]) -> str:
    return settings.get("SCHEDULER") or OPTIONAL_DEFAULTS["SCHEDULER"]


def cluster_status(aws: Aws, cluster: str, clock=time.time) -> ClusterStatus:
    """Read everything once (pages of 1,000, one ledger scan) and build the status."""
    settings = store.settings(aws, cluster)
    where = store.names(aws, cluster, settings)
    raw = store.cluster_instances(aws, cluster)
    loaded = store.load_ledger(aws, where.table)
    found = store.statuses(aws, where.bucket, {i["InstanceId"] for i in raw})
    now = clock()
    out = build(
        cluster,
        raw,
        loaded,
        found.by_instance,
        store.groups(aws, cluster),
        now,
        scheduler(settings) == "slurm",
        found.heard,
    )
    out.notes += found.notes
    out.controller, until = store.lease(aws, where.table)
    out.lease_left = until - now
    try:
        out.rotation = rotate_keys.current(aws, cluster)
    except OpsError as e:
        out.notes.append(str(e))
    return out
