"""The head's Prometheus scrape targets, written by the controller from the membership it publishes (issue 34):
node_exporter on the head and on every node the membership has ready or draining, dcgm-exporter on those of groups
with GPUs. A node is a target from when it is ready until it leaves the membership, by construction: a replaced
node's target goes with the generation that drops it, its replacement's comes with the one that names it ready.

Prometheus reads the files itself and follows a change without a restart ("file_sd_config":
https://prometheus.io/docs/prometheus/latest/configuration/configuration/#file_sd_config); each is written whole (a
temporary file renamed over it), so it never reads half a list. Names, ports and labels: hpcc_contract/metrics.py."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence

from hpcc_contract import metrics

from .model import Group


def _target(ip: str, port: int, node: str, group: str, instance_id: str) -> Dict[str, Any]:
    labels = {metrics.LABEL_NODE: node, metrics.LABEL_GROUP: group, metrics.LABEL_INSTANCE_ID: instance_id}
    return {"targets": [f"{ip}:{port}"], "labels": labels}


def file_sd(body: Mapping[str, Any], groups: Sequence[Group]) -> Dict[str, List[Dict[str, Any]]]:
    """Each scrape job's target list (metrics.TARGET_FILES' jobs) from a membership body (decide.membership_body):
    the head and every node in a TARGETED state with an address; the GPU job only nodes of groups with GPUs; the
    Prometheus job the head's own Prometheus, which listens on the head's address only."""
    gpu_groups = {g.name for g in groups if g.gpus > 0}
    nodes: List[Dict[str, Any]] = []
    gpus: List[Dict[str, Any]] = []
    itself: List[Dict[str, Any]] = []
    head = body.get("head")
    if isinstance(head, Mapping) and head.get("ip"):
        ip, instance = str(head["ip"]), str(head.get("instance") or "")
        nodes.append(_target(ip, metrics.NODE_EXPORTER_PORT, "head", "", instance))
        itself.append(_target(ip, metrics.PROMETHEUS_PORT, "head", "", instance))
    listed = body.get("nodes")
    for n in listed if isinstance(listed, list) else ():  # an object read back may be JSON of any shape
        if not isinstance(n, Mapping) or n.get("state") not in metrics.TARGETED or not n.get("ip"):
            continue
        name, group, instance = str(n.get("name")), str(n.get("group")), str(n.get("instance") or "")
        nodes.append(_target(str(n["ip"]), metrics.NODE_EXPORTER_PORT, name, group, instance))
        if group in gpu_groups:
            gpus.append(_target(str(n["ip"]), metrics.DCGM_EXPORTER_PORT, name, group, instance))
    return {metrics.JOB_NODE: nodes, metrics.JOB_GPU: gpus, metrics.JOB_PROMETHEUS: itself}


def encode(targets: List[Dict[str, Any]]) -> bytes:
    """One file's bytes: the same targets always give the same bytes, so an unchanged list is never rewritten."""
    return (json.dumps(targets, sort_keys=True, indent=1) + "\n").encode()


def write_whole(path: str, data: bytes) -> None:
    """`data` at `path` through a temporary file in the same directory renamed over it (mode 0644)."""
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".targets-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class Writer:
    """Keeps the target files in step with the membership: writes a file only when its bytes change (the first
    time, when they differ from what is on disk, as after a controller restart), and logs each change."""

    def __init__(self, directory: str, log: logging.Logger) -> None:
        self.directory = directory
        self.log = log
        self.written: Dict[str, bytes] = {}

    def sync(self, body: Mapping[str, Any], groups: Sequence[Group], generation: int) -> List[str]:
        """Writes the files whose targets changed; returns their jobs. Never raises: Prometheus keeps the last
        list it read, and a loop is never stopped by its metrics."""
        changed = []
        for job, targets in file_sd(body, groups).items():
            path = os.path.join(self.directory, metrics.TARGET_FILES[job])
            data = encode(targets)
            if self.written.get(path) == data or (path not in self.written and _on_disk(path) == data):
                self.written[path] = data
                continue
            try:
                os.makedirs(self.directory, exist_ok=True)
                write_whole(path, data)
            except OSError as e:
                self.log.warning("scrape targets: %s cannot be written (%s); Prometheus keeps its last list", path, e)
                continue
            self.written[path] = data
            changed.append(job)
            self.log.info(
                "scrape targets: %s job now %d targets, from membership generation %d (%s)",
                job,
                len(targets),
                generation,
                path,
            )
        return changed


def _on_disk(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None
