"""The health checks on the fleet box (issue 20), with the real agent, controller and Slurm: a fatal Xid written
to one node's kernel log (tests/box/standins/inject-xid, the driver's `NVRM: Xid` line) while a batch job runs
there. The node's agent reads it (its health thread), its status object carries the failed verdict, the
controller sets the node DOWN with `hpcc: xid: ...`, Slurm requeues the job, the controller replaces the instance
under the same name, and the job runs again on the replacement. A person's drain on another node is left as it is.

Its own box (group a of 2 cpu nodes, Slurm). Printed: `[health] ...` with the measured seconds."""

import subprocess
import time
from pathlib import Path

import pytest

from hpcc_node.controller.model import DOWN, READY
from tests.box.cloud import FleetBox
from tests.box.harness import node_env
from tests.box.machine import leftovers
from tests.box.test_box_fleet import BUSY, settled, slurm, wait_for

pytestmark = [pytest.mark.box, pytest.mark.long]
INJECT_XID = Path(__file__).resolve().parent / "standins" / "inject-xid"
NAMES = {"a-000", "a-001"}
PERSON = "alice: fan noise, looking tomorrow"  # a person's reason: not hpcc's, never touched


@pytest.fixture(scope="module")
def fleet(box_machine):
    box = FleetBox(profile="cpu", scheduler="slurm", groups=[{"name": "a", "count": 2}])
    try:
        box.start()
        code = box.boot_head(timeout=300)
        if code != 0:
            pytest.fail(f"the head did not boot ({code})\n{box.diagnose()}", pytrace=False)
        box.start_controller()
        yield box
    finally:
        box.stop()
    assert leftovers() == [], "the box left these behind"


def job_fields(box: FleetBox, job: str) -> dict:
    out = box.head.run("scontrol", "show", "job", job, "--oneliner").stdout
    return dict(f.split("=", 1) for f in out.split() if "=" in f)


def test_a_fatal_xid_downs_the_node_requeues_its_job_and_replaces_it_and_a_persons_drain_is_left(fleet):
    before = wait_for(lambda: settled(fleet, NAMES), 600, fleet, why="a-000, a-001 ready and idle")
    victim = fleet.node("a-000")
    verdict = victim.file("/run/hpcc-health.verdict")
    assert verdict.exists() and "status=ok" in verdict.read_text(), "the agent's health thread wrote no verdict"
    wait_for(lambda: fleet.status("a-000").get("health") == "ok", 60, fleet,
             why="a-000's agent reporting its health verdict (its status follows the bootstrap's within a tick)")

    person = fleet.head.run("scontrol", "update", "nodename=a-001", "state=drain", f"reason={PERSON}")
    assert person.returncode == 0, person.stderr
    work = fleet.workdir / "jobs"
    work.mkdir(exist_ok=True)
    flag = work / "health-finish"
    submit = subprocess.run(fleet.head.enter(
        "sbatch", "--parsable", "--requeue", "-N", "1", "-w", "a-000", f"--output={work}/health-%j.out",
        "--open-mode=append", "--wrap",
        f"echo start-$SLURMD_NODENAME-${{SLURM_RESTART_COUNT:-0}}; while [ ! -e {flag} ]; do sleep 1; done; echo done"),
        env=node_env(fleet.head), capture_output=True, text=True, timeout=60)
    assert submit.returncode == 0, submit.stderr
    job = submit.stdout.strip().split(";")[0]
    wait_for(lambda: job_fields(fleet, job).get("JobState") == "RUNNING" and "a-000" in slurm(fleet) and
             slurm(fleet)["a-000"].states & BUSY, 120, fleet, why=f"job {job} running on a-000")

    injected = time.time()
    run = victim.run("env", "HPCC_STANDIN_STATE=/var/log", "python3", str(INJECT_XID), "61")
    assert run.returncode == 0, run.stderr
    down = wait_for(lambda: (n := slurm(fleet).get("a-000")) and "DOWN" in n.states and
                    n.reason.startswith("hpcc: xid: Xid 61") and n, 180, fleet, every=0.5,
                    why="a-000 DOWN with hpcc's Xid reason")
    print(f"[health] a-000 DOWN {time.time() - injected:.1f} s after the Xid: {down.reason}")
    status = fleet.status("a-000")
    assert (status["ok"], status["failure"], status["check"], status["action"], status["remedy"]) == \
        (False, "health", "xid", "down", "replace"), status

    wait_for(lambda: int(job_fields(fleet, job).get("Restarts", "0")) >= 1, 120, fleet, why=f"job {job} requeued")
    after = wait_for(lambda: (s := fleet.ledger().slots).get("a-000") and s["a-000"].state == READY and
                     s["a-000"].instance_id != before["a-000"].instance_id and s, 600, fleet,
                     why="a-000 replaced by a new instance, ready")
    print(f"[health] a-000 replaced ({before['a-000'].instance_id} -> {after['a-000'].instance_id}) "
          f"{time.time() - injected:.1f} s after the Xid")
    assert fleet.instances()[before["a-000"].instance_id]["State"]["Name"] in ("shutting-down", "terminated")
    events = [e for e in fleet.ledger().events if e.node == "a-000" and e.kind == DOWN]
    assert events and "Xid 61" in events[0].detail, fleet.ledger().events

    wait_for(lambda: job_fields(fleet, job).get("JobState") == "RUNNING", 300, fleet,
             why=f"job {job} running again on the replacement")
    flag.touch()
    wait_for(lambda: job_fields(fleet, job).get("JobState") == "COMPLETED", 120, fleet, why=f"job {job} completed")
    out = (work / f"health-{job}.out").read_text().split()
    assert out[0] == "start-a-000-0" and "start-a-000-1" in out and out[-1] == "done", out

    person_after = slurm(fleet)["a-001"]
    assert "DRAIN" in person_after.states and person_after.reason == PERSON, person_after
    assert fleet.ledger().slots["a-001"].instance_id == before["a-001"].instance_id  # not replaced, not resumed
