"""The faults issue 37 found in the box, and the day-2 change the controller rolls, on the shared box
(tests/box/shared.py: group a of 3 nodes and b of 1, Slurm, the box's short timers):

- two nodes of a small group dying at once during a long controller outage are both replaced on Slurm's hard
  verdict, with no drain first (not one "systemic" cause held forever), and no hostfile lists them meanwhile;
- a controller SIGKILLed just before CreateFleet answers, or just after it made the instances, launches one
  instance per replacement all the same: the box's moto ignores ClientToken, so only the launch's tag saves it;
- a corrupted membership object is written again at a higher generation, and every node applies it, with no
  change to wait for; malformed status objects are each logged and counted by `hpcc status`;
- a group's image changed with a job running: the job finishes, every node ends on the new launch template,
  never more of the group out than its maxUnavailable.

Printed: `[recovery] ...` lines with what was measured."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import boto3
import pytest

from hpcc_contract.names import MEMBERSHIP_KEY
from hpcc_node.controller.decide_rolling import OUT
from hpcc_node.controller.membership import status_key
from hpcc_node.controller.model import DRAIN, REPLACE, TERMINATE_ORPHAN
from infra.ops.aws import Aws
from infra.ops.status.cluster import cluster_status
from tests.box.cloud import FleetBox, instance_arn
from tests.box.day2 import change_image, launch_specs
from tests.box.node import ENDPOINT, REGION, node_env
from tests.box.shared import differences, expected_names
from tests.box.test_box_fleet import BUSY, followed, ip_of, request_replace, settled, slurm, wait_for
from tests.box.test_box_health import events

pytestmark = [pytest.mark.box, pytest.mark.long]


def replaced(box: FleetBox, before: dict, names) -> dict | None:
    """Every slot settled (test_box_fleet.settled), each of `names` on another instance than in `before`."""
    s = settled(box, expected_names(box))
    return s if s and all(s[n].instance_id != before[n].instance_id for n in names) else None


def held_job(box: FleetBox, nodes: list[str], flag) -> subprocess.Popen:
    """`sbatch --wait` of one job on `nodes` that runs until `flag` exists."""
    flag.parent.mkdir(exist_ok=True)
    wrap = f"srun bash -c 'while [ ! -e {flag} ]; do sleep 1; done'"
    cmd = ["sbatch", "--wait", "--parsable", "-N", str(len(nodes)), "-w", ",".join(nodes), "--wrap", wrap]
    out = f"--output={flag.parent}/{flag.name}.out"
    return subprocess.Popen(
        box.head.enter(*cmd[:2], out, *cmd[2:]), env=node_env(box.head), stdout=subprocess.PIPE, text=True
    )


def test_a_two_nodes_of_a_group_of_3_dying_at_once_in_a_controller_outage_are_both_replaced_without_a_drain(fleet):
    """Faults 1 and 3 together: two independent deaths read alike (the old guard held them as one systemic cause,
    forever), and after the outage both the soft (no heartbeat) and the hard (Slurm: not responding) signals are
    there at once (the soft one used to win: a drain loop first)."""
    before = wait_for(lambda: settled(fleet, expected_names(fleet)), 300, fleet, why="every node ready")
    victims = ("a-001", "a-002")
    ips = {n: fleet.node(n).ip for n in victims}
    paused = fleet.controller_pids()
    for pid in paused:  # the controller stopped (its supervisor sees no exit): an outage, not a restart
        os.kill(pid, signal.SIGSTOP)
    fleet.undo("the controller continued", lambda: [os.kill(p, signal.SIGCONT) for p in paused])
    launched, died = set(fleet.launched), time.time()
    for name in victims:  # their instances run on: hung machines
        fleet.kill(fleet.node(name))
    outage = fleet.timers["heartbeat_timeout_seconds"] + 15  # past the heartbeat and Slurm's SlurmdTimeout (30 s)
    wait_for(lambda: time.time() - died > outage, outage + 10, fleet, every=5)
    resumed = time.time()
    for pid in paused:
        os.kill(pid, signal.SIGCONT)
    wait_for(lambda: followed(fleet, set(), set(ips.values())), 120, fleet, why="no hostfile listing a dead node")
    unlisted = time.time() - resumed
    after = wait_for(lambda: replaced(fleet, before, victims), 400, fleet, why="both dead nodes replaced")
    starts = events(fleet, REPLACE, "", died)
    print(
        f"[recovery] a-001 and a-002 died together in a {resumed - died:.0f} s controller outage; after it: out of "
        f"every hostfile in {unlisted:.1f} s, both replacements idle in Slurm in {time.time() - resumed:.1f} s; "
        f"replaced for: {sorted({e.detail for e in starts})}"
    )
    assert sorted(e.node for e in starts) == sorted(victims), [(e.node, e.failure) for e in starts]
    assert all("not responding" in e.detail for e in starts), [e.detail for e in starts]  # the hard verdict
    assert not [e for v in victims for e in events(fleet, DRAIN, v, died)], "the soft verdict drained one first"
    new = {i for i in set(fleet.launched) - launched if fleet.launched[i].group == "a"}
    assert new == {after[n].instance_id for n in victims}, f"launched {new} for two replacements"
    wait_for(lambda: followed(fleet, {ip_of(fleet, after[n].instance_id) for n in victims}), 120, fleet)


def fleets():
    """moto's EC2 Fleet API class, imported when a test runs: moto reads its settings from the environment once, at
    its first import, and collecting this module must not import it before infra/plan/embedded_aws.py sets them."""
    from moto.ec2.responses.fleets import Fleets

    return Fleets


class CrashAtCreateFleet:
    """The box's moto, patched for one CreateFleet: the controller is SIGKILLed just before moto makes the
    instances (`before`) or just after (`after`: the answer reaches no one)."""

    def __init__(self, box: FleetBox, when: str):
        self.box, self.when, self.fired = box, when, threading.Event()
        self.original = fleets().create_fleet

    def __call__(self, response):
        if self.fired.is_set():
            return self.original(response)
        self.fired.set()
        if self.when == "before":
            self.kill()
            raise RuntimeError("box: the controller was killed before CreateFleet answered")
        answer = self.original(response)
        self.kill()
        return answer

    def kill(self) -> None:
        for pid in self.box.controller_pids():
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("when", ["before", "after"])
def test_c_a_controller_killed_around_createfleet_launches_one_instance_per_replacement(fleet, monkeypatch, when):
    before = wait_for(lambda: settled(fleet, expected_names(fleet)), 300, fleet, why="every node ready")
    crash = CrashAtCreateFleet(fleet, when)
    monkeypatch.setattr(fleets(), "create_fleet", lambda response: crash(response))
    launched, asked = set(fleet.launched), time.time()
    request_replace(fleet, "a-000")
    wait_for(crash.fired.is_set, 120, fleet, why="the replacement's CreateFleet")
    after = wait_for(lambda: replaced(fleet, before, ["a-000"]), 400, fleet, why="a-000 replaced after the crash")
    new = set(fleet.launched) - launched
    print(f"[recovery] controller killed {when} CreateFleet: a-000 replaced {time.time() - asked:.1f} s after asked")
    assert new == {after["a-000"].instance_id}, f"launched {new} for one replacement"
    assert not events(fleet, TERMINATE_ORPHAN, "", asked), "an orphan was made and reclaimed"


def test_d_a_corrupted_membership_is_written_again_and_malformed_statuses_are_logged_and_counted(fleet, monkeypatch):
    before = wait_for(lambda: settled(fleet, expected_names(fleet)), 300, fleet, why="every node ready")
    s3, bucket = fleet.client("s3"), fleet.plan()["stateBucket"]
    generation = fleet.membership_generation()
    malformed = {
        status_key(instance_arn("i-0badbadbadbadbad0")): b"\xff\xfe\x00 not json",
        status_key(instance_arn("i-0badbadbadbadbad1")): b'{"name": 7, "ok": "yes", "at": "soon"}',
        "status/not-an-instance.json": b'{"name": "a-000", "ok": true}',
    }
    for key, body in malformed.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    fleet.undo("malformed statuses deleted", lambda: [s3.delete_object(Bucket=bucket, Key=k) for k in malformed])
    s3.put_object(Bucket=bucket, Key=MEMBERSHIP_KEY, Body=b"{garbage")
    log = wait_for(
        lambda: all(k in (t := fleet.controller_log()) for k in malformed) and t, 120, fleet, why="each key logged"
    )
    print("[recovery] the controller says: " + " | ".join(ln for ln in log.splitlines() if "status/" in ln)[-600:])
    monkeypatch.setenv("AWS_ENDPOINT_URL", ENDPOINT)
    session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION)
    notes = wait_for(
        lambda: [n for n in cluster_status(Aws(REGION, session=session), fleet.name).notes if "malformed" in n],
        120,
        fleet,
        why="`hpcc status` counting the malformed statuses",
    )
    assert "3 malformed status object(s)" in notes[0], notes

    # No membership change: the controller writes it again over the garbage, and every node applies it.
    def applied() -> list[str]:  # the baseline's differences but the undo the test registered
        return [d for d in differences(fleet) if not d.startswith("a day-2 change not undone")]

    wait_for(
        lambda: fleet.membership_generation() > generation and not applied(),
        120,
        fleet,
        why=lambda: f"the membership written again and applied by every node: {applied()}",
    )
    now = settled(fleet, expected_names(fleet))
    assert {n: s.instance_id for n, s in now.items()} == {n: s.instance_id for n, s in before.items()}, "replaced"
    assert "is corrupted" in fleet.controller_log() or "not the one published" in fleet.controller_log()


def test_e_a_group_whose_image_changed_rolls_after_its_job_never_more_out_than_its_bound(fleet):
    before = wait_for(lambda: settled(fleet, expected_names(fleet)), 300, fleet, why="every node ready")
    group_a = ["a-000", "a-001", "a-002"]
    flag = fleet.workdir / "jobs" / "roll-finish"
    job = held_job(fleet, group_a, flag)
    fleet.undo("the roll's job ended", flag.touch)
    busy = lambda: job.poll() is None and all(slurm(fleet)[n].states & BUSY for n in group_a)  # noqa: E731
    wait_for(busy, 120, fleet, why="the job running on group a")
    spec = change_image(fleet, "a", "ami-0b0c0b0c0b0c0b0c1", bound=2)
    changed, most_out, drained_while_running, ended = time.time(), 0, False, 0.0

    def rolled() -> bool:
        nonlocal most_out, drained_while_running, ended
        ended = ended or (time.time() if job.poll() is not None else 0.0)
        slots = {n: s for n, s in fleet.ledger().slots.items() if n.startswith("a-")}
        out = [n for n, s in slots.items() if s.state in OUT]  # the bound's count: draining, replacing, booting
        most_out = max(most_out, len(out))
        if job.poll() is None and out:
            drained_while_running = True
            flag.touch()  # the job ends once the roll has begun: its first node drains, the job still running
        return job.poll() is not None and set(launch_specs(fleet, "a").values()) == {spec} and not out

    wait_for(rolled, 600, fleet, every=1.0, why=lambda: f"group a on {spec}: {launch_specs(fleet, 'a')}")
    after = wait_for(lambda: settled(fleet, expected_names(fleet)), 300, fleet, why="every node ready again")
    print(f"[recovery] group a rolled to a new image in {time.time() - changed:.1f} s, at most {most_out} out at once")
    assert job.wait(timeout=60) == 0, "the job did not finish"
    assert drained_while_running and most_out <= 2, (drained_while_running, most_out)  # the bound: 2 of 3
    starts = [e for e in events(fleet, REPLACE, "", changed) if e.node in group_a]
    # replaced once each, none under the job (its srun would have failed with the node: job.wait() above)
    assert sorted(e.node for e in starts) == group_a and min(e.at for e in starts) > ended - 5, (starts, ended)
    assert all(after[n].instance_id != before[n].instance_id for n in group_a)
    assert after["b-000"].instance_id == before["b-000"].instance_id, "group b was rolled too"
