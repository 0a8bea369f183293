"""Printing a cluster's status: the groups, the controller's recent actions and alerts, the nodes, and for each
failed node what the controller does about it. Every cell goes through infra/ops/terminal.cell (node-, tag- and
ledger-written text is data, never markup or terminal control)."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.table import Table
from rich.text import Text

from hpcc_contract.names import HEAD
from hpcc_contract.taxonomy import policy
from hpcc_node.controller import model
from hpcc_node.controller.timers import DEFAULT as TIMERS
from infra.ops.status.cluster import DEAD_STATES, ClusterStatus, GroupRow, NodeStatus
from infra.ops.terminal import cell, plain
from infra.ops.terminal import row as table_row

node_text = cell  # node-written text for rich: escapes stripped, a Text so `[/]` is printed, not parsed

STATE_STYLE = {"running": "green", "pending": "yellow", "missing": "red", "terminated": "red", "stopped": "red"}
HEALTH_STYLE = {"ok": "green", "fail": "bold red", "": "dim"}
SLOT_STYLE = {model.READY: "green", model.FAILED: "bold red", model.REPLACING: "magenta"}


def phase_style(phase: str) -> str:
    return {"ready": "green", "failed": "bold red", "unknown": "dim"}.get(phase, "yellow")


def generation_cell(r: NodeStatus) -> Text:
    if r.generation_target is None:
        return Text("-")
    have = "-" if r.generation is None else str(r.generation)
    return Text(f"{have}/{r.generation_target}", style="green" if r.converged else "yellow")


def bundle_cell(r: NodeStatus) -> Text:
    return Text(f"{r.bundle or '-'}{' drifted' if r.drifted else ''}", style="yellow" if r.drifted else "")


def slot_cell(r: NodeStatus) -> Text:
    if r.role == HEAD:
        return Text("-")
    text = (r.slot or "unnamed") + (" +replace" if r.replace_requested and r.slot != model.REPLACING else "")
    return Text(text, style=SLOT_STYLE.get(r.slot or "", "yellow"))


def table(cluster: str, rows: list[NodeStatus]) -> Table:
    slurm = any(r.slurm is not None for r in rows)
    health = any(r.health for r in rows)  # nodes whose agent runs the health checks (hpcc_node/health/)
    t = Table(title=Text(f"cluster {plain(cluster)}: nodes"), title_justify="left")
    for col in (
        "node",
        "group",
        "instance",
        "type",
        "state",
        "private ip",
        "ledger",
        "phase",
        *(["slurm"] if slurm else []),
        *(["health"] if health else []),
        "step",
        "membership",
        "bundle",
        "message",
        "updated",
        "heard",
    ):
        t.add_column(col, overflow="fold")
    for r in rows:
        table_row(
            t,
            r.node,
            r.group or ("-" if r.role != HEAD else "head"),
            r.instance_id,
            r.instance_type,
            Text(r.state, style=STATE_STYLE.get(r.state, "yellow")),
            r.private_ip,
            slot_cell(r),
            Text(r.phase, style=phase_style(r.phase)),
            *([r.slurm] if slurm else []),
            *([Text(r.health or "-", style=HEALTH_STYLE.get(r.health.split(" ")[0], "yellow"))] if health else []),
            r.step,
            generation_cell(r),
            bundle_cell(r),
            r.message or r.reason,
            r.updated,
            heard_cell(r),
        )
    return t


def heard_cell(r: NodeStatus) -> Text:
    """How long ago its agent last wrote its status (a change, or the heartbeat every 120 s); red past the
    controller's heartbeat timeout, when it takes the node out."""
    if r.heard is None:
        return Text("-")
    text = f"{int(r.heard)} s ago" if r.heard < 120 else f"{int(r.heard // 60)} min ago"
    return Text(text, style="bold red" if r.heard > TIMERS.heartbeat_timeout_seconds else "")


def group_table(cluster: str, groups: list[GroupRow]) -> Table:
    t = Table(title=Text(f"cluster {plain(cluster)}: groups"), title_justify="left")
    for col in ("group", "asked", "launched", "ready", "failed", "being replaced", "protected", "note"):
        t.add_column(col, overflow="fold")
    for g in groups:
        table_row(
            t,
            g.name,
            g.asked,
            g.launched,
            Text(str(g.ready), style="green" if g.ready >= g.asked else "yellow"),
            Text(str(g.failed), style="bold red" if g.failed else ""),
            g.replacing,
            Text(g.protected or "no", style="bold red" if g.protected else ""),
            g.note or "-",
        )
    return t


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S")


def events_table(
    events: list[model.Event], title: str = "the controller's recent actions (ledger events, UTC)"
) -> Table:
    t = Table(title=Text(title), title_justify="left")
    for col in ("at", "action", "node or group", "phase", "class", "reason or result"):
        t.add_column(col, overflow="fold")
    for e in events:
        table_row(t, _when(e.at), e.kind, e.node or "cluster", e.phase, e.failure or "-", e.detail)
    return t


def failure_policy(failure: str):
    """The taxonomy's rule for a node-reported class; None for no class or one this hpcc does not know."""
    try:
        return policy(failure) if failure else None
    except ValueError:
        return None


def what_controller_does(r: NodeStatus, protected: str = "") -> str:
    """What happens to a failed or dead node next, in the controller's terms (hpcc_node/controller/decide.py)."""
    if r.role == HEAD:
        return (
            "the head runs the controller: nothing replaces it automatically; nodes keep running their jobs. "
            "Replace it through Pulumi (`pulumi up --replace <the head's URN>`, `pulumi stack --show-urns`); "
            "the new head's controller adopts the cluster from the ledger and the tags"
        )
    if r.slot == model.REPLACING:
        return "being replaced: the controller terminates its instance, then the name moves to a new one"
    if r.replace_requested:
        return f"replacement requested: the controller acts within a loop ({TIMERS.loop_seconds} s)"
    if r.slot == model.FAILED:
        return f"left failed ({r.reason or 'see the ledger'}); fix the cause, then `hpcc replace {r.node}`"
    rule = failure_policy(r.failure)
    if rule is not None and not rule.replace:  # the one taxonomy (hpcc_contract/taxonomy.py) says: reported only
        return f"a {r.failure} failure, not replaced: {rule.why}; once fixed, `hpcc replace {r.node}`"
    if protected:
        return f"not replaced: group {r.group} is protected ({protected}); once fixed, `hpcc replace {r.node}` lifts it"
    if r.attempts >= TIMERS.slot_attempt_cap:
        return f"attempt cap reached ({r.attempts}); the controller leaves it failed"
    return (
        f"the controller replaces it (attempt {r.attempts + 1} of {TIMERS.slot_attempt_cap}) unless the failure "
        "is a bundle or hook's (reported, not replaced) or systemic (alert, nothing touched)"
    )


def print_failures(console, status: ClusterStatus, rows: list[NodeStatus] | None = None, tail: int = 10) -> None:
    """Each failed node: its failing step, why, the last lines of its log, and what the controller does."""
    protected = {g.name: g.protected for g in status.groups}
    for r in status.nodes if rows is None else rows:
        if not r.failed:
            continue
        why = r.message or r.reason or (f"instance is {r.state}" if r.state != "running" else "failed")
        if r.state in DEAD_STATES and r.message:
            why = f"instance is {r.state}; {r.message}"
        at = ("", "") if r.phase != "failed" else (" at step ", node_text(r.step or r.phase, "bold"))
        console.print(
            Text.assemble(node_text(f"{r.node} failed", "bold red"), *at, ": ", node_text(why)), highlight=False
        )
        for line in r.log_tail[-tail:]:
            console.print(Text("    ") + node_text(line), highlight=False)
        console.print(
            Text("    next: ") + node_text(what_controller_does(r, protected.get(r.group, ""))), highlight=False
        )


def print_alerts(console, status: ClusterStatus) -> None:
    for text in status.alerts:
        console.print(
            Text.assemble(
                Text("ALERT ", style="bold red"),
                node_text(text),
                " (systemic: the controller touches no node; look at what they share)",
            ),
            highlight=False,
        )


def summary(status: ClusterStatus) -> str:
    rows = status.nodes
    ready = sum(r.ready for r in rows)
    text = f"{ready}/{len(rows)} nodes ready"
    if status.generation is not None:
        text += f", membership generation {status.generation}"
        lagging = [r.node for r in rows if r.ready and not r.converged]
        text += f"; not on it yet: {', '.join(lagging)}" if lagging else ""
    drifted = [r.node for r in rows if r.drifted]
    text += f"; drifted, replaced when idle: {', '.join(drifted)}" if drifted else ""
    text += "".join(f"; rollout {r.rollout}" for r in rows if r.rollout and r.node == HEAD)
    replacing = [r.node for r in rows if r.replacing]
    text += f"; being replaced: {', '.join(replacing)}" if replacing else ""
    failed = [r.node for r in rows if r.failed]
    return text + (f"; failed: {', '.join(failed)}" if failed else "")


def controller_line(status: ClusterStatus) -> Text:
    """Is the controller running? Its lease in the ledger is renewed every loop (hpcc_node/controller/timers.py)."""
    if status.lease_left > 0:
        return Text.assemble(
            "controller: ",
            node_text(status.controller),
            f" holds the lease ({status.lease_left:.0f} s left; renewed every loop)",
        )
    since = "never started" if not status.controller else f"its lease expired {-status.lease_left:.0f} s ago"
    return Text.assemble(
        Text("controller not running", style="bold red"),
        f" ({since}): nodes keep running their "
        "jobs, but nothing is launched, replaced or published until it runs again; on the head: "
        "`systemctl status hpcc-controller`, /var/log/hpcc/controller.log",
    )


def rotation_line(status: ClusterStatus) -> str:
    """The host CA's rotation as `hpcc rotate-keys` last stepped it (docs/security.md). Whether each node applied
    the phase takes two reads a node; `hpcc rotate-keys --resume` makes them, shows them and carries on."""
    r = status.rotation
    if r is None:
        return ""
    what = {
        "add": "the new CA and keys are trusted beside the old ones; the old ones still sign and log in",
        "switch": "the new CA signs and the new keys log in; the old ones are still trusted",
        "retire": "the old CA and keys are retired once every node applied it",
    }.get(r.phase, r.phase)
    return (
        f"host CA and cluster key rotation {r.id}: phase {r.phase} ({what}); `hpcc rotate-keys --resume` shows each "
        "node's "
        "progress and carries it on"
    )


def show(console, status: ClusterStatus) -> None:
    """Everything `hpcc status` prints, in reading order."""
    console.print(controller_line(status), highlight=False)
    if status.groups:
        console.print(group_table(status.cluster, status.groups))
    print_alerts(console, status)
    if status.events:
        console.print(events_table(status.events))
    console.print(table(status.cluster, status.nodes))
    print_failures(console, status)
    for note in status.notes:
        console.print(Text("note: ") + node_text(note), style="yellow", highlight=False)
    if status.rotation is not None:
        console.print(rotation_line(status), highlight=False)
    console.print(summary(status), highlight=False)
