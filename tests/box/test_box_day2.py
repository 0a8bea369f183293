"""Day 2 in one booted box (cpu profile, head + group `compute` of 2), its tests run in order: (a) the group's count
is raised by one (the groups parameter, as `pulumi up` writes it) and the controller launches the node, (b) a compute
node's instance is terminated and the controller replaces it under its name at a new IP, (c) a job started on two
untouched nodes before (a) runs through both changes and finishes, (d) Slurm has the added and the replaced node at
their addresses and runs a job on them, (e) a node whose bootstrap fails never takes jobs and is replaced while the
others stay idle. The old nodes follow the membership the controller publishes through their agents.

In `make test-long` (pytest -m long): tests/box/test_box_fleet.py checks the same lifecycle on two groups."""

import re
import subprocess
import time

import pytest

from hpcc_node.controller.observe import slurm_nodes
from tests.box.cloud import Fault
from tests.box.day2 import add_node, agent_pids, hosts_version, named, replace_node, seconds_until_listed
from tests.box.harness import Box
from tests.box.node import hostname, node_env
from tests.box.test_box_cluster import assert_certified
from tests.box.test_box_slurm import wait_states

pytestmark = [pytest.mark.box, pytest.mark.long]


@pytest.fixture(scope="module")
def day2(cluster):
    """The shared box (tests/box/conftest.py: this module is its last user, it changes membership)."""
    box = cluster
    try:
        # (c)'s job: one rank on the head, one on compute-000 (neither changes), until told to stop.
        stop = box.workdir / "stop-job"
        job = [
            "mpirun",
            "--allow-run-as-root",
            "-H",
            f"{box.head.ip}:1,{box.node('compute-000').ip}:1",
            "bash",
            "-c",
            f"while [ ! -e {stop} ] && [ $SECONDS -lt 900 ]; do sleep 1; done; echo \"finished $(hostname) $SECONDS\"",
        ]
        box.job = subprocess.Popen(
            box.head.enter(*job),
            env=node_env(box.head),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        box.stop_job = stop
        yield box
    finally:
        if getattr(box, "job", None) and box.job.poll() is None:
            box.job.kill()


def env_of(node) -> dict:
    return dict(
        line.split("=", 1)
        for line in node.file("/etc/hpcc/env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )


def check_membership(box: Box, changed, gone_ip: str | None = None) -> None:
    """Every node lists exactly the box's compute nodes in name order, trusts every node by IP and forgets
    `gone_ip`; `changed` and every other node reach each other by SSH with no prompt; hpcc-mpirun runs on
    every compute node; every node reports the live instance and the current hosts version."""
    compute = [n.ip for n in sorted(box.compute, key=lambda n: n.name)]
    for node in box.nodes:
        assert node.file("/etc/hpcc/hostfile").read_text().splitlines() == [
            f"{ip} slots={box.slots}" for ip in compute
        ], node.name
        assert node.file("/etc/hpcc/hosts").read_text().splitlines() == compute, node.name
        env = env_of(node)
        assert (env["NNODES"], env["MASTER_ADDR"]) == (str(len(compute)), compute[0]), node.name
        assert env["HPCC_HOSTS"] == ",".join(f"{ip}:{box.slots}" for ip in compute), node.name
        if node.role == "compute":
            assert env["NODE_RANK"] == str(int(node.name.split("-")[1])), node.name
        trusted = node.file("/etc/ssh/ssh_config.d/50-hpcc.conf").read_text()
        assert all(n.ip in trusted.split() for n in box.nodes), (node.name, trusted)
        if gone_ip:
            for path in (
                "/etc/hpcc/hostfile",
                "/etc/hpcc/hosts",
                "/etc/hpcc/env",
                "/etc/ssh/ssh_config.d/50-hpcc.conf",
            ):
                assert not re.search(rf"\b{re.escape(gone_ip)}\b", node.file(path).read_text()), (node.name, path)
    for other in box.nodes:
        if other is changed:
            continue
        for a, b in ((changed, other), (other, changed)):
            run = a.run("ssh", "-v", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", b.ip, "true")
            assert run.returncode == 0, (a.name, b.name, run.stderr)
            assert_certified(run, box.name, b)  # a replaced node: its new certificate, at its new IP
    run = box.head.run("hpcc-mpirun", "--map-by", "ppr:1:node", "grep", "^HPCC_NODE=", "/etc/hpcc/env", timeout=120)
    assert run.returncode == 0 and "ERROR" not in run.stderr, run.stderr
    assert sorted(line.split("=", 1)[1] for line in run.stdout.split()) == sorted(n.name for n in box.compute)
    version = hosts_version(box)
    for node in box.nodes:  # the agent reports right after it writes: allow it a moment
        status = wait_status(box, node, version)
        assert (status["phase"], status["instanceId"], status["ip"]) == ("ready", node.instance_id, node.ip), status
        assert len(agent_pids(node)) == 1, node.name


def wait_status(box: Box, node, version: int, timeout: float = 30) -> dict:
    deadline = time.time() + timeout
    while True:
        status = box.status(node.name)
        if status.get("hostsVersion", 0) >= version or time.time() > deadline:
            assert status.get("hostsVersion", 0) >= version, (node.name, status, version)
            return status
        time.sleep(1)


def report(capsys, what: str, agents: float, seconds: float) -> None:
    with capsys.disabled():
        print(
            f"\n[day 2] {what}: from the change (count raised, instance terminated), {agents:.1f} s until the "
            f"other nodes' hostfiles list it (the controller's launch and their agents), {seconds:.1f} s until every "
            "node's does (its own bootstrap included)"
        )


def test_a_added_node_is_listed_trusted_and_used_by_every_node(day2, capsys):
    new, changed = add_node(day2)
    agents = seconds_until_listed(day2, new.ip, changed, [n for n in day2.nodes if n is not new])
    assert new.bootstrap.wait(timeout=240) == 0, day2.diagnose()
    seconds = seconds_until_listed(day2, new.ip, changed)
    report(capsys, f"add {new.name} ({new.ip})", agents, seconds)
    check_membership(day2, new)
    assert day2.job.poll() is None  # (c)'s job is still running


def test_b_a_replaced_node_is_followed_and_its_old_ip_forgotten(day2, capsys):
    old, new, changed = replace_node(day2, "compute-001")
    agents = seconds_until_listed(day2, new.ip, changed, [n for n in day2.nodes if n is not new])
    assert new.bootstrap.wait(timeout=240) == 0, day2.diagnose()
    assert (new.name, new.ip != old.ip, new.instance_id != old.instance_id) == ("compute-001", True, True)
    seconds = seconds_until_listed(day2, new.ip, changed)
    report(capsys, f"replace compute-001 ({old.ip} -> {new.ip})", agents, seconds)
    check_membership(day2, new, gone_ip=old.ip)
    status = day2.status("compute-001")
    assert status["instanceId"] == new.instance_id != old.instance_id  # the old instance's would not be counted
    assert day2.job.poll() is None


def test_c_a_job_on_untouched_nodes_runs_through_the_changes_and_finishes(day2):
    assert day2.job.poll() is None, day2.job.communicate()
    day2.stop_job.touch()
    out, err = day2.job.communicate(timeout=60)
    assert day2.job.returncode == 0, err[-2000:]
    finished = sorted(line.split()[1] for line in out.splitlines() if line.startswith("finished "))
    hostnames = [n.run("hostname", check=True).stdout.strip() for n in (day2.head, day2.node("compute-000"))]
    assert finished == sorted(hostnames), out


def test_d_the_nodes_day_2_added_and_replaced_are_in_slurm_at_their_addresses_and_run_a_job(day2):
    added, replaced = day2.node("compute-002"), day2.node("compute-001")  # tests/box/test_box_day2.py
    wait_states(day2, lambda s: all(s.get(n.name, ("",))[0] == "idle" for n in (added, replaced)), timeout=60)
    nodes = slurm_nodes(day2.on_head("scontrol", "show", "nodes", "--oneliner").stdout)
    for node in (added, replaced):  # the controller set them (scontrol update NodeAddr=): day2.conf has none
        assert nodes[node.name].addr == node.ip, nodes[node.name]
    run = day2.on_head("srun", "-w", f"{added.name},{replaced.name}", "hostname")
    assert (run.returncode, sorted(run.stdout.split())) == (0, sorted([hostname(replaced), hostname(added)])), (
        run.stderr
    )


def test_e_a_node_whose_bootstrap_failed_never_takes_jobs_and_is_replaced_while_the_others_stay_idle(day2):
    fault = Fault("compute", times=1)
    day2.faults.append(fault)
    node, changed = add_node(day2)
    assert node.bootstrap.wait(timeout=240) == 1
    assert day2.status(node.instance_id)["step"] == "ssh"
    others = [n.name for n in day2.compute if n.name != node.name]
    states = wait_states(
        day2,
        lambda s: s.get(node.name, ("idle",))[0] != "idle" and all(s.get(n, ("",))[0] == "idle" for n in others),
        timeout=60,
    )  # the others untouched
    new = named(day2, node.name, lambda n: n.instance_id != node.instance_id)
    states = wait_states(day2, lambda s: all(s.get(n, ("",))[0] == "idle" for n in [*others, node.name]), timeout=300)
    assert fault.hit == [node.instance_id] and new.bootstrap.wait(timeout=120) == 0, states
    print(
        f"[slurm] {node.name}: its first instance failed at ssh, its replacement was idle "
        f"{time.time() - changed:.1f} s after the count changed"
    )
