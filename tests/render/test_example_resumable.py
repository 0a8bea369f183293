"""examples/slurm/train-resumable.sbatch run as Slurm would run it (stand-in `scontrol` and `srun`): a first run
starts from nothing, a requeued run (same job id, SLURM_RESTART_COUNT 1) resumes from the newest complete
checkpoint, never a half-written one, and the training script gets the checkpoint directory and the rendezvous."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SBATCH = ROOT / "examples" / "slurm" / "train-resumable.sbatch"


def _tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def _run(tmp_path: Path, restart: int) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    _tool(
        bin_dir,
        "scontrol",
        'case "$1 $2" in "show hostnames") printf "gpu-000\\ngpu-001\\n" ;;'
        ' "show node") echo "NodeName=gpu-000 NodeAddr=10.0.0.6 State=IDLE" ;; esac\n',
    )
    # srun: one task here, the task's own environment as Slurm would give it
    _tool(bin_dir, "srun", 'shift; SLURM_NODEID=0 exec "$@"\n')
    _tool(bin_dir, "torchrun", 'echo "torchrun $* ckpt=$HPCC_CHECKPOINT_DIR resume=$HPCC_RESUME_FROM"\n')
    (tmp_path / "env").write_text("NPROC_PER_NODE=8\nMASTER_PORT=29500\n")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "HPCC_ENV": str(tmp_path / "env"),
        "CHECKPOINT_ROOT": str(tmp_path / "ckpt"),
        "SLURM_JOB_NAME": "hpcc-resumable",
        "SLURM_JOB_ID": "41",
        "SLURM_JOB_NODELIST": "gpu-[000-001]",
        "SLURM_NNODES": "2",
        "SLURM_RESTART_COUNT": str(restart),
    }
    return subprocess.run(
        ["bash", str(SBATCH), "train.py", "--lr", "1e-4"], capture_output=True, text=True, env=env, timeout=60
    )


def test_a_first_run_starts_fresh_and_a_requeued_one_resumes_from_the_newest_checkpoint(tmp_path):
    first = _run(tmp_path, 0)
    assert first.returncode == 0, first.stderr
    ckpt = tmp_path / "ckpt" / "hpcc-resumable-41"
    assert "restart 0" in first.stdout and "resuming from the start" in first.stdout
    assert (
        f"torchrun --nnodes 2 --node-rank 0 --nproc-per-node 8 --master-addr 10.0.0.6 --master-port 29500 "
        f"train.py --lr 1e-4 ckpt={ckpt} resume="
    ) in first.stdout
    for name in ("step-2.pt", "step-10.pt", "step-9.pt", "step-11.pt.tmp"):  # 11 was being written
        (ckpt / name).write_text("x")
    again = _run(tmp_path, 1)
    assert again.returncode == 0, again.stderr
    assert "restart 1" in again.stdout and f"resume={ckpt}/step-10.pt" in again.stdout


def test_the_example_asks_slurm_to_requeue_it():
    text = SBATCH.read_text()
    assert "#SBATCH --requeue" in text and "#SBATCH --open-mode=append" in text and "SLURM_RESTART_COUNT" in text
