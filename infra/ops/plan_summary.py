"""The human side of `hpcc plan`: resource tree, nodes, cost, time to ready, warnings; with --previous,
what a second `pulumi up` would change. The operator's side of the plan (infra/plan/ makes it; this prints it, every
cell through infra/ops/terminal.py)."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from hpcc_contract.groups import ALL_PARTITION
from infra.config.estimates import minutes_to_ready, unpriced
from infra.config.validators.placeholders import placeholders
from infra.facts.instance_types import HEAD_FIELD
from infra.facts.prices import SNAPSHOT_DATE, SNAPSHOT_REGION
from infra.ops.terminal import row
from infra.plan.guard import ACTIONS, GUARDED_TYPES, ROLL, guarded
from infra.plan.shape import change_lines, from_outputs


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


def nodes_table(result) -> Table:
    """The head and each group: type, count, spares, node names, slots a node, market and Slurm partition (`*`: the
    default one). A light frame fits 80 columns; cells fold rather than truncate, so a narrow terminal still
    shows every value."""
    cluster, outputs = result.config.cluster, result.outputs
    slurm = cluster.scheduler == "slurm"
    nodes = Table(
        title="Nodes",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=0,
        caption="partition *: where a job without -p runs" if slurm else None,
    )
    cols = ("group", "type", "count", "spares", "nodes", "slots", "market", *(("partition",) if slurm else ()))
    for col in cols:
        nodes.add_column(col, overflow="fold", justify="right" if col in ("count", "spares", "slots") else "left")
    row(nodes, "head", cluster.head_node.instance_type, 1, "-", "head", "-", "on-demand", *("-",) * slurm)
    for group in outputs["nodeGroups"]:
        part = (group.get("partition") or "-") + ("*" if group.get("defaultPartition") else "")
        row(
            nodes,
            group["name"],
            group["instanceType"],
            group["count"],
            group.get("spares", 0),
            group["nodes"] or "(none)",
            group["slots"],
            group["market"],
            *(part,) * slurm,
        )
    return nodes


def partitions_line(outputs: dict) -> str:
    """The partitions slurm.conf gets (hpcc_node/slurm.py) and which one a job without -p lands on."""
    groups = outputs["nodeGroups"]
    names = [g["partition"] for g in groups if g.get("partition")]
    if not names:
        return "no partition yet (every group is empty)"
    default = next((g["partition"] for g in groups if g.get("defaultPartition")), ALL_PARTITION)
    shown = [f"{n} (default)" if n == default else n for n in names]
    if ALL_PARTITION not in names:
        shown.append(f"{ALL_PARTITION} (every node{', default' if default == ALL_PARTITION else ''})")
    why = "no group has GPUs" if default == ALL_PARTITION else "the first group with GPUs"
    return f"partitions {', '.join(shown)}; a job without -p runs in {default} ({why})"


def login_hint(cluster, stack_file: str | None = None) -> str:
    """How to log in once the cluster exists: `hpcc ssh` (the head's id and address do not exist before)."""
    how = "ssh to the head's public IP" if cluster.ssh.allowed_cidrs else "Session Manager to the head"
    target = stack_file or f"--cluster {cluster.name}"
    return f"hpcc ssh {target} ({how}, as {cluster.image.user})"


def print_summary(result, out: Path, console: Console | None = None, stack_file: str | None = None) -> None:
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

    console.print(nodes_table(result))
    head_where = "the public subnet, its public IP" if cluster.ssh.allowed_cidrs else "the private subnet, its address"
    console.print(
        f"Head: {cluster.head_node.instance_type} in {head_where} assigned at launch. The controller on the "
        "head launches each group (EC2 Fleet) and names its nodes; EC2 picks their addresses at launch.",
        highlight=False,
    )
    if cluster.scheduler == "slurm":
        console.print(f"Slurm: {partitions_line(outputs)}", highlight=False)
    console.print(
        f"FSx for Lustre {cluster.fsx.deployment_type} {cluster.fsx.storage_capacity} GiB on "
        f"{outputs['fsx']['mountPoint']} (its DNS and mount names are assigned when `hpcc up` creates it)",
        highlight=False,
    )
    console.print(escape(f"Log in, once `hpcc up` is done: {login_hint(cluster, stack_file)}"), highlight=False)
    console.print(
        f"Estimated cost: {cost_line(result)}; ready in about "
        f"{minutes_to_ready(cluster, *group_types(result))} minutes after `pulumi up` starts"
    )
    for w in [*result.warnings, *placeholders(result.config)]:
        console.print(f"[yellow]warning:[/] {escape(w.field)}: {escape(w.message)}", highlight=False)
    console.print(
        escape(
            f"Planned offline in {result.seconds:.1f}s; wrote {out}/resources.json, {out}/outputs.json, "
            f"{out}/user-data/ ({len(result.user_data)} loaders), {out}/bundle/ "
            f"({len(result.bundle_files)} files, sha256 {result.bundle_sha256[:12]}... in {out}/bundle.sha256)"
        )
    )


def print_shape_change(console: Console, before, after, against: str) -> None:
    """The change in the user's terms (infra/plan/shape.py): groups, nodes, types, cost per hour."""
    if after is None:
        return
    console.print(f"[bold]The cluster, against {escape(against)}:[/]", highlight=False)
    for line in change_lines(before, after):
        console.print(Text(f"  {line}"), highlight=False)


def print_changes(
    result, out: Path, previous: str, console: Console | None = None, previous_outputs: dict | None = None
) -> None:
    """What a second `pulumi up` would do: first the change in nodes, groups and cost (from the earlier plan's
    outputs.json), then the resources: counts per action, then each replace and delete with the inputs behind it
    (and each group whose nodes the controller replaces after it), flagging what `hpcc up` stops without
    --allow-replace and what Pulumi itself refuses."""
    console = console or Console()
    changes = result.changes or []
    print_shape_change(console, from_outputs(previous_outputs), from_outputs(result.outputs), previous)
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

    stopping = {(c.name, c.type) for c in guarded([*changes, *result.rolls])}
    refused = {(c.name, c.type) for c in result.refused}
    destructive = [c for c in changes if c.action in ("replace", "delete")] + result.rolls
    if destructive:
        table = Table(title="Replaced and deleted")
        for col in ("action", "resource", "type", "because of", "flag"):
            table.add_column(col, overflow="fold")
        for c in destructive:
            flags = Text("; ").join(
                [Text("protected", "bold red")] * ((c.name, c.type) in refused)
                + [Text("guarded", "yellow")] * ((c.name, c.type) in stopping)
            )
            name = f"{GUARDED_TYPES[ROLL]} {c.name}" if c.type == ROLL else c.name
            row(table, c.action, name, c.type.split(":")[-1], ", ".join(c.properties) or "-", flags)
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
