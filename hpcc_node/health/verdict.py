"""Per-check results, the node's one verdict, which checks run when, and the verdict file Slurm reads.

A result has a status (ok < warn < unknown < fail), evidence a person can act on, what to do to the node now
(`action`: none, drain, or down) and what to try before replacing it (`remedy`: none, reset, reboot, replace).
The two are apart because one fault needs both: a Xid 79 sets the node DOWN at once (Slurm requeues its jobs)
and NVIDIA's catalog says a reboot may bring the GPU back. Every result is of the taxonomy's HEALTH class.
Only `fail` takes a node out; `unknown` (a Xid missing from the catalog, output no parser understands) is a
warning that is never a pass and never a drain: a parser bug must not empty a cluster.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Iterable, List, Optional, Tuple

from hpcc_contract.taxonomy import FailureClass

STATUSES = ("ok", "warn", "unknown", "fail")  # in rising severity
ACTIONS = ("none", "drain", "down")  # drain: no new jobs, the running one finishes; down: Slurm requeues it
REMEDIES = ("none", "reset", "reboot", "replace")  # cheapest first; the controller escalates on recurrence

# Check names: one vocabulary for the parsers, the lists below, the verdict file and Slurm's reasons.
GPU_COUNT, GPU_MEMORY, DCGM_DIAG, XID = "gpu_count", "gpu_memory", "dcgm_diag", "xid"
GPU_RECOVERY = "gpu_recovery"  # the driver's per-GPU recovery action (NVML), where the driver reports it
EFA_DEVICES, EFA_COUNTERS, NEURON_DEVICES = "efa_devices", "efa_counters", "neuron_devices"
SHARED_MOUNT, DISK_FREE = "shared_mount", "disk_free"

# Before a node is ready: everything, DCGM at a deep level included (minutes; never per job by default).
BOOT_CHECKS = (GPU_COUNT, GPU_MEMORY, GPU_RECOVERY, DCGM_DIAG, EFA_DEVICES, NEURON_DEVICES, SHARED_MOUNT, DISK_FREE)
# On the agent's timer: cheap reads only (no DCGM run: it competes with the job for the GPUs).
PERIODIC_CHECKS = (XID, GPU_MEMORY, GPU_RECOVERY, EFA_COUNTERS, SHARED_MOUNT, DISK_FREE)
PROLOG_CHECKS = (GPU_COUNT, GPU_RECOVERY, GPU_MEMORY)  # fast, before each job
EPILOG_CHECKS = (XID,)  # Xids since the job started, so the next job never lands on a bad GPU

# The agent's period. A fatal Xid must take the node out within 60 s of being logged: one period (15 s) for it
# to be read, at most CHECK_TIMEOUT_S for the checks, leaves over half the budget for the controller to act.
# Shorter periods spend more of a busy node's CPU on nvidia-smi for little gain.
INTERVAL_S = 15
CHECK_TIMEOUT_S = 10  # a healthy nvidia-smi or a Lustre stat answers in well under a second
VERDICT_MAX_AGE_S = 3 * INTERVAL_S  # older means the agent stopped: the verdict is no longer evidence of health
REASON_MAX = 200  # Slurm keeps the reason for `sinfo -R`; long evidence stays in the verdict file

VERDICT_FORMAT = "hpcc-health 1"


def _rank(value: str, order: Tuple[str, ...], what: str) -> int:
    if value not in order:
        raise ValueError(f"{what} {value!r} is not one of {', '.join(order)}")
    return order.index(value)


@dataclass(frozen=True)
class CheckResult:
    check: str
    status: str
    evidence: str = ""
    action: str = "none"
    remedy: str = "none"
    failure_class: str = FailureClass.HEALTH.value

    def __post_init__(self) -> None:
        _rank(self.status, STATUSES, "status")
        _rank(self.action, ACTIONS, "action")
        _rank(self.remedy, REMEDIES, "remedy")
        if (self.status == "fail") != (self.action != "none"):
            raise ValueError(
                f"{self.check}: a failure takes the node out and nothing else does "
                f"(status {self.status}, action {self.action})"
            )
        if " " in self.check or not self.check:
            raise ValueError(f"check name {self.check!r}: one word")


def ok(check: str, evidence: str = "") -> CheckResult:
    return CheckResult(check, "ok", evidence)


def warn(check: str, evidence: str) -> CheckResult:
    return CheckResult(check, "warn", evidence)


def unknown(check: str, evidence: str) -> CheckResult:
    return CheckResult(check, "unknown", evidence)


def fail(check: str, evidence: str, action: str = "drain", remedy: str = "none") -> CheckResult:
    return CheckResult(check, "fail", evidence, action, remedy)


def worst(results: Iterable[CheckResult]) -> Optional[CheckResult]:
    """The result that decides: highest status, then the strongest action, then the costliest remedy."""

    def key(r: CheckResult) -> Tuple[int, int, int]:
        return STATUSES.index(r.status), ACTIONS.index(r.action), REMEDIES.index(r.remedy)

    return max(results, key=key, default=None)


@dataclass(frozen=True)
class NodeVerdict:
    status: str
    action: str
    remedy: str
    reason: str  # `hpcc: <check>: <evidence>` of the deciding result, what Slurm shows; empty when all is ok
    written: int  # epoch seconds
    results: List[CheckResult] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return self.status != "fail"


def clean_reason(text: str) -> str:
    """A reason as hpcc gives it to Slurm (evidence is node-written text): one line of printable characters
    (control and format characters, bidi marks included, become spaces; whitespace runs one space), no `Key=`
    token (`=` is written `:`, so no reader of Slurm's `Key=value` output can take part of it for another
    field), at most REASON_MAX characters."""
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in text).replace("=", ":").split())
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 3] + "..."


def slurm_reason(result: CheckResult) -> str:
    return clean_reason(f"hpcc: {result.check}: {result.evidence}")


def node_verdict(results: Iterable[CheckResult], now: float) -> NodeVerdict:
    results = list(results)
    if not results:
        # No check ran: nothing says the node is healthy.
        results = [unknown("checks", "no check ran")]
    top = worst(results)
    assert top is not None  # results is never empty here
    action = max((r.action for r in results), key=ACTIONS.index)
    remedy = max((r.remedy for r in results), key=REMEDIES.index)
    reason = slurm_reason(top) if top.status != "ok" else ""
    return NodeVerdict(top.status, action, remedy, reason, int(now), results)


# -- the verdict file: line-oriented `key=value`, so Slurm's HealthCheckProgram reads it in a few milliseconds
# (a shell `read` loop or read_verdict below) without starting a check itself.


def format_verdict(v: NodeVerdict) -> str:
    lines = [
        VERDICT_FORMAT,
        f"written={v.written}",
        f"status={v.status}",
        f"action={v.action}",
        f"remedy={v.remedy}",
        f"reason={v.reason}",
    ]
    lines += [
        f"check={r.check} {r.status} {r.action} {r.remedy} {' '.join(r.evidence.split())}".rstrip() for r in v.results
    ]
    return "\n".join(lines) + "\n"


def parse_verdict(text: str) -> NodeVerdict:
    lines = text.splitlines()
    if not lines or lines[0] != VERDICT_FORMAT:
        raise ValueError(f"not a verdict file (first line {lines[0] if lines else ''!r}, expected {VERDICT_FORMAT!r})")
    head, results = {}, []
    for line in lines[1:]:
        key, _, value = line.partition("=")
        if key == "check":
            name, status, action, remedy, *evidence = value.split(" ", 4)
            results.append(CheckResult(name, status, evidence[0] if evidence else "", action, remedy))
        else:
            head[key] = value
    try:
        return NodeVerdict(
            head["status"], head["action"], head["remedy"], head["reason"], int(head["written"]), results
        )
    except (KeyError, ValueError) as e:
        raise ValueError(f"verdict file incomplete or damaged: {e}") from None


def write_verdict(path: str, v: NodeVerdict) -> None:
    """Atomically (a rename), so a reader never sees half a verdict."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(format_verdict(v))
    os.replace(tmp, path)


def read_verdict(path: str, now: float, max_age: float = VERDICT_MAX_AGE_S) -> Tuple[bool, str]:
    """What Slurm's HealthCheckProgram needs: is the node healthy by the agent's last verdict, and why not.
    A missing, damaged or stale verdict is not healthy: the agent's silence is not a pass."""
    try:
        with open(path) as f:
            v = parse_verdict(f.read())
    except FileNotFoundError:
        return False, f"hpcc: health: no verdict at {path} (the agent has not run)"
    except (OSError, ValueError) as e:
        return False, f"hpcc: health: {e}"
    age = now - v.written
    if age > max_age:
        return False, f"hpcc: health: verdict is {int(age)} s old (over {int(max_age)} s: the agent stopped)"
    return v.healthy, v.reason


def main(argv: Optional[List[str]] = None) -> int:
    """`python -m hpcc_node.health.verdict PATH`: exit 0 when the last verdict is healthy, else 1 with the reason
    on stdout; what Slurm's HealthCheckProgram (and the Prolog) call."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m hpcc_node.health.verdict VERDICT_FILE", file=sys.stderr)
        return 2
    healthy, why = read_verdict(argv[0], time.time())
    if why:
        print(why)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
