"""Slurm in the shared fleet box (tests/box/shared.py, `scheduler: slurm`): slurmctld on the head, configless slurmd
on every compute node, munge with the key the head generated; real jobs through srun and sbatch (the examples in
examples/slurm), and no secret in user data, logs or status. The nodes day 2 adds and replaces, in Slurm:
tests/box/test_box_day2.py (a, b, c)."""

import json
import pwd
import stat
import subprocess
import time

import hostlist
import pytest

from hpcc_contract.names import Paths
from tests.box.cloud import FleetBox
from tests.box.jobs import ALL_REDUCE, mpi_hello, mpi_ranks
from tests.box.node import hostname, node_env

pytestmark = [pytest.mark.box, pytest.mark.long]
HEAD_EXAMPLES = "/opt/hpcc/current/examples/slurm"  # the bundle ships examples/slurm/ (infra/bundle.py)


@pytest.fixture
def slurm(fleet):
    """The shared box at its baseline (tests/box/conftest.py)."""
    return fleet


def node_states(box: FleetBox) -> dict[str, tuple[str, str]]:
    out = box.on_head("sinfo", "-h", "-N", "-o", "%N|%T|%E").stdout
    return {n: (s, r) for n, s, r in (line.split("|", 2) for line in out.splitlines() if line)}


def wait_states(box: FleetBox, want, timeout: float = 90) -> dict:
    deadline = time.time() + timeout
    while True:
        states = node_states(box)
        if want(states):
            return states
        if time.time() > deadline:
            raise AssertionError(f"sinfo after {timeout} s: {states}\n{box.diagnose()}")
        time.sleep(1)


def sbatch(box: FleetBox, script: str, *args: str, export: str = "ALL") -> str:
    """`sbatch --wait OPTIONS... /opt/hpcc/current/examples/slurm/SCRIPT PROGRAM...` on the head, as a user there
    would (the bundle put the examples there); the job's output.
    `args`: sbatch options, then "--", then the script's arguments."""
    options, program = (args[: args.index("--")], args[args.index("--") + 1 :]) if "--" in args else (args, ())
    work = box.workdir / "jobs"
    work.mkdir(exist_ok=True)
    try:
        run = _sbatch_wait(box, work, export, options, script, program)
    except subprocess.TimeoutExpired as e:
        job = (e.output.decode() if isinstance(e.output, bytes) else e.output or "").strip().split(";")[0]
        queue = box.on_head("squeue", "-h", "-o", "%i %j %T %R %N").stdout
        if job:
            box.on_head("scancel", job)
        raise AssertionError(
            f"sbatch {script} (job {job or '?'}) still running after {e.timeout} s; the queue: {queue}\n"
            + box.diagnose()
        ) from None
    job = run.stdout.strip().split(";")[0]
    output = (work / f"{job}.out").read_text() if job and (work / f"{job}.out").exists() else ""
    if run.returncode != 0:  # the whole output (an assertion's repr is cut), and Slurm's record of the job
        record = box.on_head("scontrol", "-o", "show", "job", job).stdout if job else ""
        raise AssertionError(
            f"sbatch {script}: exit {run.returncode}\nstderr: {run.stderr}\noutput:\n{output}\n{record}"
        )
    return output


def _sbatch_wait(box: FleetBox, work, export: str, options, script: str, program) -> subprocess.CompletedProcess:
    return subprocess.run(
        box.head.enter(
            "sbatch",
            "--wait",
            "--parsable",
            f"--export={export}",
            f"--chdir={work}",
            f"--output={work}/%j.out",
            *options,
            f"{HEAD_EXAMPLES}/{script}",
            *program,
        ),
        env=node_env(box.head),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_a_every_compute_node_is_idle_and_srun_runs_once_on_each(slurm):
    names = sorted(n.name for n in slurm.compute)
    wait_states(slurm, lambda s: sorted(s) == names and all(v[0] == "idle" for v in s.values()))
    run = slurm.on_head("srun", "-N", str(len(names)), "hostname")
    assert run.returncode == 0, run.stderr
    assert sorted(run.stdout.split()) == sorted(hostname(n) for n in slurm.compute)
    deadline = time.time() + 40  # the head's agent puts Slurm's view into its status within a tick
    while slurm.status("head").get("slurm") != {"idle": hostlist.collect_hostlist(names)}:
        assert time.time() < deadline, slurm.status("head")
        time.sleep(1)
    conf = slurm.head.file("/etc/slurm/slurm.conf").read_text()
    assert "MpiDefault=pmix" in conf and "SlurmctldParameters=enable_configless" in conf
    for node in slurm.compute:
        assert not node.file("/etc/slurm/slurm.conf").exists()  # configless: fetched, cached under /run/slurm


def test_b_sbatch_runs_an_mpi_program_across_every_compute_node(slurm):
    nodes = len(slurm.compute)
    out = sbatch(
        slurm, "mpi.sbatch", "-N", str(nodes), "--ntasks-per-node", "2", "--", str(mpi_hello(slurm.workdir / "jobs"))
    )
    assert mpi_ranks(out, world=2 * nodes) == sorted([n.name for n in slurm.compute] * 2), out


def test_c_sbatch_runs_torchrun_all_reduce_across_every_compute_node(slurm):
    work = slurm.workdir / "jobs"
    results = work / "torch-results"
    results.mkdir(parents=True, exist_ok=True)
    (work / "all_reduce.py").write_text(f"RESULTS = {str(results)!r}\n" + ALL_REDUCE)
    nodes = len(slurm.compute)
    # 2 ranks a node, not the 32 slots: 64 PyTorch processes would not fit 2 cores.
    sbatch(slurm, "torchrun.sbatch", "-N", str(nodes), "--", str(work / "all_reduce.py"), export="ALL,NPROC=2")
    world = 2 * nodes
    lines = sorted(p.read_text() for p in results.iterdir())
    assert lines == sorted(f"{n.name} {world} {world * (world + 1) / 2}" for n in slurm.compute for _ in range(2))


def test_d_the_munge_and_ssh_keys_appear_in_no_user_data_log_or_status(slurm):
    secrets = slurm.client("secretsmanager")
    munge = secrets.get_secret_value(SecretId=Paths(slurm.name).munge_secret)["SecretString"]
    ssh_key = secrets.get_secret_value(SecretId=Paths(slurm.name).ssh_secret)["SecretString"]
    needles = [munge[:40], munge[-40:]] + [line for line in ssh_key.splitlines()[1:-1] if len(line) > 20]
    texts = dict(slurm.scripts())
    for node in slurm.nodes:
        texts[f"{node.name} status"] = json.dumps(slurm.status(node.name))
        for log in ("/var/log/hpcc-bootstrap.log", "/var/log/slurm/slurmctld.log", "/var/log/slurm/slurmd.log"):
            path = node.file(log)
            texts[f"{node.name} {log}"] = path.read_text(errors="replace") if path.exists() else ""
        out = slurm.workdir / f"{node.script}.out"
        texts[f"{node.name} output"] = out.read_text(errors="replace") if out.exists() else ""
    leaks = [name for name, text in texts.items() if any(n in text for n in needles)]
    assert not leaks
    for node in slurm.nodes[:3]:  # the key file: 0400, munge's; the decoded secret
        key = node.file("/etc/munge/munge.key")
        st = key.stat()
        assert (stat.S_IMODE(st.st_mode), pwd.getpwuid(st.st_uid).pw_name) == (0o400, "munge"), node.name
        assert len(key.read_bytes()) == 1024
