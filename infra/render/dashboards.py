"""The head's Grafana dashboards as data (issue 34): four dashboards, each a list of panels, each panel its PromQL.
infra/render/grafana.py turns them into Grafana's JSON model; the tests run every panel's query against the real
Prometheus scraping exporters shaped like the real ones, and `panel_queries` lists them for the box.

Every query reads only series somebody exports or the head records: hpcc's own (hpcc_contract/metrics.py SERIES),
node_exporter's with the collectors hpcc runs (NODE_EXPORTER_SERIES), the GPU quantities the head's rules record
from dcgm-exporter's series under either generation of their names (GPU_SERIES), and Prometheus' own (`up`,
`ALERTS`). Every selector names its scrape job (`{job="node"}`, `{job="gpu"}`), so the metric names are exactly the
words before a `{` (the test reads them so). A job's nodes come from the controller's `hpcc_slurm_job_node_info`,
joined on `node` through its `slurm_node` label as `hpcc top` does; its GPUs also carry dcgm-exporter's `hpc_job`
label (the Slurm job id, when the node's prolog sets it)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpcc_contract import dcgm, metrics
from infra.render.prometheus import EXTERNAL_SERIES, violation_ratio

# The GPU quantities in base units, as the head's recording rules keep them from dcgm-exporter's series, whichever
# generation of DCGM's names a node's exporter serves (hpcc_contract/dcgm.py RECORDED; infra/render/prometheus.py
# gpu_record): utilisation 0-1, memory bytes, W, degrees C, Hz, the last Xid, seconds held down. A panel reads no
# DCGM name itself (tests hold them to it).
GPU_SERIES = tuple(q.record for q in dcgm.RECORDED)
# node_exporter's, from the collectors hpcc_contract/metrics.py NODE_EXPORTER_COLLECTORS turns on (no `cpu`
# collector: CPU is read as load and pressure): filesystem, loadavg, meminfo, pressure, netdev
# (https://github.com/prometheus/node_exporter#collectors).
NODE_EXPORTER_SERIES = (
    "node_filesystem_avail_bytes",
    "node_filesystem_size_bytes",
    "node_load1",
    "node_memory_MemAvailable_bytes",
    "node_memory_MemTotal_bytes",
    "node_pressure_cpu_waiting_seconds_total",
    "node_pressure_memory_waiting_seconds_total",
    "node_pressure_io_waiting_seconds_total",
    "node_network_receive_bytes_total",
    "node_network_transmit_bytes_total",
)
PROMETHEUS_SERIES = ("up", "ALERTS")  # per target; per alerting rule's alert ("Alerting rules", "Inspecting alerts")
EXPORTED = frozenset((*metrics.SERIES, *EXTERNAL_SERIES, *GPU_SERIES, *NODE_EXPORTER_SERIES, *PROMETHEUS_SERIES))

RATE = "$__rate_interval"  # Grafana's: at least four scrape intervals (https://grafana.com/blog/2020/09/28/)
NODE = f'job="{metrics.JOB_NODE}"'
GPU = f'job="{metrics.JOB_GPU}"'
AT_NODE = f'{NODE}, {metrics.LABEL_NODE}="$node"'
GPU_AT_NODE = f'{GPU}, {metrics.LABEL_NODE}="$node"'
JOB_NODES = (  # the job's nodes, one series each with its node in `node` (the head's target label otherwise)
    f'label_replace(hpcc_slurm_job_node_info{{{NODE}, job_id="$job_id"}}, '
    f'"{metrics.LABEL_NODE}", "$1", "{metrics.JOB_NODE_LABEL}", "(.*)")'
)
ALL_JOBS = "|".join(metrics.TARGET_FILES)
EXPORTERS = f"{metrics.JOB_NODE}|{metrics.JOB_GPU}"  # on the members (the head's own Prometheus aside)
DISKS = 'fstype!~"tmpfs|overlay|squashfs"'


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    title: str
    queries: tuple[Query, ...]
    unit: str = "short"  # Grafana's unit ids: percent, percentunit, bytes, mbytes, Bps, watt, celsius, hertz, s
    kind: str = "timeseries"  # or "table": an instant query, one row a series
    width: int = 12  # of Grafana's 24 columns


@dataclass(frozen=True)
class Variable:
    name: str  # $name in the queries
    selector: str  # the series whose `label` values are the choices (Grafana's label_values(selector, label))
    label: str


@dataclass(frozen=True)
class Dashboard:
    uid: str  # also the file's name: <uid>.json
    title: str
    panels: tuple[Panel, ...]
    variables: tuple[Variable, ...] = ()


def panel(
    title: str, *queries: tuple[str, str] | str, unit: str = "short", kind: str = "timeseries", width: int = 12
) -> Panel:
    qs = tuple(Query(q) if isinstance(q, str) else Query(*q) for q in queries)
    return Panel(title, qs, unit, kind, width)


def _of_job(expr: str) -> str:
    return f"{expr} and on ({metrics.LABEL_NODE}) {JOB_NODES}"


def _violation(throttle: dcgm.Quantity, where: str) -> str:
    return violation_ratio(throttle, where, RATE)


CLUSTER = Dashboard(
    "hpcc-cluster",
    "hpcc: cluster overview",
    (
        panel(
            "Nodes by group and Slurm state",
            (f"sum by (group, state) (hpcc_slurm_nodes{{{NODE}}})", "{{group}} {{state}}"),
        ),
        panel("Slurm jobs by state", (f"sum by (state) (hpcc_slurm_jobs{{{NODE}}})", "{{state}}")),
        panel(
            "GPU utilisation by group (mean)",
            (f"avg by (group) (gpu:utilization:ratio{{{GPU}}})", "{{group}}"),
            unit="percentunit",
        ),
        panel(
            "GPU utilisation by group (worst node)",
            (f"min by (group) (avg by (group, node) (gpu:utilization:ratio{{{GPU}}}))", "{{group}}"),
            unit="percentunit",
        ),
        panel(
            "EFA throughput by group",
            (f"sum by (group, direction) (rate(hpcc_efa_bytes_total{{{NODE}}}[{RATE}]))", "{{group}} {{direction}}"),
            unit="Bps",
        ),
        panel("GPU power by group", (f"sum by (group) (gpu:power:watts{{{GPU}}})", "{{group}}"), unit="watt"),
        panel(
            "Alerts firing",
            ('sum by (alertname, severity) (ALERTS{alertstate="firing"})', "{{alertname}} ({{severity}})"),
        ),
        panel("Scrape targets up", (f'sum by (job) (up{{job=~"{ALL_JOBS}"}})', "{{job}}")),
    ),
)

NODE_DASHBOARD = Dashboard(
    "hpcc-node",
    "hpcc: a node",
    (
        panel("GPU utilisation", (f"gpu:utilization:ratio{{{GPU_AT_NODE}}}", "GPU {{gpu}}"), unit="percentunit"),
        panel("GPU memory used", (f"gpu:memory_used:bytes{{{GPU_AT_NODE}}}", "GPU {{gpu}}"), unit="bytes"),
        panel("GPU power", (f"gpu:power:watts{{{GPU_AT_NODE}}}", "GPU {{gpu}}"), unit="watt"),
        panel("GPU temperature", (f"gpu:temperature:celsius{{{GPU_AT_NODE}}}", "GPU {{gpu}}"), unit="celsius"),
        panel("GPU SM clock", (f"gpu:sm_clock:hertz{{{GPU_AT_NODE}}}", "GPU {{gpu}}"), unit="hertz"),
        panel(
            "GPU time held down (power cap, heat)",
            (_violation(dcgm.POWER_THROTTLE, GPU_AT_NODE), "GPU {{gpu}} power"),
            (_violation(dcgm.THERMAL_THROTTLE, GPU_AT_NODE), "GPU {{gpu}} heat"),
            unit="percentunit",
        ),
        panel(
            "GPU Xids (DCGM's last; hpcc's in the last hour)",
            (f"gpu:last_xid:code{{{GPU_AT_NODE}}}", "GPU {{gpu}} last Xid"),
            (f"sum by (gpu, code) (increase(hpcc_gpu_xid_errors_total{{{AT_NODE}}}[1h]))", "GPU {{gpu}} Xid {{code}}"),
        ),
        panel(
            "GPU ECC errors, row remapping pending",
            (f"hpcc_gpu_ecc_errors{{{AT_NODE}}}", "GPU {{gpu}} {{kind}}"),
            (f"hpcc_gpu_row_remap_pending{{{AT_NODE}}}", "GPU {{gpu}} remap pending"),
        ),
        panel(
            "EFA throughput per device",
            (
                f"sum by (device, direction) (rate(hpcc_efa_bytes_total{{{AT_NODE}}}[{RATE}]))",
                "{{device}} {{direction}}",
            ),
            unit="Bps",
        ),
        panel(
            "EFA errors per device",
            (f"sum by (device, counter) (rate(hpcc_efa_errors_total{{{AT_NODE}}}[{RATE}]))", "{{device}} {{counter}}"),
            unit="cps",
        ),
        panel(
            "Disks used",
            (
                f"1 - node_filesystem_avail_bytes{{{AT_NODE}, {DISKS}}} / "
                f"node_filesystem_size_bytes{{{AT_NODE}, {DISKS}}}",
                "{{mountpoint}}",
            ),
            unit="percentunit",
        ),
        panel(
            "Memory used",
            (f"1 - node_memory_MemAvailable_bytes{{{AT_NODE}}} / node_memory_MemTotal_bytes{{{AT_NODE}}}", "memory"),
            unit="percentunit",
        ),
        panel("Load (1 minute)", (f"node_load1{{{AT_NODE}}}", "load1")),
        panel(
            "CPU, memory and I/O stall (pressure)",
            *(
                (f"rate(node_pressure_{r}_waiting_seconds_total{{{AT_NODE}}}[{RATE}])", r)
                for r in ("cpu", "memory", "io")
            ),
            unit="percentunit",
        ),
        panel(
            "Network",
            (f"rate(node_network_receive_bytes_total{{{AT_NODE}}}[{RATE}])", "{{device}} rx"),
            (f"rate(node_network_transmit_bytes_total{{{AT_NODE}}}[{RATE}])", "{{device}} tx"),
            unit="Bps",
        ),
        panel("Health checks (1: passed)", (f"hpcc_health_check_ok{{{AT_NODE}}}", "{{check}}")),
        panel(
            "Health checks: since the last run",
            (f"time() - hpcc_health_check_timestamp_seconds{{{AT_NODE}}}", "{{check}}"),
            unit="s",
        ),
    ),
    (Variable("node", f"up{{{NODE}}}", metrics.LABEL_NODE),),
)

JOB = Dashboard(
    "hpcc-job",
    "hpcc: a job",
    (
        panel("The job's nodes", (f'hpcc_slurm_job_node_info{{{NODE}, job_id="$job_id"}}', ""), kind="table", width=24),
        panel(
            "GPU utilisation per node",
            (_of_job(f"avg by (node) (gpu:utilization:ratio{{{GPU}}})"), "{{node}}"),
            unit="percentunit",
        ),
        panel(
            "EFA throughput per node",
            (_of_job(f"sum by (node) (rate(hpcc_efa_bytes_total{{{NODE}}}[{RATE}]))"), "{{node}}"),
            unit="Bps",
        ),
        panel(
            "Its GPUs (dcgm-exporter's hpc_job)",
            (f'gpu:utilization:ratio{{{GPU}, hpc_job="$job_id"}}', "{{node}} GPU {{gpu}}"),
            unit="percentunit",
        ),
        panel(
            "Worst node's GPU utilisation",
            (f"min({_of_job(f'avg by (node) (gpu:utilization:ratio{{{GPU}}})')})", "worst"),
            unit="percentunit",
        ),
        panel(
            "GPU memory per node",
            (_of_job(f"sum by (node) (gpu:memory_used:bytes{{{GPU}}})"), "{{node}}"),
            unit="bytes",
        ),
        panel(
            "GPU power per node",
            (_of_job(f"sum by (node) (gpu:power:watts{{{GPU}}})"), "{{node}}"),
            unit="watt",
        ),
        panel(
            "GPU held down by its power cap (the node's worst GPU)",
            (_of_job(f"max by (node) ({_violation(dcgm.POWER_THROTTLE, GPU)})"), "{{node}}"),
            unit="percentunit",
        ),
        panel(
            "EFA errors per node",
            (_of_job(f"sum by (node) (rate(hpcc_efa_errors_total{{{NODE}}}[{RATE}]))"), "{{node}}"),
            unit="cps",
        ),
    ),
    (Variable("job_id", f"hpcc_slurm_job_node_info{{{NODE}}}", "job_id"),),
)

FLEET = Dashboard(
    "hpcc-fleet",
    "hpcc: fleet health and controller actions",
    (
        panel(
            "Nodes failing each health check",
            (f"sum by (check) (hpcc_health_check_ok{{{NODE}}} == bool 0)", "{{check}}"),
        ),
        panel("Failing health checks", (f"hpcc_health_check_ok{{{NODE}}} == 0", ""), kind="table"),
        panel(
            "Replacements by group and reason (last hour)",
            (
                f"sum by (group, reason) (increase(hpcc_controller_replacements_total{{{NODE}}}[1h]))",
                "{{group}} {{reason}}",
            ),
        ),
        panel(
            "Controller actions by kind",
            (f"sum by (kind) (increase(hpcc_controller_actions_total{{{NODE}}}[{RATE}]))", "{{kind}}"),
        ),
        panel("Controller loop", (f"hpcc_controller_loop_seconds{{{NODE}}}", "seconds a loop"), unit="s"),
        panel("Controller loops a minute", (f"rate(hpcc_controller_loops_total{{{NODE}}}[{RATE}]) * 60", "loops")),
        panel("Spares held", (f"hpcc_controller_spares{{{NODE}}}", "{{group}}")),
        panel(
            "Ledger: nodes by group and state",
            (f"sum by (group, state) (hpcc_controller_nodes{{{NODE}}})", "{{group}} {{state}}"),
        ),
        panel(
            "Membership generation: published, and the oldest a node applied",
            (f"max(hpcc_controller_membership_generation{{{NODE}}})", "published"),
            (f"min(hpcc_membership_generation{{{NODE}}})", "oldest applied"),
        ),
        panel(
            "Nodes per bundle generation",
            (f'count_values("generation", hpcc_bundle_generation{{{NODE}}})', "generation {{generation}}"),
        ),
        panel(
            "Alerts the controller raised (last hour)",
            (f"increase(hpcc_controller_alerts_total{{{NODE}}}[1h])", "alerts"),
        ),
        panel(
            "Exporters not answering",
            (f'sum by (job) (up{{job=~"{EXPORTERS}"}} == bool 0)', "{{job}}"),
        ),
    ),
)

DASHBOARDS = (CLUSTER, NODE_DASHBOARD, JOB, FLEET)
_VARIABLE = re.compile(r"\$(\w+)")


def substitute(expr: str, values: dict[str, str]) -> str:
    """The query with Grafana's variables ($node, $job_id, $__rate_interval) replaced; others ($1) kept."""
    return _VARIABLE.sub(lambda m: values.get(m.group(1), m.group(0)), expr)


def panel_queries(node: str, job_id: str, rate_interval: str = "2m") -> list[tuple[str, str, str]]:
    """(dashboard uid, panel title, PromQL) of every query of every panel, the variables filled in: what the tests
    run against the real Prometheus, and the box against the head's."""
    values = {"node": node, "job_id": job_id, "__rate_interval": rate_interval}
    return [(d.uid, p.title, substitute(q.expr, values)) for d in DASHBOARDS for p in d.panels for q in p.queries]


def metric_names(expr: str) -> set[str]:
    """The series a query reads: every selector names its job, so the names are the words before a `{`."""
    return set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", expr))
