"""`hpcc top`: the cluster at a glance from the head's Prometheus (issue 34), per group and per running job: GPU
utilisation (the mean and the worst node), GPU memory, power, EFA throughput, and the nodes draining or being
replaced. `--once` prints one frame for scripts; otherwise it redraws every few seconds (rich's Live).

Prometheus listens on the head's address only (infra/render/prometheus.py), so it is reached through a Session
Manager port forward to it (infra/ops/forward.py), or at `--prometheus URL` where the operator already reaches it.
Every figure is an instant query of Prometheus' HTTP API
(https://prometheus.io/docs/prometheus/latest/querying/api/#instant-queries); a job's nodes come from the
controller's `hpcc_slurm_job_node_info` (its `slurm_node` label), joined to the nodes' series on their `node`.
Label values are data: shown escaped.
"""

from __future__ import annotations

import json
import math
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

from hpcc_contract import dcgm, metrics
from infra.ops import OpsError, forward
from infra.ops.forward import Forward

# What each column reads, per node (the rows aggregate the nodes'). The GPU quantities are those the head's rules
# record in base units from either generation of DCGM's names (hpcc_contract/dcgm.py RECORDED), shown here as
# utilisation in %, memory in MiB, power in W.
QUERIES = {
    "gpu": f'100 * avg by (node) ({dcgm.UTILIZATION.record}{{job="{metrics.JOB_GPU}"}})',
    "memory": f'sum by (node) ({dcgm.MEMORY_USED.record}{{job="{metrics.JOB_GPU}"}}) / 1048576',
    "power": f'sum by (node) ({dcgm.POWER.record}{{job="{metrics.JOB_GPU}"}})',
    "efa": f'sum by (node) (rate(hpcc_efa_bytes_total{{job="{metrics.JOB_NODE}"}}[2m]))',
}
NODES = f'up{{job="{metrics.JOB_NODE}"}}'  # every target node, with its group
JOBS = "hpcc_slurm_job_node_info"
DRAINING = 'hpcc_slurm_nodes{state=~"drain|down"}'
REPLACING = 'hpcc_controller_nodes{state="replacing"}'
COLUMNS = ("name", "nodes", "gpu", "worst", "memory", "power", "efa", "draining", "replacing")
TIMEOUT = 10.0


def query(base: str, expr: str, fetch: Callable[[str], bytes] | None = None) -> list[tuple[dict[str, str], float]]:
    """An instant query's vector: (labels, value) each."""
    url = f"{base.rstrip('/')}/api/v1/query?query={urllib.parse.quote(expr)}"
    try:
        raw = fetch(url) if fetch else urllib.request.urlopen(url, timeout=TIMEOUT).read()  # noqa: S310 - http(s)
        doc = json.loads(raw)
    except (OSError, ValueError) as e:
        raise OpsError(f"Prometheus at {base} did not answer {expr!r}: {e}") from None
    if doc.get("status") != "success":
        raise OpsError(f"Prometheus at {base} refused {expr!r}: {doc.get('error', doc)}")
    return [(r.get("metric", {}), float(r["value"][1])) for r in doc["data"]["result"]]


@dataclass
class Row:
    name: str
    nodes: list[str] = field(default_factory=list)
    gpu: float = math.nan  # the nodes' mean GPU utilisation, %
    worst: float = math.nan  # the lowest node's, %: the node a synchronous job waits for
    worst_node: str = ""
    memory: float = math.nan  # GPU memory used, MiB, summed
    power: float = math.nan  # W, summed
    efa: float = math.nan  # bytes/s, summed
    draining: int = 0
    replacing: int = 0
    user: str = ""  # a job's
    job_name: str = ""


@dataclass
class Frame:
    groups: list[Row]
    jobs: list[Row]
    at: float


def _fill(row: Row, per_node: dict[str, dict[str, float]]) -> Row:
    gpu = {n: per_node["gpu"][n] for n in row.nodes if n in per_node["gpu"]}
    if gpu:
        row.gpu = sum(gpu.values()) / len(gpu)
        row.worst_node = min(gpu, key=lambda n: (gpu[n], n))
        row.worst = gpu[row.worst_node]
    for column in ("memory", "power", "efa"):
        found = [per_node[column][n] for n in row.nodes if n in per_node[column]]
        if found:
            setattr(row, column, sum(found))
    return row


def read_frame(base: str, fetch: Callable[[str], bytes] | None = None, clock: Callable[[], float] = time.time) -> Frame:
    """One frame: the nodes by group, the running jobs with their nodes, each row's figures."""
    per_node = {c: {m.get(metrics.LABEL_NODE, ""): v for m, v in query(base, q, fetch)} for c, q in QUERIES.items()}
    groups: dict[str, Row] = {}
    for m, _ in query(base, NODES, fetch):
        group = m.get(metrics.LABEL_GROUP) or "(head)"
        groups.setdefault(group, Row(group)).nodes.append(m.get(metrics.LABEL_NODE, ""))
    for m, v in query(base, DRAINING, fetch):
        if m.get("group") in groups:
            groups[m["group"]].draining += int(v)
    for m, v in query(base, REPLACING, fetch):
        if m.get("group") in groups:
            groups[m["group"]].replacing += int(v)
    jobs: dict[str, Row] = {}
    for m, _ in query(base, JOBS, fetch):
        job = jobs.setdefault(m.get("job_id", ""), Row(m.get("job_id", ""), user=m.get("user", "")))
        job.job_name = m.get("job_name", "")
        job.nodes.append(m.get(metrics.JOB_NODE_LABEL, ""))
    for row in (*groups.values(), *jobs.values()):
        row.nodes.sort()
        _fill(row, per_node)
    return Frame(sorted(groups.values(), key=lambda r: r.name), list(jobs.values()), clock())


def sorted_rows(rows: list[Row], by: str) -> list[Row]:
    """By a column, the busiest first (the worst GPU: the lowest first); unknown figures last."""
    if by not in COLUMNS:
        raise OpsError(f"--sort {by}: one of {', '.join(COLUMNS)}")
    if by == "name":
        return sorted(rows, key=lambda r: r.name)
    if by == "nodes":
        return sorted(rows, key=lambda r: (-len(r.nodes), r.name))
    low_first = by == "worst"

    def key(r: Row):
        v = getattr(r, by)
        return (math.isnan(v), v if low_first else -v, r.name)

    return sorted(rows, key=key)


def _pct(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.0f}%"


def _num(v: float, unit: str, scale: float = 1.0) -> str:
    return "-" if math.isnan(v) else f"{v / scale:,.1f} {unit}"


def table(title: str, rows: list[Row], first: str, jobs: bool = False):
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=title, title_justify="left", expand=False)
    for heading in (first, *(["user", "job name"] if jobs else []), "nodes", "GPU", "worst node", "GPU mem",
                    "power", "EFA", *([] if jobs else ["draining", "replacing"])):  # fmt: skip
        t.add_column(heading, justify="left" if heading in (first, "user", "job name", "worst node") else "right")
    for r in rows:
        worst = f"{_pct(r.worst)} {escape(r.worst_node)}" if r.worst_node else "-"
        nodes = ", ".join(r.nodes) if jobs and len(r.nodes) <= 8 else str(len(r.nodes))
        cells = [escape(r.name), *([escape(r.user), escape(r.job_name)] if jobs else []), escape(nodes)]
        cells += [_pct(r.gpu), worst, _num(r.memory, "GiB", 1024), _num(r.power, "kW", 1000), _num(r.efa, "GB/s", 1e9)]
        if not jobs:
            cells += [str(r.draining), str(r.replacing)]
        t.add_row(*cells)
    return t


def render(frame: Frame, sort: str = "name"):
    """The frame as rich tables: the groups, then the running jobs."""
    from rich.console import Group

    stamp = time.strftime("%H:%M:%S", time.localtime(frame.at))
    jobs = table(f"running jobs ({len(frame.jobs)})", sorted_rows(frame.jobs, sort), "job", jobs=True)
    return Group(table(f"hpcc top, {stamp}: groups", sorted_rows(frame.groups, sort), "group"), jobs)


def head_forward(aws, cluster: str, region: str) -> Forward:
    """The port forward to `cluster`'s running head's Prometheus (its private address), ready to enter."""
    return forward.head_forward(
        aws, cluster, region, metrics.PROMETHEUS_PORT, "the head's Prometheus",
        otherwise="; or give --prometheus URL where you reach the head's Prometheus",
    )  # fmt: skip
