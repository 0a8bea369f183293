#!/usr/bin/env python3
"""Issue 34's figure (`make bench`; never a timed test): the series one node adds to the head's Prometheus, by
instance type, with hpcc's defaults. Target: at most 1,500 for a p5.48xlarge (192 vCPUs, 8 GPUs, 32 EFA devices).

Counted from the real inputs where this machine has them:
- node_exporter: the real `prometheus-node-exporter` (Debian 12's 1.5.0) run here on a free loopback port, once
  with hpcc's NODE_EXPORTER_FLAGS (hpcc_contract/metrics.py; its textfile directory a scratch one holding hpcc's own
  files for the type, so node_exporter parses them as it will on the node) and once with the package's defaults,
  for comparison. Its /metrics is counted by family; a family whose series carry a `cpu` label is per CPU,
  node_network_* (by `device`) per interface, node_disk_* per disk, node_filesystem_* per mount: each is scaled from
  this machine's count of those to the type's, the rest is the same on every node.
- dcgm-exporter (GPU nodes): hpcc's counters file (hpcc_contract/dcgm.py: dcgm-exporter's default rows and the two
  violation counters), one series per GPU a row, except `label` rows, which add a label to the others; or a copy of
  another counters file given with --dcgm-counters.
- hpcc's own series: rendered by the node side's real writers (hpcc_node/health/series.py, agent_status.py, and
  controller/series.py on the head) for the type's GPUs, EFA devices and checks.
- Prometheus' own five series per scrape target (up, scrape_duration_seconds, scrape_samples_scraped,
  scrape_samples_post_metric_relabeling, scrape_series_added: https://prometheus.io/docs/concepts/jobs_instances/).
The types' facts are EC2's DescribeInstanceTypes (moto's copy, through the embedded AWS): vCPUs, GPUs, the EFA
layout (infra/facts/efa.py: which interfaces are netdevs), the instance store's NVMe disks.
"""

from __future__ import annotations

import argparse
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpcc_contract import dcgm, metrics  # noqa: E402 - after sys.path gets the checkout
from hpcc_node.agent_status import agent_samples  # noqa: E402
from hpcc_node.controller.model import Snapshot  # noqa: E402
from hpcc_node.controller.series import ControllerSeries  # noqa: E402
from hpcc_node.health import checks, devices  # noqa: E402
from hpcc_node.health.series import HealthSeries  # noqa: E402
from hpcc_node.health.verdict import BOOT_CHECKS, EFA_COUNTERS, PERIODIC_CHECKS, XID, ok  # noqa: E402
from hpcc_node.metrics import render  # noqa: E402

EXPORTER = "prometheus-node-exporter"
TYPES = ("p5.48xlarge", "p4d.24xlarge", "c6i.32xlarge")
HEAD = "m6i.2xlarge"  # infra/config/nodes.py's head default
TARGET_P5 = 1500
PER_TARGET = 5  # Prometheus' own series per scrape target
MOUNTS = 2  # the root file system and the cluster's shared Lustre mount; each mount an image adds costs ~7 more
# hpcc's counters file: dcgm-exporter 4.5.3-4.8.2's 26 default rows (one a label, DCGM_FI_DRIVER_VERSION) and the
# two violation counters
DCGM_HPCC = (len(dcgm.ROWS), len(dcgm.SERIES), "hpcc_contract/dcgm.py's counters file")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
UNIT_PREFIX = {"node_network_": ("interface", "device"), "node_disk_": ("disk", "device")}


def samples(text: str) -> list[tuple[str, dict[str, str]]]:
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line) if line and not line.startswith("#") else None
        if m:
            out.append((m.group(1), dict(_LABEL.findall(m.group(3) or ""))))
    return out


def unit_of(name: str, labels: dict[str, str]) -> tuple[str, str] | None:
    """(unit, which one) a series is per: cpu, interface, disk, filesystem; None for a node's fixed series."""
    if name.startswith("hpcc_"):
        return None  # rendered for the type already
    if "cpu" in labels:
        return "cpu", labels["cpu"]
    for prefix, (unit, label) in UNIT_PREFIX.items():
        if name.startswith(prefix) and label in labels and labels[label] != "lo":
            return unit, labels[label]
    if name.startswith("node_filesystem_") and "mountpoint" in labels:
        return "filesystem", labels["mountpoint"]
    return None


def family(name: str) -> str:
    return "_".join(name.split("_")[:2]) if name.startswith("node_") else name


def scaled(found: list[tuple[str, dict[str, str]]], units: dict[str, int]) -> tuple[int, Counter, dict[str, str]]:
    """(series on a node with `units`, series by family, a note per scaled family): a per-unit family's series
    here divided by this machine's units of its kind, times the type's."""
    here: dict[str, set[str]] = {}
    for name, labels in found:
        u = unit_of(name, labels)
        if u:
            here.setdefault(u[0], set()).add(u[1])
    by_family: Counter = Counter()
    per_unit: dict[tuple[str, str], int] = Counter()
    for name, labels in found:
        u = unit_of(name, labels)
        if u:
            per_unit[(family(name), u[0])] += 1
        else:
            by_family[family(name)] += 1
    notes = {}
    for (fam, unit), n in per_unit.items():
        each = n / len(here[unit])
        by_family[fam] += round(each * units[unit])
        notes[fam] = f"{each:g} per {unit} x {units[unit]}"
    return sum(by_family.values()), by_family, notes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape_exporter(flags: list[str]) -> str:
    """The exporter's /metrics, run here with `flags` on a free loopback port, then stopped."""
    port = free_port()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [EXPORTER, f"--web.listen-address=127.0.0.1:{port}", *flags], stdout=subprocess.DEVNULL, stderr=err
        )
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                        return r.read().decode()
                except OSError as e:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        err.seek(0)
                        raise RuntimeError(f"{EXPORTER} {' '.join(flags)}: no /metrics: {err.read()[-500:]}") from e
                    time.sleep(0.2)
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def dcgm_per_gpu(path: str | None) -> tuple[int, int, str]:
    """(rows, series per GPU, where from) of the exporter's counters file: hpcc's, or the one at `path`."""
    if not path:
        return DCGM_HPCC
    rows = [line for line in Path(path).read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]
    series = [r for r in rows if len(r.split(",")) >= 2 and r.split(",")[1].strip() != "label"]
    return len(rows), len(series), path


def type_units(name: str) -> dict[str, int]:
    """The type's vCPUs, GPUs, EFA devices, netdevs (interfaces that are not efa-only), disks (the root volume and
    the instance store's), mounts, from DescribeInstanceTypes."""
    import boto3

    from infra.facts.efa import efa_device_count, interface_layout
    from infra.facts.instance_types import from_description

    desc = boto3.client("ec2").describe_instance_types(InstanceTypes=[name])["InstanceTypes"][0]
    itype = from_description(desc)
    layout = interface_layout(itype, itype.efa_supported)  # EFA on wherever the type has it (nodes.py's default)
    disks = sum(d.get("Count", 0) for d in (desc.get("InstanceStorageInfo") or {}).get("Disks", []))
    return {
        "cpu": itype.vcpus,
        "gpu": itype.gpus,
        "efa": efa_device_count(layout),
        "interface": sum(1 for i in layout if i.interface_type != "efa-only"),
        "disk": 1 + disks,
        "filesystem": MOUNTS,
    }


def hpcc_files(units: dict[str, int], head: bool) -> dict[str, str]:
    """hpcc's textfiles as the node's writers render them for these units: every check the node has (a Xid adds
    one series per GPU and code seen: none here), each GPU's memory readings, each EFA device's counters."""
    facts = checks.NodeFacts("n", gpus=units["gpu"], efa_devices=units["efa"], shared_mount="/fsx")
    names = {s.name for s in checks.specs(BOOT_CHECKS + PERIODIC_CHECKS, facts)} | {XID}
    names |= {EFA_COUNTERS} if units["efa"] else set()
    health = HealthSeries()
    health.saw_results([ok(n) for n in sorted(names)], 0)
    health.saw_gpus([(str(i), f"00000000:{i:02x}:00.0", 0, False, False) for i in range(units["gpu"])])
    every = {
        (f"rdmap{i}s0", "1", c): 0 for i in range(units["efa"]) for c in devices.ERROR_COUNTERS + devices.BYTE_COUNTERS
    }
    health.saw_efa(
        {k: v for k, v in every.items() if k[2] in devices.ERROR_COUNTERS},
        {k: v for k, v in every.items() if k[2] in devices.BYTE_COUNTERS},
    )
    files = {
        metrics.TEXTFILE_HEALTH: render(health.samples()),
        metrics.TEXTFILE_AGENT: render(agent_samples("0" * 64, 1)),
    }
    if head:  # the controller of a cluster with one group (each further group: 13 more)
        ctl = ControllerSeries()
        ctl.looped(Snapshot(now=0.0), [], {}, None, ["gpu"])
        files[metrics.TEXTFILE_CONTROLLER] = render(ctl.samples())
    return files


def node_series(name: str, units: dict[str, int], head: bool, dcgm: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as textfiles:
        for filename, text in hpcc_files(units, head).items():
            Path(textfiles, filename).write_text(text)
        flags = [f for f in metrics.NODE_EXPORTER_FLAGS if not f.startswith("--collector.textfile.directory=")]
        found = samples(scrape_exporter([*flags, f"--collector.textfile.directory={textfiles}"]))
    total, by_family, notes = scaled([s for s in found if not s[0].startswith("hpcc_")], units)
    hpcc = Counter(n for n, _ in found if n.startswith("hpcc_"))
    gpu = dcgm * units["gpu"]
    targets = 2 if units["gpu"] else 1  # node_exporter, and dcgm-exporter where the node has GPUs
    return {
        "name": name,
        "units": units,
        "node": total,
        "families": by_family,
        "notes": notes,
        "dcgm": gpu,
        "hpcc": sum(hpcc.values()),
        "hpcc_series": hpcc,
        "scrape": PER_TARGET * targets,
        "total": total + gpu + sum(hpcc.values()) + PER_TARGET * targets,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dcgm-counters", help="another dcgm-exporter counters file (default: hpcc's)")
    args = parser.parse_args()
    if shutil.which(EXPORTER) is None:
        print(f"MISS {EXPORTER} is not installed (Debian: apt-get install prometheus-node-exporter; make deps)")
        return 1
    from infra.plan.embedded_aws import embedded_aws

    rows, per_gpu, source = dcgm_per_gpu(args.dcgm_counters)
    version = subprocess.run([EXPORTER, "--version"], capture_output=True, text=True)
    print(f"node_exporter: {(version.stdout + version.stderr).splitlines()[0]}")
    print(f"  flags: {' '.join(metrics.NODE_EXPORTER_FLAGS)}")
    print(f"dcgm-exporter: {rows} counters, {per_gpu} series per GPU ({source})")
    with embedded_aws("us-east-1"):
        units = {name: type_units(name) for name in (*TYPES, HEAD)}
    results = [node_series(name, units[name], name == HEAD, per_gpu) for name in (*TYPES, HEAD)]
    default = samples(scrape_exporter([]))
    head = f"{'type':<18}{'vCPU':>5}{'GPU':>4}{'EFA':>4}{'nic':>4}{'disk':>5}"
    print(f"{head}{'node_exporter':>14}{'dcgm':>6}{'hpcc':>6}{'scrape':>7}{'total':>7}{'(defaults)':>12}")
    for r in results:
        u = r["units"]
        assert isinstance(u, dict)
        debian = scaled(default, u)[0]
        print(
            f"{r['name'] + (' (head)' if r['name'] == HEAD else ''):<18}{u['cpu']:>5}{u['gpu']:>4}{u['efa']:>4}"
            f"{u['interface']:>4}{u['disk']:>5}{r['node']:>14}{r['dcgm']:>6}{r['hpcc']:>6}{r['scrape']:>7}"
            f"{r['total']:>7}{debian + r['dcgm'] + r['hpcc'] + r['scrape']:>12}"
        )
    p5 = results[0]
    print(f"breakdown for {p5['name']} (node_exporter families; per-unit ones scaled from this machine's):")
    families, notes = p5["families"], p5["notes"]
    assert isinstance(families, Counter) and isinstance(notes, dict)
    for fam, n in families.most_common():
        print(f"  {fam:<28}{n:>5}  {notes.get(fam, '')}")
    hpcc_series = p5["hpcc_series"]
    assert isinstance(hpcc_series, Counter)
    for name, n in sorted(hpcc_series.items()):
        print(f"  {name:<44}{n:>5}")
    per_cpu = Counter(family(n) for n, labels in default if "cpu" in labels)
    cpus = max(1, len({labels["cpu"] for _, labels in default if "cpu" in labels}))
    print(
        "(defaults): Debian's default collectors instead of hpcc's flags; their per-CPU families here: "
        + ", ".join(f"{f} {n // cpus}/CPU" for f, n in sorted(per_cpu.items()))
        + " (cpufreq and schedstat report nothing on this machine: the defaults' figure is a floor)"
    )
    if p5["total"] > TARGET_P5:
        print(f"MISS {p5['name']}: {p5['total']} series per node, over {TARGET_P5:,}")
        return 1
    print(f"{p5['name']}: {p5['total']} series per node (target {TARGET_P5:,})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
