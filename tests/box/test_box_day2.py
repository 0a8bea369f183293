"""Day 2 on the shared fleet box (tests/box/shared.py: groups a of 3 and b of 1, Slurm), each test from the baseline
and back to it: (a) group a's count is raised by one (the groups parameter, as `pulumi up` writes it) and the
controller launches the node, (b) a node's instance is terminated and the controller replaces it under its name at
a new IP; in both a job started on two untouched nodes before the change runs through it and finishes, and Slurm
has the node at its address and runs a job on it; (c) a node whose bootstrap fails never takes jobs and is replaced
while the others stay idle. The old nodes follow the membership the controller publishes through their agents;
the count raised is lowered again after each test (the controller removes the highest index first)."""

import re
import subprocess
import time
from contextlib import contextmanager

import pytest

from hpcc_node.controller.observe import slurm_nodes
from tests.box.cloud import Fault, FleetBox
from tests.box.day2 import add_node, agent_pids, boot_code, hosts_version, named, replace_node, seconds_until_listed
from tests.box.node import hostname, node_env
from tests.box.test_box_cluster import assert_certified
from tests.box.test_box_slurm import wait_states

pytestmark = [pytest.mark.box, pytest.mark.long]


@contextmanager
def job_on_untouched_nodes(box: FleetBox):
    """An mpirun job, one rank on the head and one on a-000 (neither changes), until the block ends; then it must
    finish with exit 0 on both."""
    stop = box.workdir / "stop-job"
    stop.unlink(missing_ok=True)
    job = subprocess.Popen(
        box.head.enter(
            "mpirun",
            "--allow-run-as-root",
            "-H",
            f"{box.head.ip}:1,{box.node('a-000').ip}:1",
            "bash",
            "-c",
            f"while [ ! -e {stop} ] && [ $SECONDS -lt 900 ]; do sleep 1; done; echo \"finished $(hostname) $SECONDS\"",
        ),
        env=node_env(box.head),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        yield job
        assert job.poll() is None, job.communicate()
        stop.touch()
        out, err = job.communicate(timeout=60)
        assert job.returncode == 0, err[-2000:]
        finished = sorted(line.split()[1] for line in out.splitlines() if line.startswith("finished "))
        assert finished == sorted(hostname(n) for n in (box.head, box.node("a-000"))), out
    finally:
        if job.poll() is None:
            job.kill()


def in_slurm_at_its_address_and_running_jobs(box: FleetBox, node) -> None:
    """The node is idle in Slurm at the address the controller set (`scontrol update NodeAddr=`: slurm.conf has
    none) and runs a job."""
    wait_states(box, lambda s: s.get(node.name, ("",))[0] == "idle", timeout=60)
    nodes = slurm_nodes(box.on_head("sinfo", "--json").stdout)
    assert nodes[node.name].addr == node.ip, nodes[node.name]
    run = box.on_head("srun", "-w", node.name, "hostname")
    assert (run.returncode, run.stdout.split()) == (0, [hostname(node)]), run.stderr


def env_of(node) -> dict:
    return dict(
        line.split("=", 1)
        for line in node.file("/etc/hpcc/env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )


def check_membership(box: FleetBox, changed, gone_ip: str | None = None) -> None:
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
            assert env["NODE_RANK"] == str(compute.index(node.ip)), node.name
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


def wait_status(box: FleetBox, node, version: int, timeout: float = 30) -> dict:
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


def test_a_added_node_is_listed_trusted_and_used_by_every_node_while_a_job_runs_on(fleet, capsys):
    with job_on_untouched_nodes(fleet):
        new, changed = add_node(fleet, "a")
        agents = seconds_until_listed(fleet, new.ip, changed, [n for n in fleet.nodes if n is not new])
        assert boot_code(fleet, new) == 0, fleet.diagnose()
        seconds = seconds_until_listed(fleet, new.ip, changed)
        report(capsys, f"add {new.name} ({new.ip})", agents, seconds)
        check_membership(fleet, new)
        in_slurm_at_its_address_and_running_jobs(fleet, new)


def test_b_a_replaced_node_is_followed_and_its_old_ip_forgotten_while_a_job_runs_on(fleet, capsys):
    with job_on_untouched_nodes(fleet):
        old, new, changed = replace_node(fleet, "a-001")
        agents = seconds_until_listed(fleet, new.ip, changed, [n for n in fleet.nodes if n is not new])
        assert boot_code(fleet, new) == 0, fleet.diagnose()
        assert (new.name, new.ip != old.ip, new.instance_id != old.instance_id) == ("a-001", True, True)
        seconds = seconds_until_listed(fleet, new.ip, changed)
        report(capsys, f"replace a-001 ({old.ip} -> {new.ip})", agents, seconds)
        check_membership(fleet, new, gone_ip=old.ip)
        status = fleet.status("a-001")
        assert status["instanceId"] == new.instance_id != old.instance_id  # the old instance's would not be counted
        in_slurm_at_its_address_and_running_jobs(fleet, new)


def test_c_a_node_whose_bootstrap_failed_never_takes_jobs_and_is_replaced_while_the_others_stay_idle(fleet):
    fault = fleet.add_fault(Fault("a", times=1))
    node, changed = add_node(fleet, "a")
    assert boot_code(fleet, node) == 1
    assert fleet.status(node.instance_id)["step"] == "ssh"
    others = [n.name for n in fleet.compute if n.name != node.name]
    states = wait_states(
        fleet,
        lambda s: s.get(node.name, ("idle",))[0] != "idle" and all(s.get(n, ("",))[0] == "idle" for n in others),
        timeout=60,
    )  # the others untouched
    new = named(fleet, node.name, lambda n: n.instance_id != node.instance_id)
    states = wait_states(fleet, lambda s: all(s.get(n, ("",))[0] == "idle" for n in [*others, node.name]), timeout=300)
    assert fault.hit == [node.instance_id] and boot_code(fleet, new, 120) == 0, states
    print(
        f"[slurm] {node.name}: its first instance failed at ssh, its replacement was idle "
        f"{time.time() - changed:.1f} s after the count changed"
    )
