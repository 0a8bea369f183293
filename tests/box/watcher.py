"""EC2 below the API, for tests/box/cloud.py's FleetBox: a thread that boots a namespace node for every instance
launched with a watched cluster's tag and stops the node whose instance is terminated."""

from __future__ import annotations

import threading
import traceback
from typing import TYPE_CHECKING

from hpcc_contract.names import TAG_NODE

if TYPE_CHECKING:
    from tests.box.cloud import FleetBox

LIVE = ("pending", "running")
GONE = ("shutting-down", "terminated", "stopping", "stopped")


class Watcher(threading.Thread):
    """EC2 below the API: each second, DescribeInstances for the cluster's compute instances; a new live one gets a
    namespace node, a terminated one loses it. A node whose namespace died is left dead (its instance runs on)."""

    def __init__(self, box: FleetBox, period: float = 1.0):
        super().__init__(name="box-ec2", daemon=True)
        self.box, self.period = box, period
        self.halted = threading.Event()
        self.errors: list[str] = []
        self.ticks = 0  # looks at EC2 so far

    def run(self) -> None:
        while not self.halted.is_set():
            try:
                self.tick()
                self.ticks += 1
            except Exception:  # a failed tick is retried; its trace is kept for diagnose()
                self.errors.append(traceback.format_exc(limit=3))
            self.halted.wait(self.period)

    def tick(self) -> None:
        instances = {
            iid: inst for cluster in sorted(self.box.clusters) for iid, inst in self.box.instances(cluster).items()
        }
        for iid, inst in instances.items():
            if self.halted.is_set():
                return
            state, seen = inst["State"]["Name"], self.box.launched.get(iid)
            if seen is None and state in LIVE:
                self.box.boot_instance(inst)
            elif seen is not None and state in GONE and not seen.stopped:
                self.box.stop_instance(seen)
            if seen is not None and seen.node is not None:
                name = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}.get(TAG_NODE)
                if name and seen.node.name != name:
                    seen.node.name = name  # the controller named it (tags follow the ledger)

    def halt(self) -> None:
        self.halted.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=30)
