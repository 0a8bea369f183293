"""The shared fleet box (tests/box/shared.py: the head and groups a and b of c6i.16xlarge its controller launched):
SSH, hostfiles, Open MPI and torchrun across the nodes, and a rerun of the bootstrap that changes nothing.

Not checked here (no hardware): the Lustre mount (no Lustre server: HPCC_SKIP_STEPS=lustre,mount) and
EFA itself (no device: test_box_faults checks the EFA failure path). See tests/box/README.md.
"""

import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.box.cloud import FLEET_CIDR
from tests.box.day2 import agent_pids
from tests.box.harness import PROFILES
from tests.box.jobs import ALL_REDUCE, mpi_hello, mpi_ranks
from tests.box.node import VENV_BIN, hostname, node_env
from tests.box.settle import WRITTEN, fingerprint, settle

pytestmark = [pytest.mark.box, pytest.mark.long]


@pytest.fixture
def cluster(fleet):
    """The shared box at its baseline (tests/box/conftest.py)."""
    return fleet


def test_boot_reports_every_node_ready_with_the_tcp_provider(cluster):
    for node in cluster.nodes:
        status = current_status(cluster, node)
        assert (status["node"], status["ip"], status["phase"], status["ok"]) == (node.name, node.ip, "ready", True)
        # which instance wrote it, and the membership it applied (operators count only the live instance's)
        assert status["instanceId"] == node.instance_id and status["hostsVersion"] == cluster_hosts_version(cluster)
        log = cluster.log(node)
        itype = PROFILES[cluster.profile][0 if node.role == "head" else 1]
        assert f"EFA is not in use on {itype}" in log
        assert "skipped: HPCC_SKIP_STEPS names lustre" in log and "skipped: HPCC_SKIP_STEPS names mount" in log


# What each step logs, and the label every one of its lines must carry.
STEP_LINES = {
    "os": "OS: debian-",
    "lustre": "skipped: HPCC_SKIP_STEPS names lustre",
    "mount": "skipped: HPCC_SKIP_STEPS names mount",
    "efa": "EFA is not in use",
    "join": {"head": "the head: the nodes join it", "compute": ") accepts SSH"},
}


def test_every_log_line_names_the_step_it_came_from(cluster):
    for node in cluster.nodes:
        log = cluster.log(node).splitlines()
        for step, text in STEP_LINES.items():
            text = text[node.role] if isinstance(text, dict) else text
            lines = [line for line in log if text in line]
            assert lines and all(f" [{step}] " in line for line in lines), (node.name, step, lines)


def assert_certified(run, cluster_name: str, b) -> None:
    """`ssh -v` to node `b` verified its host certificate, the one `b` made at its boot (key ID
    <cluster>/<node>/<instance>), against the cluster key: not a plain key, no prompt."""
    assert re.search(rf"Host '{re.escape(b.ip)}' is known and matches the \S+-CERT host certificate", run.stderr), (
        run.stderr
    )
    assert f'ID "{cluster_name}/{b.name}/{b.instance_id}"' in run.stderr, run.stderr


def test_every_node_reaches_every_other_by_ssh_with_no_password_or_prompt(cluster):
    for a in cluster.nodes:
        for b in cluster.nodes:
            if a is b:
                continue
            # BatchMode: a password or host-key prompt would fail instead of waiting.
            run = a.run("ssh", "-v", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", b.ip, "cat /etc/hpcc/env")
            assert run.returncode == 0, (a.name, b.name, run.stderr)
            assert f"HPCC_NODE={b.name}" in run.stdout.splitlines(), (a.name, b.name, run.stdout)
            assert_certified(run, cluster.name, b)


def test_sshd_refuses_password_login(cluster):
    head = cluster.head
    for target in cluster.compute:
        run = head.run(
            "ssh", "-o", "BatchMode=yes", "-o", "PubkeyAuthentication=no", "-o", "ConnectTimeout=5", target.ip, "true"
        )
        # The methods the server still offers once the key is refused: publickey only.
        assert run.returncode == 255 and "Permission denied (publickey)." in run.stderr, (target.name, run.stderr)
        effective = target.run("/usr/sbin/sshd", "-T").stdout.lower().splitlines()
        assert "passwordauthentication no" in effective and "kbdinteractiveauthentication no" in effective


def test_hostfiles_list_every_compute_node_once_with_its_slots(cluster):
    compute, slots = [n.ip for n in cluster.compute], cluster.slots
    assert slots == 32  # c6i.16xlarge: physical cores
    for node in cluster.nodes:
        assert node.file("/etc/hpcc/hostfile").read_text().splitlines() == [f"{ip} slots={slots}" for ip in compute]
        assert node.file("/etc/hpcc/hostfile.mpich").read_text().splitlines() == [f"{ip}:{slots}" for ip in compute]
        assert node.file("/etc/hpcc/hosts").read_text().splitlines() == compute
        env = dict(
            line.split("=", 1)
            for line in node.file("/etc/hpcc/env").read_text().splitlines()
            if "=" in line and not line.startswith("#")
        )
        assert (env["MASTER_ADDR"], env["NNODES"], env["NPROC_PER_NODE"]) == (compute[0], str(len(compute)), str(slots))
        assert env["HPCC_HOSTS"] == ",".join(f"{ip}:{slots}" for ip in compute)
        assert env["FI_PROVIDER"] == "tcp"
        expected_rank = str(compute.index(node.ip)) if node.role == "compute" else None
        assert env.get("NODE_RANK") == expected_rank, node.name


def _names(output: str) -> list[str]:
    return sorted(line.split("=", 1)[1] for line in output.splitlines() if line.startswith("HPCC_NODE="))


def test_mpirun_with_the_emitted_hostfile_runs_on_every_node(cluster):
    run = cluster.on_head(
        "mpirun",
        "--allow-run-as-root",
        "--hostfile",
        "/etc/hpcc/hostfile",
        "--map-by",
        "ppr:1:node",
        "grep",
        "^HPCC_NODE=",
        "/etc/hpcc/env",
    )
    assert run.returncode == 0, run.stderr
    assert "ERROR" not in run.stderr, run.stderr  # e.g. PMIx when nodes cannot be told apart
    assert _names(run.stdout) == [n.name for n in cluster.compute]


def test_hpcc_mpirun_runs_every_slot_on_every_node(cluster):
    """No -np: the hostfile's slots (32 ranks on each node). Each rank stays up 2 s, as a job's would: Open MPI 4.1.4's
    orted can hang its exit for good when dozens of ranks a node end while it is still starting the others (seen
    here about one run in ten with a bare grep, stuck in orte_odls_base_default_kill_local_procs)."""
    run = cluster.on_head("hpcc-mpirun", "sh", "-c", "grep ^HPCC_NODE= /etc/hpcc/env && sleep 2")
    assert run.returncode == 0, run.stderr
    assert "ERROR" not in run.stderr, run.stderr
    assert _names(run.stdout) == sorted([n.name for n in cluster.compute] * cluster.slots)


def test_hpcc_mpirun_runs_an_mpi_program_over_the_cluster_flags(cluster):
    """An MPI_Allreduce across the nodes, over the transport the cluster's flags choose (btl tcp here); 2 ranks a
    node, not the 32 slots: 64 busy-polling MPI ranks would not fit 2 cores."""
    program = mpi_hello(cluster.workdir / "jobs")
    run = cluster.on_head("hpcc-mpirun", "--map-by", "ppr:2:node", str(program))
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:])
    assert "ERROR" not in run.stderr, run.stderr
    hosts = [hostname(n) for n in cluster.compute]  # mpirun passes the ranks no HPCC_NODE: their hostnames
    assert mpi_ranks(run.stdout, world=2 * len(hosts), by="host") == sorted(hosts * 2), run.stdout


def test_torchrun_all_reduce_across_every_node_from_the_emitted_environment(cluster):
    work = cluster.workdir / "torch"
    results = work / "results"
    results.mkdir(parents=True)
    (work / "all_reduce.py").write_text(f"RESULTS = {str(results)!r}\n" + ALL_REDUCE)
    env = node_env(cluster.head)
    env.pop("TORCHRUN", None)
    # As a user would: activate the environment that has PyTorch (here, the project's venv), then launch.
    # The compute nodes get sshd's default PATH, so this checks that hpcc-torchrun finds torchrun for them.
    # 2 ranks per node, not the 32 slots of a c6i.16xlarge: 64 PyTorch processes would not fit 2 cores.
    run = subprocess.run(
        cluster.head.enter(
            "bash", "-lc", f"cd {work} && PATH={VENV_BIN}:$PATH hpcc-torchrun --nproc-per-node 2 all_reduce.py"
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-3000:])
    world = 2 * len(cluster.compute)
    assert sorted(p.name for p in results.iterdir()) == [f"rank-{r}" for r in range(world)]
    lines = sorted(p.read_text() for p in results.iterdir())
    expected = sorted(f"{n.name} {world} {world * (world + 1) / 2}" for n in cluster.compute for _ in range(2))
    assert lines == expected


def cluster_hosts_version(cluster) -> int:
    """The membership generation the controller published last (nodes report the one they applied)."""
    return cluster.membership_generation()


def current_status(cluster, node, timeout: float = 60) -> dict:
    """The node's status once it reports the current membership (its agent reports a tick after applying it)."""
    deadline = time.time() + timeout
    while True:
        status = cluster.status(node.name)
        if status.get("hostsVersion") == cluster_hosts_version(cluster) or time.time() > deadline:
            return status
        time.sleep(1)


def test_running_the_bootstrap_again_changes_nothing(cluster):
    """On the head and a compute node at once (an operator rerunning it across the cluster): each node's files,
    its agent and its readiness stay as they were."""
    nodes = [cluster.node("head"), cluster.node("a-001")]
    settle(cluster, quiet=13)  # no agent tick (10-12.5 s) left with work: a rerun has nothing new to apply
    before = {n.name: fingerprint(n, WRITTEN) for n in nodes}
    for n in nodes:
        assert any(
            "/hpcc-" in p or p.endswith("id_hpcc") for p in before[n.name]
        )  # what the bootstrap wrote is watched
        assert "/usr/local/sbin/hpcc-node" in before[n.name]
    running = {n.name: agent_pids(n) for n in nodes}
    assert all(len(pids) == 1 for pids in running.values()), running
    with ThreadPoolExecutor(len(nodes)) as pool:
        codes = dict(zip([n.name for n in nodes], pool.map(cluster.rerun, nodes), strict=True))
    assert set(codes.values()) == {0}, f"{codes}\n{cluster.diagnose()}"
    for n in nodes:
        after = fingerprint(n, WRITTEN)
        changed = sorted(p for p in before[n.name].keys() | after.keys() if before[n.name].get(p) != after.get(p))
        assert not changed, (
            n.name,
            changed,
            cluster.membership()["generation"],
            cluster.log(n)[-3000:],
            cluster.controller_log()[-2000:],
        )
        assert agent_pids(n) == running[n.name]  # no second agent, the first one untouched
        assert cluster.status(n.name)["phase"] == "ready"
    run = cluster.head.run("ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", cluster.compute[0].ip, "true")
    assert run.returncode == 0, run.stderr


def test_the_cluster_key_logs_in_from_inside_the_vpc_only(cluster, tmp_path):
    """The host's bridge address (10.200.0.1) is outside the box's "VPC" (cloud.FLEET_CIDR): the same key that
    works between the nodes is refused from there, as from the internet on a public head node."""
    key = tmp_path / "id_hpcc"
    key.write_bytes(cluster.head.file("/root/.ssh/id_hpcc").read_bytes())
    key.chmod(0o600)
    target = cluster.compute[0]
    options = [
        "-F",
        "/dev/null",
        "-o",
        "BatchMode=yes",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "ConnectTimeout=5",
        "-i",
        str(key),
    ]
    outside = subprocess.run(["ssh", *options, f"root@{target.ip}", "true"], capture_output=True, text=True, timeout=30)
    assert outside.returncode == 255 and "Permission denied" in outside.stderr, outside.stderr
    inside = cluster.head.run("ssh", *options[:-1], "/root/.ssh/id_hpcc", f"root@{target.ip}", "true")
    assert inside.returncode == 0, inside.stderr
    line = target.file("/root/.ssh/authorized_keys").read_text().splitlines()
    assert line == [f'from="{FLEET_CIDR}" {cluster.head.file("/root/.ssh/id_hpcc.pub").read_text().strip()}']
