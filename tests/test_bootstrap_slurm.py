"""The slurm step's shell functions against stand-ins (the box runs them for real: tests/box/test_box_slurm.py):
the head's slurm.conf from the membership and settings (the agent's drain/resume: tests/test_agent_tick.py)."""

from tests.bootstrap_shell import context, run
from tests.test_bootstrap_steps import COMMON

NODE = "CPUs=96 Boards=1 SocketsPerBoard=2 CoresPerSocket=24 ThreadsPerCore=2 RealMemory=380000 Gres=gpu:8"


def head_ctx(tmp_path, **changes):
    return context("p5-llm-head", log_path=str(tmp_path / "bootstrap.log"), scheduler="slurm", slurm_node=NODE,
                   slurm_gpus=8, **changes)


def test_the_heads_slurm_conf_lists_every_compute_node_at_its_address(tmp_path):
    script = ('HPCC_HOSTS=(10.0.0.5 10.0.0.6 10.0.0.7)\nhostname() { echo ip-10-0-0-5; }\n'
              'HPCC_SLURM_CGROUP=0 slurm_conf')
    out = run(COMMON + ["identify", "health", "slurm"], script, head_ctx(tmp_path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "SlurmctldHost=ip-10-0-0-5(10.0.0.5)" in lines and "SlurmctldParameters=enable_configless" in lines
    assert [line for line in lines if line.startswith("NodeName=")] == [
        f"NodeName=compute-000 NodeAddr=10.0.0.6 {NODE}", f"NodeName=compute-001 NodeAddr=10.0.0.7 {NODE}"]
    assert "GresTypes=gpu" in lines and "TreeWidth=65533" in lines
    assert "ProctrackType=proctrack/linuxproc" in lines  # the override; cgroup without it:
    out = run(COMMON + ["identify", "health", "slurm"], script.replace("HPCC_SLURM_CGROUP=0 ", ""), head_ctx(tmp_path))
    assert "ProctrackType=proctrack/cgroup" in out.stdout.splitlines()
    assert lines[-1] == "PartitionName=compute Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
