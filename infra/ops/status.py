"""`hpcc status`: each node's instance state and bootstrap phase, found by the cluster's tags.

Instances come from `hpcc:cluster` / `hpcc:node` tags; the phase from the status parameter each node's
bootstrap writes to `/hpcc/<cluster>/nodes/<node>` (docs/bootstrap-contract.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from rich.table import Table

from infra.naming import TAG_NODE, TAG_ROLE, Paths
from infra.ops.aws import Aws, tag_dict, tag_filter

STEPS = ("os", "lustre", "mount", "efa", "ssh", "join", "launch-env")
PHASES = ("pending", *STEPS, "ready")
LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")


@dataclass(frozen=True)
class Instance:
    node: str
    role: str
    instance_id: str
    instance_type: str
    state: str
    private_ip: str | None
    public_ip: str | None


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

    @property
    def failed(self) -> bool:
        return self.phase == "failed" or self.state in ("terminated", "shutting-down", "stopped", "missing")

    @property
    def ready(self) -> bool:
        return self.phase == "ready" and self.state == "running"


def instances(aws: Aws, cluster: str, include_terminated: bool = False) -> list[Instance]:
    """The cluster's instances by tag, one per node name (a live one wins over a terminated one), sorted."""
    found: dict[str, Instance] = {}
    for res in aws.pages("ec2", "describe_instances", "Reservations", Filters=tag_filter(cluster)):
        for i in res["Instances"]:
            tags = tag_dict(i.get("Tags"))
            state = i["State"]["Name"]
            if state == "terminated" and not include_terminated:
                continue
            node = tags.get(TAG_NODE) or tags.get("Name") or i["InstanceId"]
            inst = Instance(node, tags.get(TAG_ROLE, "?"), i["InstanceId"], i["InstanceType"], state,
                            i.get("PrivateIpAddress"), i.get("PublicIpAddress"))
            if node not in found or found[node].state == "terminated":
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


def cluster_status(aws: Aws, cluster: str) -> list[NodeStatus]:
    """One row per node that has an instance or a status parameter, head first, then by name."""
    rows: dict[str, NodeStatus] = {}
    for inst in instances(aws, cluster, include_terminated=True):
        rows[inst.node] = NodeStatus(inst.node, inst.role, inst.instance_id, inst.instance_type, inst.state, inst.private_ip)
    for node, st in bootstrap_statuses(aws, cluster).items():
        row = rows.setdefault(node, NodeStatus(node, "head" if node == "head" else "compute"))
        row.phase = str(st.get("phase") or "unknown")
        row.step = st.get("step")
        row.message = str(st.get("message") or "")
        row.updated = st.get("updated")
        tail = st.get("logTail") or []
        row.log_tail = [str(x) for x in tail] if isinstance(tail, list) else [str(tail)]
        if not row.private_ip and st.get("ip"):
            row.private_ip = st["ip"]
    return sorted(rows.values(), key=lambda r: (r.role != "head", r.node))


STATE_STYLE = {"running": "green", "pending": "yellow", "missing": "red", "terminated": "red", "stopped": "red"}


def phase_style(phase: str) -> str:
    return {"ready": "green", "failed": "bold red", "unknown": "dim"}.get(phase, "yellow")


def table(cluster: str, rows: list[NodeStatus]) -> Table:
    t = Table(title=f"cluster {cluster}", title_justify="left")
    for col in ("node", "instance", "type", "state", "private ip", "phase", "step", "message", "updated"):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(r.node, r.instance_id or "-", r.instance_type or "-",
                  f"[{STATE_STYLE.get(r.state, 'yellow')}]{r.state}[/]", r.private_ip or "-",
                  f"[{phase_style(r.phase)}]{r.phase}[/]", r.step or "-", r.message or "", r.updated or "-")
    return t


def summary(rows: list[NodeStatus]) -> str:
    ready = sum(r.ready for r in rows)
    failed = [r.node for r in rows if r.failed]
    text = f"{ready}/{len(rows)} nodes ready"
    return text + (f"; failed: {', '.join(failed)}" if failed else "")


def print_failures(console, rows: list[NodeStatus], tail: int = 10) -> None:
    """Each failed node with its failing step, why, and the last lines of its log."""
    for r in rows:
        if not r.failed:
            continue
        why = r.message or (f"instance is {r.state}" if r.state != "running" else "failed")
        console.print(f"[bold red]{r.node} failed[/] at step [bold]{r.step or r.phase}[/]: {why}", highlight=False)
        for line in r.log_tail[-tail:]:
            console.print(f"    {line}", markup=False, highlight=False)
        if r.instance_id and r.state not in ("terminated", "missing"):
            console.print(f"    full log: /var/log/hpcc-bootstrap.log on {r.instance_id} (the instance is kept)",
                          highlight=False)
