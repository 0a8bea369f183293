"""`hpcc status`: each node's instance state and bootstrap phase, found by the cluster's tags.

Instances come from `hpcc:cluster` / `hpcc:node` tags; the phase from the status parameter each node's
bootstrap writes to `/hpcc/<cluster>/nodes/<node>` (docs/bootstrap-contract.md). A status counts only for
the instance that wrote it (its `instanceId`): a replaced node's old `ready` must not make the new one look
done. A node has converged when its status `hostsVersion` (the version of `/hpcc/<cluster>/hosts` it has
applied) is at least that parameter's current Version.

With Slurm on, each node's Slurm state comes from the head's own status, which its agent fills with sinfo's
states and compressed host lists (`"slurm": {"idle": "compute-[000-002]", ...}`, `sinfo -h -o '%T %N'`).
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field

import hostlist
from rich.table import Table
from rich.text import Text

from infra.bootstrap_steps import STEP_NAMES
from infra.naming import HEAD, TAG_NODE, TAG_ROLE, Paths
from infra.node_settings import OPTIONAL_DEFAULTS
from infra.ops.aws import Aws, error_code, tag_dict, tag_filter
from infra.ops.terminal import cell, plain, row as table_row

STEPS = STEP_NAMES  # the bootstrap's, in order (infra/bootstrap_steps.py)
PHASES = ("pending", *STEPS, "ready")
LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")
# Instance states a bootstrap cannot finish from: the node needs a new instance (`hpcc replace`).
DEAD_STATES = ("terminated", "shutting-down", "stopped", "missing")


@dataclass(frozen=True)
class Instance:
    node: str
    role: str
    instance_id: str
    instance_type: str
    state: str
    private_ip: str | None
    public_ip: str | None
    launched: str = ""  # LaunchTime (ISO-8601), to tell a replacement from the instance it replaces


@dataclass
class NodeStatus:
    node: str
    role: str = "?"
    instance_id: str | None = None
    instance_type: str | None = None
    state: str = "missing"  # the instance's state; "missing" when no tagged instance exists
    private_ip: str | None = None
    phase: str = "unknown"  # pending | <step> | ready | failed | unknown (no or unreadable status)
    step: str | None = None
    message: str = ""
    updated: str | None = None
    log_tail: list[str] = field(default_factory=list)
    hosts_version: int | None = None  # the /hosts Version this node has applied (from its own status)
    hosts_target: int | None = None  # /hosts's current Version; None when the parameter does not exist
    slurm: str | None = None  # the node's Slurm state, "-" when Slurm does not list it; None: no Slurm
    bundle: str | None = None  # the bundle the node's agent runs, short hash (hpcc_node/agent.py)
    drifted: str | None = None  # why it should be replaced when idle (its boot steps changed under it)
    rollout: str | None = None  # the head's report of a halted rollout (once for the cluster)

    @property
    def failed(self) -> bool:
        return self.phase == "failed" or self.state in DEAD_STATES

    @property
    def ready(self) -> bool:
        return self.phase == "ready" and self.state == "running"

    @property
    def converged(self) -> bool:
        """Has this node applied the cluster's current membership (nothing to apply before /hosts exists)?"""
        return self.hosts_target is None or (self.hosts_version is not None and self.hosts_version >= self.hosts_target)


def _newer(a: Instance, b: Instance) -> bool:
    """Does `a` stand for its node rather than `b`? A live instance beats a terminated one; among equals the
    later launch wins (during a create-before-delete replacement both old and new instances carry the tag)."""
    return ((a.state != "terminated"), a.launched) > ((b.state != "terminated"), b.launched)


def instances(aws: Aws, cluster: str, include_terminated: bool = False) -> list[Instance]:
    """The cluster's instances by tag, one per node name (the live, latest-launched one), sorted."""
    found: dict[str, Instance] = {}
    for res in aws.pages("ec2", "describe_instances", "Reservations", Filters=tag_filter(cluster)):
        for i in res["Instances"]:
            tags = tag_dict(i.get("Tags"))
            state = i["State"]["Name"]
            if state == "terminated" and not include_terminated:
                continue
            node = tags.get(TAG_NODE) or tags.get("Name") or i["InstanceId"]
            launched = i.get("LaunchTime")
            inst = Instance(node, tags.get(TAG_ROLE, "?"), i["InstanceId"], i["InstanceType"], state,
                            i.get("PrivateIpAddress"), i.get("PublicIpAddress"),
                            launched.isoformat() if hasattr(launched, "isoformat") else str(launched or ""))
            if node not in found or _newer(inst, found[node]):
                found[node] = inst
    return sorted(found.values(), key=lambda n: (n.role != "head", n.node))


def parse_status(raw: str) -> dict:
    try:
        value = json.loads(raw)
    except ValueError:
        return {"phase": "unknown", "message": f"status is not JSON: {raw[:80]!r}"}
    return value if isinstance(value, dict) else {"phase": "unknown", "message": f"status is not an object: {raw[:80]!r}"}


def bootstrap_statuses(aws: Aws, cluster: str) -> dict[str, dict]:
    prefix = Paths(cluster).nodes + "/"
    out = {}
    for p in aws.pages("ssm", "get_parameters_by_path", "Parameters", Path=Paths(cluster).nodes, Recursive=True):
        out[p["Name"].removeprefix(prefix)] = parse_status(p["Value"])
    return out


def hosts_version(aws: Aws, cluster: str) -> int | None:
    """The Version of /hpcc/<cluster>/hosts (SSM GetParameter's `Parameter.Version`, one more on every
    overwrite: https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_Parameter.html);
    None before the program has written it."""
    from botocore.exceptions import ClientError

    try:
        return int(aws.call("ssm", "get_parameter", Name=Paths(cluster).hosts)["Parameter"]["Version"])
    except ClientError as e:
        if error_code(e) == "ParameterNotFound":
            return None
        raise


def _int_or_none(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def apply_status(row: NodeStatus, status: dict) -> NodeStatus:
    """Fill `row` (which knows the node's live instance) from the status JSON, if that instance wrote it.
    A status from another (or no named) instance leaves the node `pending` and says whose it was."""
    writer = status.get("instanceId")
    if not writer or writer != row.instance_id:
        row.phase, row.step = "pending", None
        if writer:
            row.message = f"status written by {plain(writer)} (a previous instance)"
        elif status.get("phase") not in (None, "pending"):  # the program's own placeholder names no instance
            row.message = "status names no instance (a previous instance's, or an older bootstrap's)"
        return row
    row.phase = str(status.get("phase") or "unknown")
    row.step = None if status.get("step") is None else str(status["step"])
    row.message = str(status.get("message") or "")
    row.updated = None if status.get("updated") is None else str(status["updated"])
    tail = status.get("logTail") or []
    row.log_tail = [str(x) for x in tail] if isinstance(tail, list) else [str(tail)]
    row.hosts_version = _int_or_none(status.get("hostsVersion"))
    if not row.private_ip:  # EC2 gives none (a terminated instance): the node's own word, if it is an address
        row.private_ip = status_ip(status.get("ip"))
    bundle = status.get("bundle")
    row.bundle = bundle[:12] if isinstance(bundle, str) and re.fullmatch(r"[0-9a-f]{64}", bundle) else None
    row.drifted = plain(status["drifted"])[:200] if status.get("drifted") else None
    row.rollout = plain(status["rollout"])[:300] if status.get("rollout") else None
    return row


def status_ip(value: object) -> str | None:
    """A node-written `ip` that parses as an IPv4 address, else None."""
    try:
        return str(ipaddress.IPv4Address(value)) if isinstance(value, str) else None
    except ValueError:
        return None


def scheduler(aws: Aws, cluster: str) -> str:
    """The SCHEDULER the settings parameter gives the nodes (infra/node_settings.py), and the nodes' default when it
    gives none or does not exist."""
    from botocore.exceptions import ClientError

    default = OPTIONAL_DEFAULTS["SCHEDULER"]
    try:
        text = aws.call("ssm", "get_parameter", Name=Paths(cluster).settings)["Parameter"]["Value"]
    except ClientError as e:
        if error_code(e) == "ParameterNotFound":
            return default
        raise
    return next((line.partition("=")[2] for line in text.splitlines() if line.startswith("SCHEDULER=")), default)


def slurm_states(reported: object) -> dict[str, str]:
    """node -> Slurm state, from the head's `slurm` field ({state: hostlist}). The field is node-written: what is
    not a string pair or not a host list (python-hostlist's syntax, which is Slurm's) is left out."""
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


def apply_slurm(rows: list[NodeStatus], head_status: dict, on: bool) -> None:
    """The Slurm column: shown when the settings turn Slurm on (so it appears, all `-`, while the head still boots)
    or when the head reports states anyway (switched off, but its daemons not yet stopped). The head's report
    counts only from the head's live instance, like its phase."""
    head = next((r for r in rows if r.node == HEAD), None)
    own = head is not None and head.instance_id is not None and head_status.get("instanceId") == head.instance_id
    reported = head_status.get("slurm") if own else None
    if not on and reported is None:
        return
    states = slurm_states(reported)
    for row in rows:
        row.slurm = states.get(row.node, "-")


def cluster_status(aws: Aws, cluster: str) -> list[NodeStatus]:
    """One row per node that has an instance or a status parameter, head first, then by name. The one place
    that decides a node's phase: `hpcc status` and `hpcc up`'s wait both read it from here."""
    rows: dict[str, NodeStatus] = {}
    target = hosts_version(aws, cluster)
    for inst in instances(aws, cluster, include_terminated=True):
        rows[inst.node] = NodeStatus(inst.node, inst.role, inst.instance_id, inst.instance_type, inst.state,
                                     inst.private_ip)
    statuses = bootstrap_statuses(aws, cluster)
    for node, st in statuses.items():
        apply_status(rows.setdefault(node, NodeStatus(node, "head" if node == "head" else "compute")), st)
    for row in rows.values():
        row.hosts_target = target
    ordered = sorted(rows.values(), key=lambda r: (r.role != "head", r.node))
    apply_slurm(ordered, statuses.get(HEAD, {}), scheduler(aws, cluster) == "slurm")
    return ordered


# -- printing: text that came from a node is data, never markup or terminal control (infra/ops/terminal.py) ------


node_text = cell  # node-written text for rich: escapes stripped, a Text so `[/]` is printed, not parsed


STATE_STYLE = {"running": "green", "pending": "yellow", "missing": "red", "terminated": "red", "stopped": "red"}


def phase_style(phase: str) -> str:
    return {"ready": "green", "failed": "bold red", "unknown": "dim"}.get(phase, "yellow")


def hosts_cell(r: NodeStatus) -> Text:
    if r.hosts_target is None:
        return Text("-")
    have = "-" if r.hosts_version is None else str(r.hosts_version)
    return Text(f"{have}/{r.hosts_target}", style="green" if r.converged else "yellow")


def bundle_cell(r: NodeStatus) -> Text:
    return Text(f"{r.bundle or '-'}{' drifted' if r.drifted else ''}", style="yellow" if r.drifted else "")


def table(cluster: str, rows: list[NodeStatus]) -> Table:
    slurm = any(r.slurm is not None for r in rows)
    t = Table(title=Text(f"cluster {plain(cluster)}"), title_justify="left")
    for col in ("node", "instance", "type", "state", "private ip", "phase", *(["slurm"] if slurm else []), "step",
                "hosts", "bundle", "message", "updated"):
        t.add_column(col, overflow="fold")
    for r in rows:
        table_row(t, r.node, r.instance_id, r.instance_type, Text(r.state, style=STATE_STYLE.get(r.state, "yellow")),
                  r.private_ip, Text(r.phase, style=phase_style(r.phase)), *([r.slurm] if slurm else []), r.step,
                  hosts_cell(r), bundle_cell(r), r.message, r.updated)
    return t


def summary(rows: list[NodeStatus]) -> str:
    ready = sum(r.ready for r in rows)
    failed = [r.node for r in rows if r.failed]
    lagging = [r.node for r in rows if r.ready and not r.converged]
    text = f"{ready}/{len(rows)} nodes ready"
    text += f"; not on hosts version {rows[0].hosts_target}: {', '.join(lagging)}" if lagging else ""
    drifted = [r.node for r in rows if r.drifted]
    text += f"; drifted, replace when idle: {', '.join(drifted)}" if drifted else ""
    text += "".join(f"; rollout {r.rollout}" for r in rows if r.rollout and r.node == HEAD)
    return text + (f"; failed: {', '.join(failed)}" if failed else "")


def needs_replacing(rows: list[NodeStatus]) -> list[str]:
    """Nodes whose instance is gone or stopped, or whose bootstrap failed: a new instance is the fix."""
    return [r.node for r in rows if r.failed]


def replace_command(nodes: list[str], stack: str | None = None, config: str | None = None) -> str:
    """The `hpcc replace` command line for these nodes (placeholders for what the caller does not know)."""
    stack_arg = stack or "<stack>"
    return f"hpcc replace {config or f'Pulumi.{stack_arg}.yaml'} --stack {stack_arg} {' '.join(nodes)}"


def print_failures(console, rows: list[NodeStatus], tail: int = 10) -> None:
    """Each failed node with its failing step, why, and the last lines of its log (all as plain text)."""
    for r in rows:
        if not r.failed:
            continue
        why = r.message or (f"instance is {r.state}" if r.state != "running" else "failed")
        if r.state in DEAD_STATES and r.message:
            why = f"instance is {r.state}; {r.message}"
        console.print(Text.assemble(node_text(f"{r.node} failed", "bold red"), " at step ",
                                    node_text(r.step or r.phase, "bold"), ": ", node_text(why)), highlight=False)
        for line in r.log_tail[-tail:]:
            console.print(Text("    ") + node_text(line), highlight=False)
        if r.instance_id and r.state not in ("terminated", "missing"):
            console.print(f"    full log: /var/log/hpcc-bootstrap.log on {r.instance_id} (the instance is kept)",
                          highlight=False)
