"""One ring all-reduce over a node group, run by `hpcc check fabric` under torchrun on every node of the group
(static ranks): NCCL where the node has GPUs, gloo on CPU. Standalone (torch and the standard library), so
torchrun runs it by path from the bundle, /opt/hpcc/current/hpcc_node/jobs/allreduce.py.

The pairs of the fabric check measure links; this one collective shows the group works as a whole (every rank
reaches the ring, the backend and the fabric variables in /etc/hpcc/env are usable, the sum is right). Rank 0
prints one line, read by infra/ops/check_fabric.py:

    ALLREDUCE ranks=<world> bytes=<per rank> algbw=<GB/s> busbw=<GB/s>

busbw is nccl-tests' bus bandwidth of an all-reduce, algbw x 2(n-1)/n, comparable across rank counts
(https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md). A wrong sum exits 3 naming the rank;
any other failure is torch's own error and a non-zero exit.
"""

import argparse
import os
import sys
import time


def bus_bandwidth(nbytes: int, seconds: float, ranks: int) -> tuple:
    """(algbw, busbw) in GB/s for one all-reduce of nbytes per rank taking seconds."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (ranks - 1) / ranks


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bytes", type=int, default=16 << 20, help="bytes per rank (float32 elements x 4)")
    p.add_argument("--iterations", type=int, default=5)
    args = p.parse_args(argv)

    import torch
    import torch.distributed as dist

    gpu = torch.cuda.is_available()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if gpu:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if gpu else "gloo")
    rank, ranks = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local) if gpu else torch.device("cpu")
    elements = max(1, args.bytes // 4)
    x = torch.empty(elements, dtype=torch.float32, device=device)

    def once() -> None:
        x.fill_(rank + 1)
        dist.all_reduce(x)
        if gpu:
            torch.cuda.synchronize()

    def wrong() -> bool:
        want = ranks * (ranks + 1) / 2
        if bool(torch.all(x == want)):
            return False
        print(f"ALLREDUCE-WRONG rank={rank} got={x[0].item()} want={want}", file=sys.stderr, flush=True)
        return True

    once()  # warm-up: connections are set up on the first collective
    if wrong():
        return 3
    start = time.perf_counter()
    for _ in range(args.iterations):
        once()
    seconds = (time.perf_counter() - start) / args.iterations
    if wrong():
        return 3
    algbw, busbw = bus_bandwidth(elements * 4, seconds, ranks)
    if rank == 0:
        print(f"ALLREDUCE ranks={ranks} bytes={elements * 4} algbw={algbw:.3f} busbw={busbw:.3f}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
