"""What crosses between the nodes' exporters, the controller and the head's Prometheus (issue 34): the ports, the
file-based discovery files the controller writes from the membership it publishes, the textfile collector's
directory and files, and hpcc's own series with their labels. Standard library only, like the rest of the contract:
the program renders the head's Prometheus configuration and rules from these names (infra/render/), the node side
(hpcc_node/) writes the targets and the series.

A node is a scrape target from when the membership has it `ready` until it leaves it (TARGETED): the targets are a
function of the membership, so a replaced node's target goes with the generation that drops it, and its
replacement's comes with the one that names it ready. Prometheus reads the files itself ("file_sd_config":
https://prometheus.io/docs/prometheus/latest/configuration/configuration/#file_sd_config): a JSON list of
`{"targets": ["<host>:<port>"], "labels": {...}}`, reloaded on change, no restart."""

from __future__ import annotations

import re
from typing import Dict, Tuple

# Exporters' own default ports: prometheus-node-exporter's :9100 and dcgm-exporter's :9400 (NVIDIA's
# dcgm-exporter README, "Quickstart": https://github.com/NVIDIA/dcgm-exporter). Prometheus on the head listens on
# the head's own address only (its security group admits the cluster's nodes, never the internet).
NODE_EXPORTER_PORT = 9100
DCGM_EXPORTER_PORT = 9400
PROMETHEUS_PORT = 9090

# The head's file-based discovery: one file per scrape job, written whole (a temporary file renamed over it, so
# Prometheus never reads half a list).
TARGETS_DIR = "/etc/hpcc/prometheus/targets"
JOB_NODE = "node"  # node_exporter on every targeted node and the head: host, disk, network, hpcc's textfile series
JOB_GPU = "gpu"  # dcgm-exporter on the targeted nodes of groups with GPUs
JOB_PROMETHEUS = "prometheus"  # Prometheus itself on the head's address (only the running head knows it)
TARGET_FILES: Dict[str, str] = {JOB_NODE: "nodes.json", JOB_GPU: "gpus.json", JOB_PROMETHEUS: "prometheus.json"}
TARGETED = ("ready", "draining")  # membership states whose nodes are scraped (booting: not yet; failed: gone)

# The labels every target carries, so a series names its node without a join on addresses.
LABEL_NODE = "node"  # head, gpu-007
LABEL_GROUP = "group"  # its node group ("" for the head)
LABEL_INSTANCE_ID = "instance_id"  # its EC2 instance: the replacement of gpu-007 is a new series, not the old one's

# node_exporter's textfile collector ("Textfile Collector": https://github.com/prometheus/node_exporter#textfile-collector)
# reads every *.prom file in this directory at each scrape; hpcc's node side writes its series there, so it stays
# standard library (no client library, no port of its own).
TEXTFILE_DIR = "/var/lib/hpcc/metrics"
TEXTFILE_HEALTH = "hpcc_health.prom"  # the health agent's raw counters and verdicts (hpcc_node/health/)
TEXTFILE_AGENT = "hpcc_agent.prom"  # the node agent: bundle and membership generations
TEXTFILE_CONTROLLER = "hpcc_controller.prom"  # the controller on the head: its loop, actions, ledger

# hpcc's own series: name -> (type, help). One place for the names: the writers, the rules and the dashboards use
# these, and a test holds each rule and panel to a series somebody exports.
PREFIX = "hpcc_"
SERIES: Dict[str, Tuple[str, str]] = {
    # The health agent (per node; every check's raw numbers, which it used to throw away after its verdict)
    "hpcc_health_check_ok": ("gauge", "1 when the check passed at its last run, 0 when it failed (label check)"),
    "hpcc_health_check_timestamp_seconds": ("gauge", "When the check last ran (label check)"),
    "hpcc_gpu_xid_errors_total": ("counter", "NVIDIA Xid events seen by the agent (labels gpu, code)"),
    "hpcc_gpu_ecc_errors": ("gauge", "ECC error counts as the driver reports them (labels gpu, kind)"),
    "hpcc_gpu_row_remap_pending": ("gauge", "1 when the GPU has a row remapping pending (label gpu)"),
    "hpcc_gpu_row_remap_failed": ("gauge", "1 when the GPU's row remapping failed (label gpu)"),
    "hpcc_efa_errors_total": ("counter", "EFA hardware error counters (labels device, counter)"),
    "hpcc_efa_bytes_total": ("counter", "EFA bytes moved (labels device, direction: rx or tx)"),
    # The node agent
    "hpcc_bundle_generation": ("gauge", "The bundle generation the node runs"),
    "hpcc_membership_generation": ("gauge", "The membership generation the node applied"),
    # The controller (on the head)
    "hpcc_controller_loop_seconds": ("gauge", "How long the controller's last loop took"),
    "hpcc_controller_loops_total": ("counter", "Loops the controller ran while holding the lease"),
    "hpcc_controller_actions_total": ("counter", "Actions the controller carried out (label kind)"),
    "hpcc_controller_nodes": ("gauge", "Nodes in the ledger (labels group, state)"),
    "hpcc_controller_spares": ("gauge", "Healthy nodes held as spares (label group)"),
    "hpcc_controller_replacements_total": ("counter", "Nodes replaced (labels group, reason class)"),
    "hpcc_controller_alerts_total": ("counter", "Alerts the controller raised"),
    "hpcc_controller_membership_generation": ("gauge", "The membership generation last published"),
    # Slurm as the controller read it in its last loop (the distribution's Slurm has no metrics endpoint)
    "hpcc_slurm_nodes": ("gauge", "Slurm's nodes (labels group, state: down, drain, allocated, mixed, idle, other)"),
    "hpcc_slurm_jobs": ("gauge", "Slurm's jobs by base state (label state: pending, running, completing...)"),
    # slurm_node, not node: the head's target carries node="head", which Prometheus keeps over the series' own (the
    # series' becomes exported_node); a query joins on node through label_replace(..., "node", "$1", "slurm_node", ...)
    "hpcc_slurm_job_node_info": (
        "gauge",
        "1 for each node of each running job (labels job_id, slurm_node, user, job_name)",
    ),
}
JOB_NODE_LABEL = "slurm_node"  # hpcc_slurm_job_node_info's label naming the job's node (see above)
METRIC_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"  # the exposition format's names ("Metric names and labels")
LABEL_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"


def valid_metric_name(name: str) -> bool:
    return re.fullmatch(METRIC_NAME, name) is not None


def valid_label_name(name: str) -> bool:
    return re.fullmatch(LABEL_NAME, name) is not None and not name.startswith("__")


# What the controller may do about a firing alert of the head's rules (infra/render/prometheus.py): the label every
# rule carries and its values. `drain`: take the node out of scheduling once it is idle; `event`: record it only. A
# metric alone never replaces a node (the health agent's verdicts do).
ALERT_ACTION_LABEL = "hpcc_action"
ALERT_ACTION_DRAIN = "drain"
ALERT_ACTION_EVENT = "event"
ALERT_ACTIONS = (ALERT_ACTION_DRAIN, ALERT_ACTION_EVENT)


# node_exporter as every node and the head run it (the bootstrap starts it with exactly these, plus its listen
# address): the collectors named, none of the others. Left out: every per-CPU collector (cpu, cpufreq, softnet,
# schedstat; interrupts is per CPU and per IRQ): cpu and softnet alone are 13 series a CPU, 2,496 on a p5; the
# per-device hardware ones hpcc reads itself or that say nothing on EC2 (infiniband: the EFA devices, read by the
# health series; netclass, hwmon, edac, nvme, thermal_zone, rapl); systemd (a few series per unit); the exporter's
# own Go runtime series. Measured and scaled per instance type by scripts/bench_series.py (target: 1,500 series
# on a p5). Collectors: https://github.com/prometheus/node_exporter#collectors (1.5.0, Debian 12's package).
NODE_EXPORTER_COLLECTORS = (
    "loadavg",
    "pressure",  # CPU, memory and I/O stall time: what per-CPU series would say about a busy node, in 5 series
    "stat",
    "meminfo",
    "vmstat",
    "filefd",
    "filesystem",
    "diskstats",
    "netdev",
    "netstat",
    "sockstat",
    "time",
    "timex",  # clock sync: a skewed clock breaks collective timeouts and certificate checks
    "uname",
    "os",
    "textfile",
)
NODE_EXPORTER_FLAGS: Tuple[str, ...] = (
    "--collector.disable-defaults",
    *(f"--collector.{name}" for name in NODE_EXPORTER_COLLECTORS),
    f"--collector.textfile.directory={TEXTFILE_DIR}",
    "--web.disable-exporter-metrics",
    # the same filters whichever build runs (Debian's and upstream's defaults differ): no loopback or container
    # interfaces, no pseudo or container mounts
    "--collector.netdev.device-exclude=^(lo|docker[0-9]+|veth.+|br-.+)$",
    "--collector.filesystem.mount-points-exclude="
    "^/(dev|proc|run|sys|mnt|media|var/lib/docker/.+|var/lib/containers/storage/.+)($|/)",
)
