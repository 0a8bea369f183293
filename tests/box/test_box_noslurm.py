"""The health checks on a cluster without Slurm (issue 20: "without Slurm the same happens through the agent and the
hostfiles"), with the real agent and controller: a node whose shared mount hangs leaves every other node's
hostfiles (the controller records a DRAIN; the membership marks it `out`), keeps its own files, and is listed again
once its mount answers (a RESUME), never replaced; a dead node whose status is forged under another key, or dated
ahead under its own, is replaced all the same (issue 37, fault 4).

Its own fleet box: the cpu profile, one group `a` of three nodes and no scheduler; the box's shared
file system at /fsx in each node (a host tmpfs, bound: tests/box/shared.py's `prepare`), and the hang a FIFO at
the mount check's probe path: its open(2) blocks as on a hung Lustre server. Printed: `[no slurm] ...` figures."""

import json
import time

import pytest

from hpcc_node.controller.membership import status_key
from hpcc_node.controller.model import DRAIN, READY, REPLACE, RESUME
from tests.box.cloud import FleetBox, instance_arn
from tests.box.machine import leftovers
from tests.box.shared import MOUNT, fresh_shared_fs, prepare
from tests.box.test_box_fleet import wait_for
from tests.box.test_box_health import events

pytestmark = [pytest.mark.box, pytest.mark.long]
A = ("a-000", "a-001", "a-002")


@pytest.fixture(scope="module")
def fleet(box_machine):
    box = FleetBox(profile="cpu", groups=[{"name": "a", "count": 3}])
    box.prepare = prepare(box)
    try:
        fresh_shared_fs()
        box.start()
        codes = box.boot(timeout=420)
        assert set(codes.values()) == {0}, f"{codes}\n{box.diagnose()}"
        print("\n" + box.phases.report("no-Slurm box"))
        yield box
    finally:
        box.stop()
    assert leftovers() == [], "the box left these behind"


def listed_by(box: FleetBox, reader: str) -> set:
    """The addresses in a node's hostfile."""
    text = box.node(reader).file("/etc/hpcc/hostfile").read_text()
    return {line.split()[0] for line in text.splitlines() if line.strip()}


def ready(box: FleetBox) -> dict:
    slots = box.ledger().slots
    return slots if all(n in slots and slots[n].state == READY for n in A) else {}


def test_a_node_whose_mount_hangs_leaves_the_hostfiles_and_returns_when_it_answers(fleet):
    before = wait_for(lambda: ready(fleet), 300, fleet, why="a-000..a-002 ready")
    name, ip = "a-001", fleet.node("a-001").ip
    wait_for(
        lambda: all(ip in listed_by(fleet, r) for r in ("head", "a-000", "a-002")),
        120,
        fleet,
        why=f"{name} in every hostfile",
    )
    node = fleet.node(name)
    fifo = f"{MOUNT}/.hpcc-health-{name}"
    node.run("mkfifo", fifo, check=True)
    hung = time.time()
    try:
        out = wait_for(lambda: events(fleet, DRAIN, name, hung), 240, fleet, why=f"{name} taken out (DRAIN)")
        assert out[0].detail.startswith("health: shared_mount: "), out
        wait_for(
            lambda: all(ip not in listed_by(fleet, r) for r in ("head", "a-000", "a-002")),
            120,
            fleet,
            why=f"{name} out of every other node's hostfile",
        )
        t_out = time.time() - hung
        assert ip in listed_by(fleet, name), "the node out of service rewrote its own files"
        log = node.file("/var/log/hpcc-bootstrap.log")  # the agent logs there, as [sync] lines
        wait_for(
            lambda: log.exists() and f"takes {name} out of the hostfiles (hpcc: shared_mount" in log.read_text(),
            60,
            fleet,
            why=f"{name}'s agent saying why it applies no membership",
        )
    finally:
        node.run("rm", "-f", fifo, check=True)
    back = time.time()
    wait_for(lambda: events(fleet, RESUME, name, back), 240, fleet, why=f"{name} back in service (RESUME)")
    wait_for(
        lambda: all(ip in listed_by(fleet, r) for r in ("head", "a-000", "a-002")),
        120,
        fleet,
        why=f"{name} in every hostfile again",
    )
    print(
        f"[no slurm] {name}'s mount hung: out of every hostfile after {t_out:.1f} s ({out[0].detail}); listed "
        f"again {time.time() - back:.1f} s after it answered"
    )
    after = fleet.ledger().slots
    assert {n: after[n].instance_id for n in A} == {n: before[n].instance_id for n in A}  # nothing replaced


def test_b_a_dead_nodes_status_forged_under_another_key_and_dated_ahead_does_not_hide_its_death(fleet):
    """Without Slurm the heartbeat is the only liveness signal: a status naming the node under another instance's
    key, and its own object rewritten with a time a day ahead (a skewed clock), must not keep it alive."""
    before = wait_for(lambda: ready(fleet), 300, fleet, why="a-000..a-002 ready")
    name, instance_id = "a-002", before["a-002"].instance_id
    s3, bucket = fleet.client("s3"), fleet.plan()["stateBucket"]
    own = fleet.status(instance_id)  # what the node last wrote of itself
    ahead = dict(own, at=time.time() + 86400)
    died = time.time()
    fleet.kill(fleet.node(name))
    forged = status_key(instance_arn("i-0f0f0f0f0f0f0f0f0"))
    s3.put_object(Bucket=bucket, Key=forged, Body=json.dumps(dict(ahead, instance_id="i-0f0f0f0f0f0f0f0f0")))
    s3.put_object(Bucket=bucket, Key=status_key(instance_arn(instance_id)), Body=json.dumps(ahead))
    try:
        after = wait_for(
            lambda: (s := ready(fleet)) and s[name].instance_id != instance_id and s, 420, fleet, why=f"{name} replaced"
        )
    finally:
        s3.delete_object(Bucket=bucket, Key=forged)
    (start,) = events(fleet, REPLACE, name, died)
    print(f"[no slurm] {name} died behind a forged status: replaced {start.at - died:.1f} s later ({start.detail})")
    assert {n: after[n].instance_id for n in ("a-000", "a-001")} == {
        n: before[n].instance_id for n in ("a-000", "a-001")
    }
