"""`python3 -m hpcc_node.health COMMAND` (PYTHONPATH=/opt/hpcc/current), the node's health entry points:

  boot         the bootstrap's health step: every boot check; exit 1 with the reason when the node is not healthy
  healthcheck  Slurm's HealthCheckProgram: reads the agent's last verdict only (milliseconds; starts no check);
               exit 1 with the reason when it is failed, stale or missing. It writes no node state: the controller
               is the one writer of Slurm's node states, and many nodes failing one check at once is systemic
               (one alert, no node touched), which no single node can tell.
  prolog       Slurm's Prolog: remembers where the Xid source was at the job's start, then the fast pre-job checks
               and the agent's fresh verdict; exit 1 (Slurm drains the node and requeues the job) when either fails
  deep         a held spare's periodic deep check, run by the controller as a Slurm job in the spares' reservation
               (/usr/local/sbin/hpcc-deep): the boot checks again; a failure stays in the verdict until the machine
               boots again (the controller then drains and replaces the spare); exit 1 with the reason
  epilog       Slurm's Epilog: the Xids logged since the job started go into the verdict at once, so the next
               job's Prolog refuses a bad GPU before the agent's next period; exit 0 (the controller acts)

A job the Prolog lets start is written into dcgm-exporter's job map, and the Epilog takes it out (hpcc_node/dcgm.py),
so the GPUs' series carry its id (hpc_job); a mapping error is logged and changes no exit code.

Slurm runs the three with SLURM_JOB_ID set; see templates/steps/slurm.sh.j2 for their slurm.conf lines.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import List, Optional

from hpcc_node import dcgm
from hpcc_node.health import service, xid
from hpcc_node.health.runner import Runner
from hpcc_node.health.verdict import (
    PROLOG_CHECKS,
    VERDICT_MAX_AGE_S,
    node_verdict,
    parse_verdict,
    read_verdict,
    write_verdict,
)


def _host() -> str:
    return os.environ.get("HPCC_NODE") or socket.gethostname().split(".")[0]


def _job_offset_path(state_dir: str, job: str) -> str:
    return os.path.join(state_dir, "jobs", f"{job}.offset")


def _monitor(env: dict) -> service.Monitor:
    facts, xid_standin = service.load_facts(_host(), env.get("HPCC_HEALTH_ENV", service.HEALTH_ENV))
    return service.Monitor(
        facts,
        xid_standin,
        env.get("HPCC_HEALTH_VERDICT", service.VERDICT),
        env.get("HPCC_HEALTH_STATE", service.STATE_DIR),
        Runner(),
    )


def _printed(v, passed: str = "") -> int:
    """Each check's line, then the reason when the node is not healthy (the bootstrap's `fail` takes the last
    line), else `passed`; the exit code."""
    for r in v.results:
        print(f"{r.check}: {r.status}{': ' + r.evidence if r.evidence else ''}")
    if not v.healthy:
        print(v.reason)
        return 1
    if passed:
        print(passed)
    return 0


def boot(env: dict) -> int:
    return _printed(_monitor(env).boot())


def deep(env: dict) -> int:
    return _printed(_monitor(env).deep(), "deep check passed")


def healthcheck(env: dict) -> int:
    healthy, why = read_verdict(env.get("HPCC_HEALTH_VERDICT", service.VERDICT), time.time())
    if why:
        print(why)
    return 0 if healthy else 1


def prolog(env: dict) -> int:
    m = _monitor(env)
    job = env.get("SLURM_JOB_ID", "")
    start = m.source_end() if job.isdigit() else None
    if start is not None:  # where the Xid source was at the job's start (none: the agent's period covers it)
        service.write_text(_job_offset_path(m.state_dir, job), start)
    fast = m.run(PROLOG_CHECKS, write=False)
    if not fast.healthy:
        print(fast.reason, file=sys.stderr)
        return 1
    try:
        with open(m.verdict_path) as f:
            last = parse_verdict(f.read())
    except (OSError, ValueError):
        return 0  # no verdict yet: the fast checks passed; the agent's silence is Slurm's check's to report
    if not last.healthy and time.time() - last.written <= VERDICT_MAX_AGE_S:
        print(last.reason, file=sys.stderr)
        return 1
    return 0


def epilog(env: dict) -> int:
    m = _monitor(env)
    job = env.get("SLURM_JOB_ID", "")
    path = _job_offset_path(m.state_dir, job) if job.isdigit() else ""
    start = service.read_text(path) if path else None
    if start is None:
        return 0  # no Prolog record (a job from before the health checks): the agent's period covers it
    os.unlink(path)
    try:
        lines, _ = m.source.since(start)
    except xid.SourceError:
        return 0  # unreadable now: the agent's check says `unknown`
    found = [r for r in xid.scan(lines, m.catalog) if r.status == "fail"]
    if found:
        sticky = m.add_sticky(found)
        try:
            with open(m.verdict_path) as f:
                results = parse_verdict(f.read()).results
        except (OSError, ValueError):
            results = []
        write_verdict(m.verdict_path, node_verdict([r for r in results if r not in sticky] + sticky, time.time()))
        print(f"job {job}: {found[0].evidence}")
    return 0


COMMANDS = {"boot": boot, "deep": deep, "healthcheck": healthcheck, "prolog": prolog, "epilog": epilog}


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] not in COMMANDS:
        print(f"usage: python3 -m hpcc_node.health {{{'|'.join(COMMANDS)}}}", file=sys.stderr)
        return 2
    env = dict(os.environ)
    try:
        rc = COMMANDS[argv[0]](env)
    except service.FactsError as e:
        print(f"hpcc health {argv[0]}: {e}", file=sys.stderr)
        rc = 1 if argv[0] in ("boot", "deep") else 0  # a node from before the health step: no job is refused for it
    # dcgm-exporter's job map (hpcc_node/dcgm.py): a job the Prolog lets start is mapped, every ending job unmapped;
    # neither ever changes the exit code
    if argv[0] == "prolog" and rc == 0:
        dcgm.job_started(env, _stderr)
    elif argv[0] == "epilog":
        dcgm.job_ended(env, _stderr)
    return rc


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
