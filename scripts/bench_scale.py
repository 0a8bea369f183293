#!/usr/bin/env python3
"""Issue 38's scale simulator (`make bench`): the head at 64, 512 and 4,096 nodes, on the code as it stands.

What is real and what is modelled (scripts/scale/):
- The controller is the project's own: `hpcc_node/controller/loop.py` `build_step` and `forever` (observe, decide,
  act, the ledger, the membership, the fleet requests, the Slurm reads through `slurm_records.Reader`), on a
  virtual clock. Only its I/O is replaced: in-memory EC2, DynamoDB, S3 and Slurm (scale/ec2.py, scale/stores.py)
  that answer as the real ones do (conditional writes, ETags, 304/412, pages of 1,000 keys and 1 MB scans), each
  call, and each page, first costing one in-process boto3 call's latency (scale/world.py: measured against a local
  moto server, 4-6 ms median; AWS itself ASSUMED at 20 ms median, 5-100 ms; `scontrol` 0.1 s). observe.reports'
  thread pool (READERS status reads at once) runs on worker actors of the same clock (scale/kernel.py Executor):
  16 reads in flight cost the time of 16 concurrent reads.
- EC2's launch bucket (1,000 instances, 2 a second) charges every CreateFleet; an all-or-nothing request larger than
  what is left is refused (RequestLimitExceeded), as is one above the capacity left (InsufficientInstanceCapacity).
- The head's certificate signing is the real `hpcc_node.certs.Head.sign_pending` (ssh-keygen replaced by a writer
  of well-formed certificate lines) with the real `Aws.call`/`get_parameters` through the head's pacer; its S3
  client unpaced, as the head agent's is, `certs.PARALLEL` calls at once on worker actors; its S3 calls cost what
  the real signer's client costs (hpcc_node/certs_agent.py signer_s3: in process where the head agent's Python has
  boto3, as templates/steps/ runs it under the controller's: the controller's in-process latency), every other call
  one `aws` CLI process's latency (0.4-1.5 s, median ~0.6 s).
- Each compute node (scale/node.py) follows its bootstrap's calls (settings, its name from its tag, the membership,
  one status write per step of `infra/render/steps.py`, the certificate wait of `hpcc_node/certs_boot.py`, the
  munge key, slurmd) and then the agent's tick (`hpcc_node/agent.py` `tick_seconds` at `infra/render/pacing.py`
  `sync_seconds`, the membership's conditional GET, apply, the certificate's GET, the status write of
  `hpcc_node/status.py`'s body) and heartbeat thread, each call an `aws` CLI process; SSM and Secrets Manager
  calls through `pace_wait_ms`, S3's not (read from templates/steps/retry.sh.j2 and hpcc_node/agent.py), and the
  munge key re-read in an apply only if templates/steps/slurm.sh.j2 does. These are re-enacted from the modules,
  not run: the agent's class needs a node's files and processes.

Not modelled (so not printed, or bounded): API request-rate buckets (EC2's, S3's 3,500/5,500 a second per prefix,
SSM's 40/s: the controller's calls, 16 at once at most, and the paced nodes stay below them), a hung call other than
the one the "one hung call" row plants (HUNG_CALL_SECONDS: clients.READ_SECONDS x clients.ATTEMPTS), S3 down for
the nodes (the S3-down row fails the controller's S3 calls only), the head's own heartbeat and Slurm watch, an
instance's boot work (an assumed 150 s pending and 420 s bootstrap, as scripts/bench_ready.py), Slurm's jobs (none
run).

Usage: bench_scale.py [--sizes 64,512,4096] [--seed N]. Prints each of issue 38's targets MET, MISS or ---- (not
the simulator's to check) at the largest size; exit 1 when one is missed."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from scale import scenarios  # noqa: E402 - after sys.path gets the checkout
from scale.report import misses, table, targets  # noqa: E402 - after sys.path gets the checkout
from scale.world import Model  # noqa: E402 - after sys.path gets the checkout

DEATHS = 64


def run_size(n: int, seed: int = 0) -> dict[str, Any]:
    model = Model(n, seed=seed)
    deaths = min(DEATHS, n)
    runs = {
        "bring_up": lambda: scenarios.bring_up(model),
        "settled": lambda: scenarios.settled(model),
        "deaths": lambda: scenarios.deaths(model, deaths, None, horizon=2 * scenarios.HOUR),
        "deaths_63": lambda: scenarios.deaths(model, deaths, deaths - 1),
        "verdicts": lambda: scenarios.verdicts(model),
        "certificates": lambda: scenarios.certificates(model),
        "s3_down": lambda: scenarios.s3_down(model),
        "hung": lambda: scenarios.hung_call(model),
    }
    out: dict[str, Any] = {"timeout": model.timers.heartbeat_timeout_seconds}
    for name, run in runs.items():
        started = time.process_time()
        out[name] = run()
        print(f"  {n:,} nodes, {name}: {time.process_time() - started:.1f} s of CPU", file=sys.stderr, flush=True)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64,512,4096")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    results = {}
    for n in (int(s) for s in args.sizes.split(",")):
        started, cpu = time.perf_counter(), time.process_time()
        results[n] = run_size(n, args.seed)
        print(
            f"{n:,} nodes simulated in {time.perf_counter() - started:.1f} s of real time "
            f"({time.process_time() - cpu:.1f} s of CPU)",
            flush=True,
        )
    print(table(results))
    for met, line in targets(results):
        print(f"{'MET ' if met else 'MISS' if met is False else '----'} {line}")
    return 1 if misses(results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
