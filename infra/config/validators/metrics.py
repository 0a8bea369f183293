"""The `observability:` section's values and rules (infra/config/observability.py is its model): Prometheus durations
read and spelled canonically, the Amazon Managed Service for Prometheus workspace an ARN names and its remote write
endpoint, and the rules over them (`RULES`, run with the other config rules by check.py)."""

from __future__ import annotations

import re
from typing import NamedTuple

from infra.config.validators.findings import ERROR, WARNING, Finding

OBSERVABILITY = "cluster.observability"
METRICS_SCRAPE_INTERVAL_DEFAULT = "30s"
METRICS_RETENTION_DEFAULT = "15d"  # Prometheus's own default (--storage.tsdb.retention.time)
# A Region (us-east-1, ap-southeast-2, us-gov-west-1) and a workspace id, as AMP spells them ("Find your workspace
# details": https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-find-workspace-details.html).
AWS_REGION = r"[a-z]{2}(-[a-z]{1,10}){1,2}-[1-9]"
WORKSPACE_ID = r"ws-[0-9A-Za-z][-.0-9A-Z_a-z]{0,60}"

# --- durations ------------------------------------------------------------------------------------------------------
# Prometheus's <duration>: units from years to milliseconds, each at most once and in that order, a year 365 days and a
# week 7 (https://prometheus.io/docs/prometheus/latest/configuration/configuration/, "Configuration file").
UNITS = (
    ("y", 365 * 86_400_000),
    ("w", 7 * 86_400_000),
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
)
DURATION = re.compile("".join(rf"(?:(?P<{u}>[0-9]+){u})?" for u, _ in UNITS))
DURATION_RULE = "a Prometheus duration: a number and a unit of ms, s, m, h, d, w or y, e.g. 30s, 1h30m, 15d"


def duration_ms(text: str) -> int | None:
    """Milliseconds of a Prometheus duration ("0" is zero, as Prometheus reads it), or None when it is not one."""
    if text == "0":
        return 0
    m = DURATION.fullmatch(text)
    if not text or m is None:
        return None
    return sum(int(m.group(u)) * ms for u, ms in UNITS if m.group(u))


def duration_problem(text: str) -> str | None:
    """Why `text` is not a duration (the caller shows it), or None."""
    if duration_ms(text) is not None:
        return None
    if re.fullmatch(r"[0-9]+", text):
        return f"has no unit: write {text}s for seconds ({DURATION_RULE})"
    return f"is not {DURATION_RULE}; larger units first, without spaces"


def canonical(text: str) -> str:
    """The one spelling the nodes get (hpcc_contract/settings.py DURATION): a whole number of the largest unit that
    divides it, `1h30m` as `90m`, `120s` as `2m`."""
    ms = duration_ms(text)
    if not ms:
        raise ValueError(f"{text!r} is not a positive duration")
    unit, size = next((u, size) for u, size in UNITS if ms % size == 0)
    return f"{ms // size}{unit}"


def unless_default(text: str, default: str) -> str | None:
    """`text` canonically, or None when it is the default's duration (the settings leave it out)."""
    return None if duration_ms(text) == duration_ms(default) else canonical(text)


# --- sizes ------------------------------------------------------------------------------------------------------------
# --storage.tsdb.retention.size: "a unit is required, supported units: B, KB, MB, GB, TB, PB, EB", powers of 2
# (https://prometheus.io/docs/prometheus/latest/storage/#operational-aspects).
SIZE_UNITS = ("B", "KB", "MB", "GB", "TB", "PB", "EB")
SIZE = re.compile(r"(?P<n>[1-9][0-9]{0,12})(?P<unit>" + "|".join(SIZE_UNITS[::-1]) + ")")
SIZE_RULE = "a size with a unit of B, KB, MB, GB, TB, PB or EB (powers of 2), e.g. 80GB"
# Without retentionSize Prometheus may take 40% of the head's root volume: the OS, the bundles, the logs, Slurm's and
# the controller's state keep the rest, and the time retention still applies first.
RETENTION_SIZE_SHARE = (2, 5)
RETENTION_SIZE_MAX_SHARE = (4, 5)  # more than this and the head's disk fills before Prometheus deletes a block


def size_bytes(text: str) -> int | None:
    m = SIZE.fullmatch(text)
    return int(m["n"]) * 1024 ** SIZE_UNITS.index(m["unit"]) if m else None


def size_problem(text: str) -> str | None:
    if size_bytes(text) is not None:
        return None
    if re.fullmatch(r"[0-9]+", text):
        return f"has no unit: write {text}GB for gibibytes ({SIZE_RULE})"
    return f"is not {SIZE_RULE}; no spaces, no decimals (GiB-style names are not Prometheus's)"


def default_retention_size(root_volume_gib: int) -> str:
    return f"{max(1, root_volume_gib * RETENTION_SIZE_SHARE[0] // RETENTION_SIZE_SHARE[1])}GB"


# --- the workspace ----------------------------------------------------------------------------------------------------
# A workspace's ARN, arn:aws:aps:<region>:<account>:workspace/<id> (Amazon Managed Service for Prometheus API
# Reference, WorkspaceDescription: https://docs.aws.amazon.com/prometheus/latest/APIReference/API_WorkspaceDescription.html),
# in the aws partition, the cluster roles' own; its Region and id as the settings' endpoint takes them.
WORKSPACE_ARN = re.compile(
    rf"arn:aws:aps:(?P<region>{AWS_REGION}):(?P<account>[0-9]{{12}}):workspace/(?P<id>{WORKSPACE_ID})"
)
ARN_FORM = "arn:aws:aps:<region>:<account>:workspace/ws-... (`aws amp list-workspaces` lists them)"


class Workspace(NamedTuple):
    region: str
    account: str
    id: str
    arn: str

    @property
    def remote_write_url(self) -> str:
        """Its remote write endpoint (AMP User Guide, "Find your workspace details":
        https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-find-workspace-details.html)."""
        return f"https://aps-workspaces.{self.region}.amazonaws.com/workspaces/{self.id}/api/v1/remote_write"


def workspace(arn: str) -> Workspace | None:
    m = WORKSPACE_ARN.fullmatch(arn)
    return Workspace(m["region"], m["account"], m["id"], arn) if m else None


def workspace_arn_problem(arn: str) -> str | None:
    """Why `arn` names no workspace the head can write to (the caller shows it), or None."""
    if workspace(arn) is not None:
        return None
    parts = arn.split(":", 5)
    if arn.startswith("https://"):
        return f"give the workspace's ARN, not a URL (hpcc derives the remote write URL from it): {ARN_FORM}"
    if len(parts) < 6 or parts[0] != "arn":
        return f"is not an ARN; give the workspace's ARN, {ARN_FORM}"
    if parts[1] != "aws":
        return f"is in the {parts[1]} partition, the cluster's roles in aws: give {ARN_FORM}"
    if parts[2] != "aps" or not parts[5].startswith("workspace/"):
        return (
            f"is not an Amazon Managed Service for Prometheus workspace (service {parts[2]}, resource "
            f"{parts[5].split('/')[0]}); give {ARN_FORM}"
        )
    return f"is not a workspace's ARN (a region, a 12-digit account, an id ws-...): {ARN_FORM}"


# --- the rules --------------------------------------------------------------------------------------------------------
# At least 5 s: each scrape reads every node's exporters; at most 2 m, so that one missed scrape still leaves a sample
# within Prometheus's 5-minute lookback, past which a series is stale and graphs and alerts go blank
# (https://prometheus.io/docs/prometheus/latest/querying/basics/#staleness).
SCRAPE_BOUNDS = ("5s", "2m")
# At least 2 h: Prometheus cuts its storage into two-hour blocks and keeps the newest in memory
# (https://prometheus.io/docs/prometheus/latest/storage/), so a shorter retention keeps no less and only misleads;
# it also holds at least 60 scrapes at the longest interval. At most 10 y: the head's root volume holds them all.
RETENTION_BOUNDS = ("2h", "10y")


def _ms(text: str) -> int:
    """A duration the model has checked (its field validators), in milliseconds."""
    ms = duration_ms(text)
    if ms is None:
        raise ValueError(f"{text!r}: {DURATION_RULE}")
    return ms


def _outside(text: str, bounds: tuple[str, str]) -> bool:
    return not _ms(bounds[0]) <= _ms(text) <= _ms(bounds[1])


def metrics_scrape_interval(cfg):
    interval = cfg.cluster.observability.scrape_interval
    if _outside(interval, SCRAPE_BOUNDS):
        yield Finding(
            ERROR,
            f"{OBSERVABILITY}.scrapeInterval",
            f"{interval} is outside {SCRAPE_BOUNDS[0]}-{SCRAPE_BOUNDS[1]}: shorter reads every node's exporters too "
            "often, longer leaves gaps past Prometheus's 5-minute lookback after one missed scrape; give "
            f"{SCRAPE_BOUNDS[0]} to {SCRAPE_BOUNDS[1]} (default {METRICS_SCRAPE_INTERVAL_DEFAULT})",
        )


def metrics_retention(cfg):
    retention = cfg.cluster.observability.retention
    if not _outside(retention, RETENTION_BOUNDS):
        return
    if _ms(retention) < _ms(RETENTION_BOUNDS[0]):
        why = "Prometheus keeps its newest two-hour block whatever the retention, so a shorter one keeps no less"
    else:
        why = "the head's root volume holds every sample; keep a long history in a remoteWrite workspace instead"
    yield Finding(
        ERROR,
        f"{OBSERVABILITY}.retention",
        f"{retention} is outside {RETENTION_BOUNDS[0]}-{RETENTION_BOUNDS[1]}: {why}; give {RETENTION_BOUNDS[0]} to "
        f"{RETENTION_BOUNDS[1]} (default {METRICS_RETENTION_DEFAULT})",
    )


def metrics_retention_size(cfg):
    c = cfg.cluster
    size = c.observability.retention_size
    root = c.head_node.root_volume_gib
    if size is None or not c.metrics_on:
        return
    most = root * RETENTION_SIZE_MAX_SHARE[0] // RETENTION_SIZE_MAX_SHARE[1]
    if (size_bytes(size) or 0) > most * 1024**3:
        yield Finding(
            ERROR,
            f"{OBSERVABILITY}.retentionSize",
            f"{size} is more than {most}GB, 80% of the head's root volume (headNode.rootVolumeGiB: {root}): the disk "
            f"fills before Prometheus deletes its oldest block, and the head stops; give at most {most}GB, raise "
            f"headNode.rootVolumeGiB, or leave it out ({default_retention_size(root)} here)",
        )


def metrics_have_packages(cfg):
    """Issue 34's choice for Amazon Linux 2023: refused here, not an upstream release fetched at boot. The nodes
    install Prometheus and node_exporter from the distribution (templates/steps/metrics.sh.j2); AL2023 packages
    neither, and a binary downloaded by the boot would be a second supply chain for hpcc to pin, verify and patch."""
    c = cfg.cluster
    if c.metrics_on and c.image.amazon_linux:
        yield Finding(
            ERROR,
            f"{OBSERVABILITY}.enabled",
            "metrics need the distribution's prometheus and prometheus-node-exporter packages, which Amazon Linux "
            "2023 does not have; use an Ubuntu DLAMI (image.family: base-oss-nvidia-driver-gpu-ubuntu-22.04 or "
            "-24.04), or set observability.enabled: false",
        )


def metrics_workspace_region(cfg):
    """AMP takes remote writes from other Regions (AMP User Guide, "Use cross Region workspaces":
    https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-send-to-multiple-workspaces.html), so another
    Region's workspace is a warning, not an error: every sample then crosses Regions."""
    remote = cfg.cluster.observability.remote_write
    ws = workspace(remote.workspace_arn) if remote else None
    if ws is not None and ws.region != cfg.region:
        yield Finding(
            WARNING,
            f"{OBSERVABILITY}.remoteWrite.workspaceArn",
            f"the workspace is in {ws.region}, the cluster in aws:region {cfg.region}: every sample would cross "
            f"Regions (inter-Region transfer is charged, and either Region's trouble stops the writes); use a "
            f"workspace in {cfg.region} unless a copy elsewhere is what you want",
        )


def metrics_remote_write_unused(cfg):
    c = cfg.cluster
    if c.observability.remote_write is not None and not c.metrics_on:
        yield Finding(
            WARNING,
            f"{OBSERVABILITY}.remoteWrite",
            "has no effect with metrics off (observability.enabled: false, or its default without scheduler: "
            "slurm), and the head gets no permission to write: set observability.enabled: true, or remove remoteWrite",
        )


RULES = [
    metrics_scrape_interval,
    metrics_retention,
    metrics_retention_size,
    metrics_have_packages,
    metrics_workspace_region,
    metrics_remote_write_unused,
]
