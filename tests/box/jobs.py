"""The training-job stand-ins the box modules launch: a C MPI program (`MPI_Allreduce` over every rank) and a
torch.distributed all-reduce (gloo), each checking the sum on every rank, and the parsing of what they print."""

import subprocess
import textwrap
from pathlib import Path

MPI_PROGRAM = textwrap.dedent("""
    #include <mpi.h>
    #include <stdio.h>
    #include <stdlib.h>
    #include <unistd.h>
    int main(int argc, char **argv) {
        int rank, size, sum = 0, one;
        char host[256];
        MPI_Init(&argc, &argv);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        one = rank + 1;
        MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        gethostname(host, sizeof host);
        printf("rank %d of %d on %s %s sum %d\\n", rank, size, host, getenv("HPCC_NODE"), sum);
        MPI_Finalize();
        return sum == size * (size + 1) / 2 ? 0 : 1;
    }
""")

ALL_REDUCE = textwrap.dedent("""
    import os, pathlib, torch, torch.distributed as dist
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    expected = world * (world + 1) / 2
    assert value.item() == expected, (rank, value.item(), expected)  # every rank checks the sum
    pathlib.Path(RESULTS, f"rank-{rank}").write_text(f"{os.environ['HPCC_NODE']} {world} {value.item()}")
    dist.destroy_process_group()
""")


def mpi_hello(work: Path) -> Path:
    """MPI_PROGRAM compiled with mpicc under `work` (a directory every node sees), once per box."""
    work.mkdir(parents=True, exist_ok=True)
    binary = work / "mpi_hello"
    if not binary.exists():
        (work / "mpi_hello.c").write_text(MPI_PROGRAM)
        subprocess.run(["mpicc", "-o", str(binary), str(work / "mpi_hello.c")], check=True, timeout=120)
    return binary


def mpi_ranks(output: str, world: int, by: str = "node") -> list[str]:
    """Where every rank MPI_PROGRAM printed ran, sorted: its HPCC_NODE (`by="node"`: a Slurm job's environment
    has it) or its hostname (`by="host"`). Each line must name the whole world and its sum (a rank that saw a
    smaller world or a wrong sum fails here, naming the line)."""
    lines = [line for line in output.splitlines() if line.startswith("rank ")]
    for line in lines:
        assert f" of {world} " in line and line.endswith(f" sum {world * (world + 1) // 2}"), (world, line)
    return sorted(line.split()[{"host": 5, "node": 6}[by]] for line in lines)
