"""The human side of `hpcc plan`: resource tree, nodes, cost, time to ready, warnings; with --previous,
what a second `pulumi up` would change. The operator's side of the plan (infra/plan/ makes it; this prints it, every
cell through infra/ops/terminal.py)."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from infra.config.estimates import minutes_to_ready, unpriced
from infra.facts.instance_types import HEAD_FIELD
from infra.facts.prices import SNAPSHOT_DATE, SNAPSHOT_REGION
from infra.ops.terminal import row
from infra.plan.guard import ACTIONS, guarded


def group_types(result) -> list:
    """Each group's instance type's facts, in the order of cluster.node_groups."""
    cluster = result.config.cluster
    return [
        result.facts.get(g.instance_type, cluster.group_field(i, "instanceType"))
        for i, g in enumerate(cluster.node_groups)
    ]


def cost_line(result) -> str:
    """The estimate, or which types have no known price (never a wrong number)."""
    cost, cluster = result.outputs.get("estimatedHourlyCostUsd"), result.config.cluster
    if cost is None:
        missing = unpriced(result.facts.get(cluster.head_node.instance_type, HEAD_FIELD), *group_types(result))
        return (
            f"[bold]price unknown[/] ({', '.join(missing)} not in the price snapshot of {SNAPSHOT_DATE}; "
            "`hpcc preflight` asks the AWS Price List API)"
        )
    return f"[bold]${cost:,.2f}/hour[/] (on-demand prices, {SNAPSHOT_REGION}, snapshot of {SNAPSHOT_DATE})"


def print_summary(result, out: Path, console: Console | None = None) -> None:
    console = console or Console()
    cluster = result.config.cluster
    outputs = result.outputs

    children: dict[str | None, list[dict]] = defaultdict(list)
    for r in result.resources:
        children[r["parent"]].append(r)
    tree = Tree(
        f"[bold]{cluster.name}[/] ({result.config.region}, {outputs.get('availabilityZone')}) - "
        f"{len(result.resources)} resources"
    )
    for comp in children[None]:
        branch = tree.add(f"[cyan]{comp['name']}[/] {comp['type']}")
        for token, n in sorted(Counter(r["type"] for r in children[comp["name"]]).items()):
            names = sorted(r["name"] for r in children[comp["name"]] if r["type"] == token)
            shown = ", ".join(names[:3]) + (f", ... (+{n - 3})" if n > 3 else "")
            branch.add(f"{token.split(':')[-1]} x{n}: {shown}")
    console.print(tree)

    nodes = Table(title="Nodes", show_lines=False)
    for col in ("group", "type", "count", "first node", "last node", "slots", "market"):
        nodes.add_column(col, no_wrap=col.endswith("node") or col == "type")
    head = outputs["headNode"]
    row(nodes, "head", cluster.head_node.instance_type, 1, "head", "", "-", "on-demand")
    for group in outputs["nodeGroups"]:
        first, _, last = group["nodes"].partition("..")
        row(
            nodes,
            group["name"],
            group["instanceType"],
            group["count"],
            first or "(none)",
            last or "",
            group["slots"],
            group["market"],
        )
    console.print(nodes)
    console.print(
        f"Head: {head['privateIp']}"
        + (f" (public {head['publicIp']})" if head.get("publicIp") else "")
        + ". The controller on the head launches each group (EC2 Fleet) and names its nodes; EC2 picks "
        "their addresses at launch."
    )

    fsx = outputs["fsx"]
    console.print(
        f"FSx for Lustre {cluster.fsx.deployment_type} {cluster.fsx.storage_capacity} GiB: "
        f"{fsx['dnsName']}@tcp:/{fsx['mountName']} on {fsx['mountPoint']}"
    )
    console.print(f"Log in: {outputs['sshCommand']}")
    console.print(
        f"Estimated cost: {cost_line(result)}; ready in about "
        f"{minutes_to_ready(cluster, *group_types(result))} minutes after `pulumi up` starts"
    )
    for w in result.warnings:
        console.print(f"[yellow]warning:[/] {escape(w.field)}: {escape(w.message)}", highlight=False)
    console.print(
        escape(
            f"Planned offline in {result.seconds:.1f}s; wrote {out}/resources.json, {out}/outputs.json, "
            f"{out}/user-data/ ({len(result.user_data)} loaders), {out}/bundle/ "
            f"({len(result.bundle_files)} files, sha256 {result.bundle_sha256[:12]}... in {out}/bundle.sha256)"
        )
    )


def print_changes(result, out: Path, previous: str, console: Console | None = None) -> None:
    """What a second `pulumi up` would do: counts per action, then each replace and delete with the inputs
    behind it, flagging what `hpcc up` stops without --allow-replace and what Pulumi itself refuses."""
    console = console or Console()
    changes = result.changes or []
    for note in result.notes:
        console.print(f"[bold]note:[/] {escape(note)}", highlight=False)
    if not changes:
        console.print(f"No changes against {previous}: a second `pulumi up` would leave every resource as it is.")
        console.print(f"Wrote {out}/changes.json")
        return
    counts = Table(title=f"Changes against {previous}")
    counts.add_column("action")
    counts.add_column("resources", justify="right")
    for action in ACTIONS:
        row(counts, action, sum(1 for c in changes if c.action == action))
    console.print(counts)

    stopping = {(c.name, c.type) for c in guarded(changes)}
    refused = {(c.name, c.type) for c in result.refused}
    destructive = [c for c in changes if c.action in ("replace", "delete")]
    if destructive:
        table = Table(title="Replaced and deleted")
        for col in ("action", "resource", "type", "because of", "flag"):
            table.add_column(col, overflow="fold")
        for c in destructive:
            flags = Text("; ").join(
                [Text("protected", "bold red")] * ((c.name, c.type) in refused)
                + [Text("guarded", "yellow")] * ((c.name, c.type) in stopping)
            )
            row(table, c.action, c.name, c.type.split(":")[-1], ", ".join(c.properties) or "-", flags)
        console.print(table)
    if refused:
        console.print(
            f"[bold red]protected:[/] Pulumi refuses {len(refused)} of these: it never replaces or deletes a "
            "protected resource; remove `protect` first if that is really wanted",
            highlight=False,
        )
    for problem in result.aws_refusals:
        console.print(
            f"[bold red]AWS would refuse:[/] {escape(problem)} (the update would stop there, half done)",
            highlight=False,
        )
    if stopping:
        console.print(
            f"[yellow]guarded:[/] `hpcc up` stops before {len(stopping)} of these unless run with --allow-replace",
            highlight=False,
        )
    console.print(f"Wrote {out}/changes.json")
