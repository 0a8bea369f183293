"""A booted three-node box: SSH, hostfiles, Open MPI and torchrun across the nodes, and a rerun that changes nothing.

Not checked here (no hardware): the Lustre mount (no Lustre server; the steps are skipped with
HPCC_SKIP_STEPS=lustre,mount) and EFA itself (no device; see test_box_faults for the EFA failure path).
"""

import subprocess
import textwrap

from tests.box.harness import fingerprint


def test_every_node_reaches_every_other_by_ssh_with_no_password_or_prompt(cluster):
    for a in cluster.nodes:
        for b in cluster.nodes:
            if a is b:
                continue
            run = a.run("ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", b.ip, "grep ^HPCC_NODE= /etc/hpcc/env")
            assert run.returncode == 0, (a.name, b.name, run.stderr)
            assert run.stdout.strip() == f"HPCC_NODE={b.name}"


def test_sshd_refuses_password_login(cluster):
    head, target = cluster.nodes[0], cluster.nodes[1]
    run = head.run("ssh", "-o", "BatchMode=yes", "-o", "PubkeyAuthentication=no", "-o",
                   "PreferredAuthentications=password,keyboard-interactive", target.ip, "true")
    assert run.returncode == 255 and "Permission denied" in run.stderr
    effective = target.run("/usr/sbin/sshd", "-T").stdout.lower().splitlines()
    assert "passwordauthentication no" in effective and "kbdinteractiveauthentication no" in effective


def test_hostfiles_list_every_compute_node_once_with_its_slots(cluster):
    compute = [n.ip for n in cluster.nodes[1:]]
    for node in cluster.nodes:
        assert node.file("/etc/hpcc/hostfile").read_text().splitlines() == [f"{ip} slots=2" for ip in compute]
        assert node.file("/etc/hpcc/hostfile.mpich").read_text().splitlines() == [f"{ip}:2" for ip in compute]
        assert node.file("/etc/hpcc/hosts").read_text().splitlines() == compute
    ranks = {n.file("/etc/hpcc/env").read_text().split("NODE_RANK=")[1].split()[0] for n in cluster.nodes[1:]}
    assert ranks == {"0", "1"} and "NODE_RANK" not in cluster.nodes[0].file("/etc/hpcc/env").read_text()


def _names(output: str) -> list[str]:
    return sorted(line.split("=", 1)[1] for line in output.splitlines() if line.startswith("HPCC_NODE="))


def test_mpirun_with_the_emitted_hostfile_runs_on_every_node(cluster):
    head = cluster.nodes[0]
    run = head.run("mpirun", "--allow-run-as-root", "--hostfile", "/etc/hpcc/hostfile", "--map-by", "ppr:1:node",
                   "grep", "^HPCC_NODE=", "/etc/hpcc/env", timeout=180)
    assert run.returncode == 0, run.stderr
    assert _names(run.stdout) == ["compute-000", "compute-001"]


def test_hpcc_mpirun_runs_every_slot_on_every_node(cluster):
    head = cluster.nodes[0]
    run = head.run("hpcc-mpirun", "grep", "^HPCC_NODE=", "/etc/hpcc/env", timeout=180)
    assert run.returncode == 0, run.stderr
    assert _names(run.stdout) == ["compute-000", "compute-000", "compute-001", "compute-001"]


ALL_REDUCE = textwrap.dedent("""
    import os, pathlib, torch, torch.distributed as dist
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    expected = world * (world + 1) / 2
    assert value.item() == expected, (rank, value.item(), expected)
    pathlib.Path(os.environ["RESULTS"], f"rank-{rank}").write_text(f"{world} {value.item()}")
    dist.destroy_process_group()
""")


def test_torchrun_all_reduce_across_every_node_from_the_emitted_environment(cluster):
    work = cluster.workdir / "torch"
    (work / "results").mkdir(parents=True)
    (work / "all_reduce.py").write_text(ALL_REDUCE.replace('os.environ["RESULTS"]', repr(str(work / "results"))))
    head = cluster.nodes[0]
    env = dict(__import__("tests.box.harness", fromlist=["node_env"]).node_env(head))
    env["TORCHRUN"] = str(__import__("tests.box.harness", fromlist=["VENV_BIN"]).VENV_BIN / "torchrun")
    run = subprocess.run(head.enter("bash", "-c", f"cd {work} && hpcc-torchrun all_reduce.py"), env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    results = sorted(p.name for p in (work / "results").iterdir())
    assert results == ["rank-0", "rank-1", "rank-2", "rank-3"]  # 2 nodes x NPROC_PER_NODE=2
    assert {p.read_text() for p in (work / "results").iterdir()} == {"4 10.0"}


def test_running_the_bootstrap_again_changes_nothing(cluster):
    node = cluster.nodes[2]
    watched = ["/etc/hpcc", "/root/.ssh", "/etc/ssh/ssh_config.d", "/etc/ssh/sshd_config.d", "/etc/profile.d/hpcc.sh"]
    before = fingerprint(node, watched)
    assert cluster.rerun(node) == 0
    assert fingerprint(node, watched) == before
    assert cluster.status(node.name)["phase"] == "ready"
