"""The health checks on the shared fleet box (tests/box/shared.py, issue 20), with the real agent, controller and
Slurm. The compute nodes are CPU namespaces told they have 8 GPUs (HPCC_HEALTH_GPUS), so the checks run against the
stand-in `nvidia-smi` and `dcgmi` (tests/box/standins, their state per node in /var/log/hpcc-standin); a Xid is a
driver line written to the node's stand-in kernel log (standins/inject-xid; HPCC_XID_STANDIN, tests/box/shared.py);
the shared mount is a host directory bound at /fsx in every node (no Lustre server here), and its hang a real
blocked open(2).

Each test from the baseline and back: (b, e) group b's every new instance short of a GPU at boot, until the group
is protected; (a)+(h) with `spares: 1` on group a, a fatal Xid under a resumable job that restarts on the spare;
(i) a held spare's deep check, passing, then failing; (c) an agent that stops; (d) a hung mount; (g) a slowed link
named by `hpcc check fabric`; (f) the same Xid on every node of group a at once (a fatal Xid stays until the
machine goes: the three nodes are replaced afterwards). Printed: `[health] ...` figures."""

import re
import subprocess
import time

import pytest

from hpcc_node.controller.health.observe import reservations
from hpcc_node.controller.model import ALERT, DOWN, DRAIN, READY, REBOOT, REPLACE
from tests.box.cloud import Fault, FleetBox
from tests.box.node import node_env
from tests.box.shared import MOUNT, REBOOT_TIMEOUT, SPARE_CHECK, STANDINS
from tests.box.test_box_fleet import BUSY, request_replace, settled, slurm, wait_for

pytestmark = [pytest.mark.box, pytest.mark.long]
INJECT_XID = STANDINS / "inject-xid"
A = {"a-000", "a-001", "a-002"}
SPARES = "hpcc-spares-a"
SYSTEMIC_FAULT = re.compile(r"failing the same health check \((.*)\) within ")  # decide_health's alert text
PERSON = "alice: fan noise, looking tomorrow"  # a person's reason: not hpcc's, never touched


def job_fields(box: FleetBox, job: str) -> dict:
    out = box.head.run("scontrol", "show", "job", job, "--oneliner").stdout
    return dict(f.split("=", 1) for f in out.split() if "=" in f)


def held_spares(box: FleetBox) -> frozenset:
    return reservations(box.on_head("scontrol", "show", "reservation", "--oneliner").stdout).get(SPARES, frozenset())


def hold_a_spare(box: FleetBox) -> dict:
    """Group a given one spare, until a-000..a-002 are ready and a-002 is the held spare; the ledger's slots."""
    box.set_spares("a", 1)
    return wait_for(
        lambda: settled(box, A, exact=False) and held_spares(box) == {"a-002"} and settled(box, A, exact=False),
        600,
        box,
        why="a-000..a-002 ready, a-002 the held spare",
    )


def events(box: FleetBox, kind: str, node: str = "", since: float = 0.0) -> list:
    return [
        e
        for e in box.ledger().events
        if e.kind == kind and e.phase == "start" and e.at >= since and (not node or e.node == node)
    ]


def test_b_e_a_node_short_of_a_gpu_at_boot_is_never_ready_is_replaced_and_its_group_ends_protected(fleet):
    short = fleet.workdir / "short-of-a-gpu"
    short.mkdir(exist_ok=True)
    (short / "gpus").write_text("7\n")
    # undone last: once the fault is gone, `hpcc replace` lifts the protection and b-000 boots again
    fleet.undo("b-000 replaced, lifting group b's protection", lambda: request_replace(fleet, "b-000"))
    fault = fleet.add_fault(Fault("b", times=0, env={"HPCC_STANDIN_STATE": str(short)}))
    request_replace(fleet, "b-000")
    hit = wait_for(
        lambda: len(fault.hit) >= 2 and fault.hit,
        600,
        fleet,
        why="b-000's first short instance failed its boot checks and a second was launched",
    )
    first = hit[0]
    status = fleet.status(first)
    assert (status["ok"], status["phase"], status["step"], status.get("class")) == (
        False,
        "failed",
        "health",
        "health",
    ), status
    assert "7 GPU(s) visible, the instance type has 8" in status["evidence"], status
    wait_for(
        lambda: fleet.instances()[first]["State"]["Name"] in ("shutting-down", "terminated"),
        120,
        fleet,
        why="the failed instance terminated",
    )
    replaced = [e for e in events(fleet, REPLACE, "b-000") if "7 GPU(s)" in e.detail]
    assert replaced and "health check at boot" in replaced[0].detail, replaced

    groups = wait_for(
        lambda: (g := fleet.ledger().groups).get("b") and g["b"].protected and g, 600, fleet, why="group b protected"
    )
    reason = groups["b"].protected
    print(f"[health] group b protected: {reason}")
    assert "2 bootstrap failures in a row" in reason and "7 GPU(s) visible" in reason, reason
    launched = len(fault.hit)

    def history():
        return [(round(e.at), e.kind, e.phase, e.detail) for e in fleet.ledger().events if e.node in ("b", "b-000")]

    # Marked in the loop that protects the group; a loop cut short after the protection (its lease lost in a slow
    # loop) leaves the mark to the next one, so it is awaited, with the ledger's story if it never comes.
    slot = wait_for(
        lambda: (s := fleet.ledger().slots["b-000"]).state == "failed" and s,
        120,
        fleet,
        why=lambda: f"b-000 left failed: {fleet.ledger().slots['b-000']}, {history()}",
    )
    assert "group protected" in slot.reason, slot
    fleet.wait_loops(4)  # a protected group is not replaced again
    # Two failed boots protect the group (the box's protected_failure_count); an instance that never reached its
    # checks (a launch retried, an orphan) is launched but not counted, so the count is at least 2, never exact.
    assert len(fault.hit) == launched >= 2, (fault.hit, history())
    assert fleet.ledger().slots["b-000"].state == "failed"


def test_a_h_a_fatal_xid_downs_the_node_its_job_restarts_on_the_spare_from_its_checkpoint(fleet):
    before = hold_a_spare(fleet)
    victim = fleet.node("a-000")
    assert "status=ok" in victim.file("/run/hpcc-health.verdict").read_text(), "the health thread wrote no verdict"
    wait_for(lambda: fleet.status("a-000").get("health") == "ok", 60, fleet, why="a-000 reporting its verdict")
    person = fleet.on_head("scontrol", "update", "nodename=a-001", "state=drain", f"reason={PERSON}")
    assert person.returncode == 0, person.stderr

    work = fleet.workdir / "jobs"
    work.mkdir(exist_ok=True)
    flag, ckpt = work / "finish", work / "checkpoint"
    # The resumable convention (examples/slurm/train-resumable.sbatch): a step a second, each checkpointed
    # atomically to the shared directory, resumed from the latest.
    script = (
        f"s=$(cat {ckpt} 2>/dev/null || echo 0); echo start $SLURMD_NODENAME ${{SLURM_RESTART_COUNT:-0}} $s; "
        f"while [ ! -e {flag} ]; do s=$((s+1)); echo $s > {ckpt}.tmp && mv {ckpt}.tmp {ckpt}; sleep 1; done; "
        f"echo done $s"
    )
    submit = subprocess.run(
        fleet.head.enter(
            "sbatch",
            "--parsable",
            "--requeue",
            "-N",
            "1",
            "-p",
            "a",
            f"--output={work}/job-%j.out",
            "--open-mode=append",
            "--wrap",
            script,
        ),
        env=node_env(fleet.head),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert submit.returncode == 0, submit.stderr
    job = submit.stdout.strip().split(";")[0]
    try:  # whatever fails below, the job must not loop on, nor a-001 stay drained, for the next tests
        try:
            wait_for(
                lambda: (
                    job_fields(fleet, job).get("JobState") == "RUNNING"
                    and slurm(fleet)["a-000"].states & BUSY
                    and ckpt.exists()
                    and int(ckpt.read_text() or 0) >= 3
                ),
                120,
                fleet,
                why=f"job {job} running on a-000 (a-001 drained by a person, a-002 the spare) and checkpointing",
            )
        except AssertionError as e:
            raise AssertionError(f"{job_fields(fleet, job)}\n{slurm(fleet)}\n{e}") from None

        injected = time.time()
        run = victim.run("env", "HPCC_STANDIN_STATE=/var/log", "python3", str(INJECT_XID), "79")
        assert run.returncode == 0, run.stderr
        down = wait_for(
            lambda: (
                (n := slurm(fleet).get("a-000"))
                and "DOWN" in n.states
                and n.reason.startswith("hpcc: xid: Xid 79")
                and n
            ),
            180,
            fleet,
            every=0.5,
            why="a-000 DOWN with hpcc's Xid reason",
        )
        t_down = time.time() - injected
        wait_for(
            lambda: int(job_fields(fleet, job).get("Restarts", "0")) >= 1,
            120,
            fleet,
            every=0.5,
            why=f"job {job} requeued",
        )
        t_requeued = time.time() - injected
        timeline = []

        def running_again():
            f = job_fields(fleet, job)
            timeline.append(
                (
                    round(time.time() - injected, 1),
                    f.get("JobState"),
                    f.get("Reason"),
                    f.get("BeginTime"),
                    f.get("NodeList"),
                    sorted(held_spares(fleet)),
                )
            )
            return f.get("JobState") == "RUNNING" and f

        again = wait_for(running_again, 300, fleet, every=0.5, why=f"job {job} running again")
        t_again = time.time() - injected
        assert again["NodeList"] == "a-002", (
            f"the requeued job ran on {again['NodeList']}, not the spare a-002: {timeline[:3]} ... {timeline[-3:]}"
        )
        status = fleet.status(before["a-000"].instance_id)  # the name may be its replacement's by now
        assert (status["ok"], status["failure"], status["check"], status["action"], status["remedy"]) == (
            False,
            "health",
            "xid",
            "down",
            "reboot",
        ), status
        slots = fleet.ledger().slots
        assert slots["a-000"].instance_id == before["a-000"].instance_id or slots["a-000"].state != READY, (
            "the replacement was ready before the job restarted: the spare was not used"
        )

        wait_for(
            lambda: (
                (s := fleet.ledger().slots).get("a-000")
                and s["a-000"].state == READY
                and s["a-000"].instance_id != before["a-000"].instance_id
                and s
            ),
            600,
            fleet,
            why="a-000 replaced by a new instance, ready",
        )
        t_replaced = time.time() - injected
        print(
            f"[health] Xid 79 on a-000: DOWN after {t_down:.1f} s ({down.reason}); job {job} requeued after "
            f"{t_requeued:.1f} s, running on the spare a-002 after {t_again:.1f} s (the job's time lost, fault to "
            f"resumed step, {t_again:.1f} s); replacement ready after {t_replaced:.1f} s (targets: out of service "
            f"<= 60 s, running again <= 30 s after that)"
        )
        assert fleet.instances()[before["a-000"].instance_id]["State"]["Name"] in ("shutting-down", "terminated")
        downs = events(fleet, DOWN, "a-000", injected)
        assert downs and "Xid 79" in downs[0].detail, fleet.ledger().events
        # the catalog's remedy (RESTART_BM) first: a reboot once idle, which a namespace node refuses (its
        # RebootProgram is EC2's only), so no healthy verdict came within the reboot timeout: then replaced
        reboots, replaced = events(fleet, REBOOT, "a-000", injected), events(fleet, REPLACE, "a-000", injected)
        assert reboots and replaced and reboots[0].at < replaced[0].at, fleet.ledger().events
        assert f"no verdict within {REBOOT_TIMEOUT} s of a reboot" in replaced[0].detail, replaced
        print(
            f"[health] a-000: reboot asked {reboots[0].at - injected:.1f} s after the Xid, replaced "
            f"{replaced[0].at - injected:.1f} s after it ({replaced[0].detail})"
        )
        wait_for(lambda: held_spares(fleet) == {"a-000"}, 120, fleet, why="the replacement a-000 held as the new spare")

        resumed_from = int(ckpt.read_text())
        flag.touch()
        wait_for(lambda: job_fields(fleet, job).get("JobState") == "COMPLETED", 120, fleet, why=f"job {job} completed")
        lines = (work / f"job-{job}.out").read_text().splitlines()
        starts = [line.split() for line in lines if line.startswith("start ")]
        assert starts[0][1:3] == ["a-000", "0"] and starts[1][1:3] == ["a-002", "1"], lines
        assert int(starts[1][3]) >= 3, f"the restart did not resume from the checkpoint: {lines}"
        assert lines[-1].startswith("done ") and int(lines[-1].split()[1]) >= resumed_from, lines
        print(f"[health] job {job} resumed on a-002 from step {starts[1][3]} and finished")

        person_after = slurm(fleet)["a-001"]
        assert "DRAIN" in person_after.states and person_after.reason == PERSON, person_after
        assert fleet.ledger().slots["a-001"].instance_id == before["a-001"].instance_id  # not replaced, not resumed
    finally:
        flag.touch()
        if job_fields(fleet, job).get("JobState") not in ("COMPLETED", None):
            fleet.on_head("scancel", job)
        fleet.on_head("scontrol", "update", "nodename=a-001", "state=resume")  # the person is back


def test_i_a_held_spares_deep_check_runs_on_its_timer_and_a_spare_that_fails_it_is_replaced(fleet):
    """Spares rot: the controller runs the deep checks on a held spare as a Slurm job in its reservation. One that
    passes changes nothing; one whose DCGM diagnostic fails takes the spare out and replaces it, and the group
    holds a healthy spare again, with no job and no person involved."""
    fleet.set_spares("a", 1)  # its own spare: the baseline holds none (the fixture sets it back to 0 after)
    wait_for(
        lambda: settled(fleet, A, exact=False) and len(held_spares(fleet)) == 1,
        600,
        fleet,
        why="group a settled with one held spare",
    )
    (spare,) = held_spares(fleet)
    node, before = fleet.node(spare), fleet.ledger().slots[spare]
    since = time.time()
    checked = wait_for(
        lambda: [e for e in events(fleet, "deep-check", spare, since)],
        4 * SPARE_CHECK,
        fleet,
        why=f"a deep check of the held spare {spare}",
    )
    log = node.file("/var/log/hpcc-deep-check.log")
    wait_for(
        lambda: log.exists() and "deep check passed" in log.read_text(),
        120,
        fleet,
        why=f"{spare}'s deep check passed (its job's output)",
    )
    print(f"[health] {spare}'s deep check: {checked[0].detail}")
    assert fleet.ledger().slots[spare].instance_id == before.instance_id and held_spares(fleet) == {spare}

    state = node.file("/var/log/hpcc-standin/dcgm")  # the stand-in's DCGM on this node: GPU 3 fails its memory test
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text("fail:memory:3\n")
    rotted = time.time()
    out = wait_for(
        lambda: (
            (n := slurm(fleet).get(spare))
            and n.states & {"DRAIN", "DOWN"}
            and n.reason.startswith("hpcc: dcgm_diag")
            and n
        ),
        4 * SPARE_CHECK + 120,
        fleet,
        why=f"{spare} out for its failed deep check",
    )
    t_out = time.time() - rotted
    after = wait_for(
        lambda: (
            (s := fleet.ledger().slots).get(spare)
            and s[spare].state == READY
            and s[spare].instance_id != before.instance_id
            and s
        ),
        600,
        fleet,
        why=f"{spare} replaced",
    )
    held = wait_for(lambda: len(h := held_spares(fleet)) == 1 and h, 120, fleet, why="a spare held again")
    print(
        f"[health] {spare}'s DCGM failed: out after {t_out:.1f} s ({out.reason}); replaced "
        f"({before.instance_id} -> {after[spare].instance_id}) after {time.time() - rotted:.1f} s; held: "
        f"{sorted(held)}"
    )
    assert "memory" in out.reason and "GPU 3" in out.reason, out.reason
    replaced = events(fleet, REPLACE, spare, rotted)
    assert replaced and "dcgm" in replaced[0].detail, replaced


def test_c_a_node_whose_agent_stops_is_found_by_its_heartbeat_drained_and_replaced(fleet):
    before = wait_for(lambda: settled(fleet, A, exact=False), 600, fleet, why="group a settled")
    node = fleet.node("a-001")
    pid = int(node.file("/run/hpcc-sync.pid").read_text())
    stopped = time.time()
    node.run("kill", "-STOP", str(pid), check=True)  # its agent and health checks stop; slurmd still answers
    drain = wait_for(
        lambda: (n := slurm(fleet).get("a-001")) and n.states & {"DRAIN", "DOWN"} and "no heartbeat" in n.reason and n,
        300,
        fleet,
        why="a-001 out for its missing heartbeat",
    )
    t_out = time.time() - stopped
    after = wait_for(
        lambda: (
            (s := fleet.ledger().slots).get("a-001")
            and s["a-001"].state == READY
            and s["a-001"].instance_id != before["a-001"].instance_id
            and s
        ),
        600,
        fleet,
        why="a-001 replaced",
    )
    print(
        f"[health] a-001's agent stopped: out of service after {t_out:.1f} s ({drain.reason}); replaced "
        f"({before['a-001'].instance_id} -> {after['a-001'].instance_id}) after {time.time() - stopped:.1f} s"
    )
    assert all(after[n].instance_id == before[n].instance_id for n in A - {"a-001"})


def test_d_a_hung_mount_times_out_its_check_drains_the_node_and_it_returns_when_the_mount_answers(fleet):
    wait_for(lambda: settled(fleet, A, exact=False), 600, fleet, why="group a settled")
    name = "a-001"
    node = fleet.node(name)
    before = fleet.ledger().slots[name]
    # The check writes .hpcc-health-<node> at the mount's root: a FIFO there blocks its open(2) as a hung Lustre
    # server blocks a writer, and no reader ever comes.
    fifo = f"{MOUNT}/.hpcc-health-{name}"
    node.run("mkfifo", fifo, check=True)
    hung = time.time()
    drained = wait_for(
        lambda: (
            (n := slurm(fleet).get(name)) and "DRAIN" in n.states and n.reason.startswith("hpcc: shared_mount") and n
        ),
        180,
        fleet,
        why=f"{name} drained",
    )
    print(f"[health] {name}'s mount hung: drained after {time.time() - hung:.1f} s ({drained.reason})")
    assert "the mount probe of /fsx gave no answer within 10 s" in drained.reason, drained.reason
    verdict = node.file("/run/hpcc-health.verdict")
    seen = verdict.stat().st_mtime
    wait_for(lambda: verdict.stat().st_mtime > seen, 60, fleet, why="the agent's health thread still running")
    node.run("rm", "-f", fifo, check=True)
    wait_for(
        lambda: (n := slurm(fleet).get(name)) and not n.states & {"DRAIN", "DOWN"},
        180,
        fleet,
        why=f"{name} resumed once its mount answers",
    )
    print(f"[health] {name} resumed {time.time() - hung:.1f} s after the hang began")
    wait_for(lambda: settled(fleet, A, exact=False), 120, fleet, why="group a settled, a-001 taking jobs")
    assert fleet.ledger().slots[name].instance_id == before.instance_id  # drained and resumed, never replaced


def test_g_hpcc_check_fabric_names_the_node_whose_link_is_slowed(fleet):
    wait_for(lambda: settled(fleet, A, exact=False), 600, fleet, why="group a settled")
    slow = fleet.node("a-002")
    # 400 Mbit/s (0.05 GB/s): fi_pingpong's TCP provider moves about 0.2 GB/s over the box's veths (its CPUs are
    # the limit), so the shaped node is far under 0.8 x the group's median;
    # three rounds measure all three pairs of three nodes (two could miss the only fast pair). tc's token bucket
    # (tc-tbf(8)): this machine's kernel has no sch_netem; `netem rate` would shape the same way.
    shaped = slow.run(
        "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "400mbit", "burst", "32kbit", "latency", "50ms"
    )
    assert shaped.returncode == 0, shaped.stderr
    try:
        # one gloo rank a node for the group's all-reduce: the stand-in nvidia-smi says 8 GPUs, torch sees none
        run = fleet.on_head(
            "hpcc",
            "check",
            "fabric",
            "--cluster",
            fleet.name,
            "--region",
            "us-east-1",
            "--via",
            "env",
            "--provider",
            "tcp",
            "--rounds",
            "3",
            "--allreduce-procs",
            "1",
            timeout=600,
        )
    finally:
        slow.run("tc", "qdisc", "del", "dev", "eth0", "root")
    print(f"[health] hpcc check fabric:\n{run.stdout}{run.stderr}")
    assert run.returncode == 1, (run.stdout, run.stderr)
    verdicts = run.stdout.split("below the floor or not judged", 1)[-1].split("one ring all-reduce per group")[0]
    named = {line.split()[1] for line in verdicts.splitlines() if line.strip().startswith("│ a-")}
    assert named == {"a-002"}, (run.stdout, run.stderr)
    # the group's ring ran over its three nodes (real torchrun and gloo over the nodes' veths), slow link and all
    ring = [
        line.split("│")
        for line in run.stdout.split("one ring all-reduce per group", 1)[-1].splitlines()
        if line.strip().startswith("│ a ")
    ]
    assert ring and ring[0][2].strip() == "3" and float(ring[0][3]) > 0 and ring[0][4].strip() == "ok", run.stdout


def test_f_the_same_fatal_xid_on_every_node_at_once_is_one_systemic_alert_and_no_node_is_touched(fleet):
    wait_for(lambda: settled(fleet, A, exact=False), 600, fleet, why="group a settled")
    before = {n: (s.instance_id, s.state) for n, s in fleet.ledger().slots.items() if n in A}
    states = {n: slurm(fleet)[n].states for n in A}
    # a fatal Xid stays until the machine goes: afterwards the three are replaced, as an operator would
    fleet.undo("a-000..a-002 replaced (their fatal Xid)", lambda: request_replace(fleet, *sorted(A)))
    injected = time.time()
    inject = [  # at once, not one after another: the verdicts must fall within the settle time together
        subprocess.Popen(
            (n := fleet.node(name)).enter("env", "HPCC_STANDIN_STATE=/var/log", "python3", str(INJECT_XID), "79"),
            env=node_env(n),
        )
        for name in sorted(A)
    ]
    assert [p.wait(timeout=60) for p in inject] == [0] * len(A)
    alert = wait_for(
        lambda: [e for e in events(fleet, ALERT, since=injected) if "systemic" in e.detail],
        120,
        fleet,
        why="one systemic alert",
    )
    print(f"[health] Xid 79 on every node: alert after {time.time() - injected:.1f} s: {alert[0].detail}")
    fleet.wait_loops(4)
    # One alert per fault (its signature, in the alert's text): raised once, not again on the loops after.
    alerts = [
        (round(e.at - injected, 1), e.detail) for e in events(fleet, ALERT, since=injected) if "systemic" in e.detail
    ]
    faults = [m.group(1) for _, detail in alerts if (m := SYSTEMIC_FAULT.search(detail))]
    assert len(faults) == len(alerts) >= 1 and len(set(faults)) == len(faults), alerts
    assert not [
        e for e in fleet.ledger().events if e.at >= injected and e.node in A and e.kind in (DOWN, DRAIN, REPLACE)
    ], fleet.ledger().events
    assert {n: (s.instance_id, s.state) for n, s in fleet.ledger().slots.items() if n in A} == before
    now = slurm(fleet)
    assert all(not (now[n].states - states[n]) & {"DOWN", "DRAIN"} for n in A), now
