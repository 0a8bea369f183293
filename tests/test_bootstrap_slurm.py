"""The slurm step's shell functions against stand-ins (the box runs them for real: tests/box/test_box_slurm.py):
the head's slurm.conf from the membership and settings, and the agent's drain/resume of failed nodes."""

import json

from tests.bootstrap_shell import context, run
from tests.test_bootstrap_steps import COMMON, preamble, tool

NODE = "CPUs=96 Boards=1 SocketsPerBoard=2 CoresPerSocket=24 ThreadsPerCore=2 RealMemory=380000 Gres=gpu:8"


def head_ctx(tmp_path, **changes):
    return context("p5-llm-head", log_path=str(tmp_path / "bootstrap.log"), scheduler="slurm", slurm_node=NODE,
                   slurm_gpus=8, **changes)


def test_the_heads_slurm_conf_lists_every_compute_node_at_its_address(tmp_path):
    script = ('HPCC_HOSTS=(10.0.0.5 10.0.0.6 10.0.0.7)\nhostname() { echo ip-10-0-0-5; }\n'
              'HPCC_SLURM_CGROUP=0 slurm_conf')
    out = run(COMMON + ["identify", "slurm"], script, head_ctx(tmp_path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "SlurmctldHost=ip-10-0-0-5(10.0.0.5)" in lines and "SlurmctldParameters=enable_configless" in lines
    assert [line for line in lines if line.startswith("NodeName=")] == [
        f"NodeName=compute-000 NodeAddr=10.0.0.6 {NODE}", f"NodeName=compute-001 NodeAddr=10.0.0.7 {NODE}"]
    assert "GresTypes=gpu" in lines and "TreeWidth=65533" in lines
    assert "ProctrackType=proctrack/linuxproc" in lines  # the override; cgroup without it:
    out = run(COMMON + ["identify", "slurm"], script.replace("HPCC_SLURM_CGROUP=0 ", ""), head_ctx(tmp_path))
    assert "ProctrackType=proctrack/cgroup" in out.stdout.splitlines()
    assert lines[-1] == "PartitionName=compute Nodes=ALL Default=YES MaxTime=INFINITE State=UP"


def status(phase: str, step: str) -> str:
    return json.dumps({"node": "x", "phase": phase, "step": step}).replace('"', '\\"')


def test_the_agent_drains_failed_nodes_resumes_its_own_and_leaves_other_reasons(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    p = "/hpcc/p5-llm/nodes"
    tool(bin_dir, "sinfo", """case "$*" in
  *-N*) printf '%s\\n' 'compute-000|idle|none' 'compute-001|idle*|Not responding' \\
          'compute-002|drained|hpcc: bootstrap failed at efa' 'compute-003|drained|admin: bad DIMM' ;;
  *) echo 'idle compute-000' ;;
esac
""")
    tool(bin_dir, "scontrol", f'echo "$*" >>{tmp_path}/scontrol\n')
    tool(bin_dir, "aws", f"""echo "$*" >>{tmp_path}/aws
case "$*" in
  *get-parameters*) printf '%s\\t%s\\n' {p}/compute-001 "{status('failed', 'join')}" \\
      {p}/compute-002 "{status('ready', 'sync')}" {p}/compute-003 "{status('ready', 'sync')}" ;;
esac
""")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    script = preamble(tmp_path) + f"HPCC_NODE=head\nHPCC_STEP=sync\nHPCC_SLURM_STATES={tmp_path}/states\nslurm_watch\n"
    out = run(COMMON + ["identify", "slurm"], script, head_ctx(tmp_path), env=env)
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert (tmp_path / "states").read_text() == '"idle": "compute-000"\n'  # reported, for the status's "slurm"
    updates = (tmp_path / "scontrol").read_text().splitlines()
    assert updates == ["update NodeName=compute-001 State=DRAIN Reason=hpcc: bootstrap failed at join",
                       "update NodeName=compute-002 State=RESUME"]  # compute-003: an admin's reason, left alone
    reads = [c for c in (tmp_path / "aws").read_text().splitlines() if "get-parameters" in c]
    assert len(reads) == 1 and "compute-000" not in reads[0]  # only the nodes Slurm cannot use are read
