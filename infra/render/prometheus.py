"""The head's Prometheus (issue 34): its configuration, its command line and its alert rules, as text.

Prometheus scrapes one job per file of file-based discovery (hpcc_contract/metrics.py's TARGET_FILES, written by the
controller from the membership it publishes) and itself; it may remote-write to Amazon Managed Service for
Prometheus, signed with SigV4 by the head's instance role. The rules watch the trends a health check's one verdict
cannot see (a GPU throttled for minutes, EFA errors trickling in, a disk filling, an exporter gone), and each says
with hpcc_contract's ALERT_ACTION_LABEL what the controller may do: drain the node when idle, or record an event.

Configuration reference: https://prometheus.io/docs/prometheus/latest/configuration/configuration/
Alerting rules: https://prometheus.io/docs/prometheus/latest/configuration/alerting_rules/
No value a user writes reaches a relabeling rule or an expression: the only inputs are durations, an address, and
the remote-write URL and region, each checked before it is written."""

from __future__ import annotations

import ipaddress
import posixpath
import re
from dataclasses import dataclass

import yaml

from hpcc_contract import dcgm, metrics
from infra.config.validators.metrics import size_bytes

CONFIG_DIR = posixpath.dirname(metrics.TARGETS_DIR)  # /etc/hpcc/prometheus: the targets beside the config
CONFIG_PATH = posixpath.join(CONFIG_DIR, "prometheus.yml")
RULES_PATH = posixpath.join(CONFIG_DIR, "rules.yml")
DATA_PATH = "/var/lib/prometheus/metrics2"  # Debian's prometheus package keeps its TSDB here
FILE_SD_REFRESH = "1m"  # file_sd watches the files (inotify); the refresh is only its fallback re-read
CLUSTER_LABEL = "cluster"  # an external label: clusters writing into one workspace keep their series apart

# Prometheus's durations ("<duration>": configuration page, "Configuration file"): units from largest to smallest.
DURATION = r"(?:[0-9]+y)?(?:[0-9]+w)?(?:[0-9]+d)?(?:[0-9]+h)?(?:[0-9]+m)?(?:[0-9]+s)?(?:[0-9]+ms)?"
# Amazon Managed Service for Prometheus's remote-write endpoint ("Set up metrics ingestion from an Amazon EC2
# instance using remote write": https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-onboard-ingest-metrics-remote-write-EC2.html;
# RemoteWrite API: https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-APIReference-RemoteWrite.html).
AMP_URL = r"https://aps-workspaces\.([a-z0-9-]+)\.amazonaws\.com/workspaces/ws-[A-Za-z0-9-]+/api/v1/remote_write"
REGION = r"[a-z]{2}(?:-[a-z]+)+-[0-9]+"


def check_duration(value: str, what: str) -> str:
    """A non-zero Prometheus duration, else ValueError naming the field."""
    if not value or re.fullmatch(DURATION, value) is None or not re.search(r"[1-9]", value):
        raise ValueError(f"{what}: {value!r} is not a Prometheus duration such as 30s, 5m or 15d")
    return value


def web_address(address: str) -> str:
    """`<ip>:9090` on the head's own address: never 0.0.0.0 or [::], so no other interface serves the API."""
    ip = ipaddress.ip_address(address)
    if ip.is_unspecified:
        raise ValueError(f"Prometheus listens on the head's own address, not {address}")
    host = f"[{ip}]" if ip.version == 6 else str(ip)
    return f"{host}:{metrics.PROMETHEUS_PORT}"


def remote_write_region(url: str, region: str | None) -> str:
    """The workspace's region, which SigV4 signs for: given, or read from an AMP endpoint's host; both must agree."""
    if not url.startswith("https://"):
        raise ValueError(f"remote write: {url!r} is not https")
    found = re.fullmatch(AMP_URL, url)
    in_url = found.group(1) if found else None
    region = region or in_url
    if region is None:
        raise ValueError(f"remote write: {url!r} is no AMP endpoint to read the region from; give the region")
    if re.fullmatch(REGION, region) is None or (in_url is not None and in_url != region):
        raise ValueError(f"remote write: region {region!r} does not sign for {url!r}")
    return region


def file_sd_job(job: str, targets_dir: str) -> dict:
    """One scrape job reading its targets from its own file ("file_sd_config" on the configuration page)."""
    files = [posixpath.join(targets_dir, metrics.TARGET_FILES[job])]
    return {"job_name": job, "file_sd_configs": [{"files": files, "refresh_interval": FILE_SD_REFRESH}]}


def remote_write(url: str, region: str | None) -> dict:
    """SigV4 with no keys: Prometheus takes the instance role's credentials from the default chain ("sigv4" under
    "remote_write" on the configuration page; AMP's EC2 page above, the role with AmazonPrometheusRemoteWriteAccess)."""
    return {"url": url, "sigv4": {"region": remote_write_region(url, region)}}


def prometheus_config(
    scrape_interval: str = "30s",
    evaluation_interval: str | None = None,
    remote_write_url: str | None = None,
    region: str | None = None,
    cluster: str | None = None,
    rules_path: str = RULES_PATH,
    targets_dir: str = metrics.TARGETS_DIR,
) -> str:
    """prometheus.yml for the head: the intervals, the rules file, a job per targets file (the self-scrape among
    them: only the running head knows its address, so the controller writes it with the others), the remote write
    when a URL is given. honor_labels stays false (the default), so a series cannot overwrite its target's node,
    group or instance_id: Prometheus keeps its own and renames the series' (exported_node)."""
    glob: dict = {
        "scrape_interval": check_duration(scrape_interval, "scrape interval"),
        "evaluation_interval": check_duration(evaluation_interval or scrape_interval, "evaluation interval"),
    }
    if cluster is not None:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9-]*", cluster):
            raise ValueError(f"cluster {cluster!r} is not a cluster name")
        glob["external_labels"] = {CLUSTER_LABEL: cluster}
    doc: dict = {
        "global": glob,
        "rule_files": [rules_path],
        "scrape_configs": [file_sd_job(job, targets_dir) for job in metrics.TARGET_FILES],
    }
    if remote_write_url is not None:
        doc["remote_write"] = [remote_write(remote_write_url, region)]
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=1000)


def prometheus_flags(
    retention: str, retention_size: str, config_path: str = CONFIG_PATH, data_path: str = DATA_PATH
) -> list[str]:
    """The command line ("prometheus --help"; storage: https://prometheus.io/docs/prometheus/latest/storage/).

    No --web.enable-lifecycle: it would let anything that reaches port 9090 (every node of the cluster, by the head's
    security group) POST /-/quit or /-/reload. The targets need no reload (file_sd re-reads its files on change), and a
    new configuration or rules file comes with a new bundle, applied with SIGHUP (Debian's unit: `systemctl reload
    prometheus`), which Prometheus honours without the flag (the configuration page's opening paragraphs)."""
    return [
        f"--config.file={config_path}",
        f"--storage.tsdb.path={data_path}",
        f"--storage.tsdb.retention.time={check_duration(retention, 'retention')}",
        f"--storage.tsdb.retention.size={check_size(retention_size)}",  # whichever is reached first
    ]


def check_size(value: str) -> str:
    """A Prometheus size (512MB, 80GB), else ValueError: it goes on the command line as it is."""
    if size_bytes(value) is None:  # the grammar's one spelling: infra/config/validators/metrics.py SIZE
        raise ValueError(f"retention size: {value!r} is not a Prometheus size such as 80GB")
    return value


def listen_flag(address: str) -> str:
    """The flag that binds Prometheus to the head's own address (web_address). Only the running head knows it: the
    head's metrics step spells the same flag with its $HPCC_IP (templates/steps/metrics.sh.j2; a test renders both)."""
    return f"--web.listen-address={web_address(address)}"


# -- alert rules ----------------------------------------------------------------------------------------------------

ALERT_GPU_THERMAL = "HpccGpuThermalThrottling"
ALERT_GPU_POWER = "HpccGpuPowerThrottling"
ALERT_EFA_ERRORS = "HpccEfaErrorsRising"
ALERT_ROOT_DISK = "HpccRootDiskFilling"
ALERT_TARGET_DOWN = "HpccTargetDown"
RULE_GROUP = "hpcc"
SEVERITY_CRITICAL, SEVERITY_WARNING = "critical", "warning"

# The series the rules read that others export, each where it is documented (hpcc's own are metrics.SERIES).
EXTERNAL_SERIES = (
    # Prometheus itself, for every target it scrapes ("Jobs and instances", automatically generated series:
    # https://prometheus.io/docs/concepts/jobs_instances/).
    "up",
    # node_exporter's filesystem collector, on by default; its own mixin's NodeFilesystemSpaceFillingUp reads these
    # three (https://github.com/prometheus/node_exporter, docs/node-mixin/alerts/alerts.libsonnet).
    "node_filesystem_avail_bytes",
    "node_filesystem_size_bytes",
    "node_filesystem_readonly",
    # dcgm-exporter's series, under either generation's names: the recording rules read them (gpu_record) and
    # everything else reads what they record (hpcc_contract/dcgm.py RECORDED; a test holds the names to that file).
    *(name for q in dcgm.RECORDED for name in (q.legacy, q.renamed)),
)

# The EFA counters that rise when this node's side of the fabric fails: the health agent drains on these only
# (hpcc_node/health/devices.py LOCAL_ERROR_LIMITS). The remote ones (a peer not answering) would drain every healthy
# peer of one bad node, so no rule reads them.
EFA_LOCAL_COUNTERS = ("rdma_read_wr_err", "rdma_write_wr_err", "rx_drops")


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str  # how long the expression holds before the alert fires: what makes it a trend, not a blip
    severity: str
    action: str  # one of metrics.ALERT_ACTIONS
    summary: str  # the evidence, a template over $labels and $value


def violation_ratio(throttle: dcgm.Quantity, selector: str = f'job="{metrics.JOB_GPU}"', window: str = "5m") -> str:
    """The share of the last `window` the GPU was throttled: the rate of a counter of seconds (the alert rules and
    the dashboards both read it so). PromQL has no bitwise operators, so the clock-event reasons' bitmask is no use
    here; these counters are."""
    return f"rate({throttle.record}{{{selector}}}[{window}])"


def gpu_record(quantity: dcgm.Quantity) -> dict:
    """A recording rule (https://prometheus.io/docs/prometheus/latest/configuration/recording_rules/): the quantity
    in base units from the name its node's exporter serves. `or` keeps the left side's series and adds the right's
    whose labels, the name aside, no left one has (https://prometheus.io/docs/prometheus/latest/querying/operators/,
    "Logical/set binary operators"), so a node serving both names is recorded once. The labels stay: node, group,
    instance_id, gpu, UUID, hpc_job."""
    selector = f'{{job="{metrics.JOB_GPU}"}}'
    legacy = f"{quantity.legacy}{selector}{quantity.to_base}"
    return {"record": quantity.record, "expr": f"{legacy} or {quantity.renamed}{selector}"}


def _gpu_thermal() -> Alert:
    ratio = violation_ratio(dcgm.THERMAL_THROTTLE)
    return Alert(
        ALERT_GPU_THERMAL,
        f"{ratio} > 0.1",  # a cooled data-centre GPU is held down by heat for no part of the time
        "10m",
        SEVERITY_CRITICAL,
        metrics.ALERT_ACTION_DRAIN,
        "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) on {{ $labels.node }} was held down by heat "
        "{{ $value | humanizePercentage }} of the last 5 minutes, for 10 minutes",
    )


def _gpu_power() -> Alert:
    """The power cap holds every GPU of a busy training node down some of the time, by design; what marks a bad GPU
    is being held down much more than the others of its node, which run the same job. (A node of one GPU, or one
    whose GPUs run unlike jobs, has no such baseline: this alert says nothing of them.)"""
    ratio = violation_ratio(dcgm.POWER_THROTTLE)
    node = f"{metrics.LABEL_NODE}, {metrics.LABEL_INSTANCE_ID}"
    median = f"quantile by ({node}) (0.5, {ratio})"
    return Alert(
        ALERT_GPU_POWER,
        f"{ratio} > 0.5 and ({ratio} - on ({node}) group_left () {median}) > 0.25",
        "10m",
        SEVERITY_CRITICAL,
        metrics.ALERT_ACTION_DRAIN,
        "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) on {{ $labels.node }} was held down by its power cap "
        "{{ $value | humanizePercentage }} of the last 5 minutes, far more than its node's other GPUs, for 10 minutes",
    )


def _efa_errors() -> Alert:
    counters = "|".join(EFA_LOCAL_COUNTERS)
    return Alert(
        ALERT_EFA_ERRORS,
        f'increase(hpcc_efa_errors_total{{job="{metrics.JOB_NODE}", counter=~"{counters}"}}[10m]) > 0',
        "30m",  # errors in every 10-minute window for 30 minutes: a trickle the per-check limit lets through
        SEVERITY_CRITICAL,
        metrics.ALERT_ACTION_DRAIN,
        "EFA device {{ $labels.device }} on {{ $labels.node }}: {{ $labels.counter }} rose by {{ $value | humanize }} "
        "in the last 10 minutes, and in every 10 minutes for the last 30",
    )


def _root_disk() -> Alert:
    """node_exporter's own rule (NodeFilesystemSpaceFillingUp), on the root file system, with a training node's
    horizon: checkpoints and core dumps fill a disk in hours, not days."""
    sel = f'{{job="{metrics.JOB_NODE}", mountpoint="/"}}'
    return Alert(
        ALERT_ROOT_DISK,
        f"node_filesystem_avail_bytes{sel} / node_filesystem_size_bytes{sel} < 0.25"
        f" and predict_linear(node_filesystem_avail_bytes{sel}[1h], 4 * 3600) < 0"
        f" and node_filesystem_readonly{sel} == 0",
        "15m",
        SEVERITY_WARNING,
        metrics.ALERT_ACTION_EVENT,
        "the root file system of {{ $labels.node }} has {{ $value | humanizePercentage }} free and, at the last "
        "hour's rate, fills within 4 hours",
    )


def _target_down() -> Alert:
    """The targets are written from the membership, so a target is a member: an exporter down for minutes on a
    member is news (the node may be fine; its health verdicts decide that), never a reason to act by itself."""
    jobs = "|".join(job for job in metrics.TARGET_FILES if job != metrics.JOB_PROMETHEUS)  # the exporters on members
    return Alert(
        ALERT_TARGET_DOWN,
        f'up{{job=~"{jobs}"}} == 0',
        "5m",
        SEVERITY_WARNING,
        metrics.ALERT_ACTION_EVENT,
        "the {{ $labels.job }} exporter on {{ $labels.node }} ({{ $labels.instance }}) has not answered a scrape "
        "for 5 minutes while the node is in the membership",
    )


def alerts() -> tuple[Alert, ...]:
    return (_gpu_thermal(), _gpu_power(), _efa_errors(), _root_disk(), _target_down())


def rule(alert: Alert) -> dict:
    labels = {"severity": alert.severity, metrics.ALERT_ACTION_LABEL: alert.action}
    return {
        "alert": alert.name,
        "expr": alert.expr,
        "for": alert.for_,
        "labels": labels,
        "annotations": {"summary": alert.summary, "value": "{{ $value }}", metrics.LABEL_NODE: "{{ $labels.node }}"},
    }


def alert_rules() -> str:
    """The rules file (https://prometheus.io/docs/prometheus/latest/configuration/recording_rules/, "Syntax"): the
    GPU records first, in the alerts' own group, whose rules run in order, so an alert reads this evaluation's."""
    records = [gpu_record(q) for q in dcgm.RECORDED]
    doc = {"groups": [{"name": RULE_GROUP, "rules": [*records, *(rule(a) for a in alerts())]}]}
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=1000)
