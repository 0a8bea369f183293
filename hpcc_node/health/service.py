"""The checks wired to a node: its facts (/etc/hpcc/health.env, written by the bootstrap's health step), the
monitor the agent runs every verdict.INTERVAL_S seconds in its own thread (each command check in a child with a
timeout: runner.py), the verdict file it writes, and the status fields the agent reports to the controller.

The kernel-log offset the Xid check has read up to is kept on disk (a restarted agent or a rebooted node does not
read a Xid twice, and a Xid logged while the agent was down is still read); the first monitor of a node starts at
the log's end. The EFA counters are compared between two periods of one monitor.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from hpcc_contract.settings import BOOT_DIAG_LEVEL_DEFAULT, boot_diag_level_problem
from hpcc_node.health import checks, devices, xid
from hpcc_node.health.runner import Runner
from hpcc_node.health.verdict import (
    BOOT_CHECKS,
    EFA_COUNTERS,
    INTERVAL_S,
    PERIODIC_CHECKS,
    XID,
    CheckResult,
    NodeVerdict,
    node_verdict,
    parse_verdict,
    write_verdict,
)

HEALTH_ENV = "/etc/hpcc/health.env"
VERDICT_NAME = "hpcc-health.verdict"
VERDICT = f"/run/{VERDICT_NAME}"
STATE_DIR = "/var/lib/hpcc/health"  # survives a reboot: the Xid offset, the jobs' start offsets
BOOT_ID = "/proc/sys/kernel/random/boot_id"  # changes at every boot (proc(5))
KERNEL_LOG = "/var/log/kern.log"  # rsyslog's kernel facility on Ubuntu; the box points it at its stand-in
FACT_KEYS = {
    "GPUS": int,
    "EFA_DEVICES": int,
    "NEURON_DEVICES": int,
    "DCGM_LEVEL": int,
    "DISK_MIN_FREE_GIB": float,
    "SHARED_MOUNT": str,
    "KERNEL_LOG": str,
}


class FactsError(ValueError):
    """health.env is missing or malformed: the message names the line."""


def parse_facts(text: str, host: str) -> Tuple[checks.NodeFacts, str]:
    """(the node's facts, its kernel-log path) from KEY=VALUE lines; never sourced, each value checked."""
    found: Dict[str, object] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep or key not in FACT_KEYS:
            raise FactsError(f"health.env: {line[:80]!r} is not one of {', '.join(FACT_KEYS)}=VALUE")
        try:
            found[key] = FACT_KEYS[key](value)
        except ValueError:
            raise FactsError(f"health.env: {key}={value[:40]!r} is not a {FACT_KEYS[key].__name__}") from None
        if FACT_KEYS[key] is str and value and not value.startswith("/"):
            raise FactsError(f"health.env: {key}={value[:40]!r} is not an absolute path")
    level = int(found.get("DCGM_LEVEL", BOOT_DIAG_LEVEL_DEFAULT))
    problem = boot_diag_level_problem(level)
    if problem:
        raise FactsError(f"health.env: DCGM_LEVEL={problem}")
    facts = checks.NodeFacts(
        host,
        gpus=int(found.get("GPUS", 0)),
        efa_devices=int(found.get("EFA_DEVICES", 0)),
        neuron_devices=int(found.get("NEURON_DEVICES", 0)),
        shared_mount=str(found.get("SHARED_MOUNT") or "") or None,
        dcgm_level=level,
        disk_min_free_gib=float(found.get("DISK_MIN_FREE_GIB", checks.host.DISK_MIN_FREE_GIB)),
    )
    return facts, str(found.get("KERNEL_LOG") or KERNEL_LOG)


def load_facts(host: str, path: str = HEALTH_ENV) -> Tuple[checks.NodeFacts, str]:
    try:
        with open(path) as f:
            return parse_facts(f.read(), host)
    except FileNotFoundError:
        raise FactsError(f"{path} is missing: the bootstrap's health step writes it") from None


def _read_int(path: str) -> Optional[int]:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _write_int(path: str, value: int) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{value}\n")
    os.replace(tmp, path)


def boot_id(path: str = BOOT_ID) -> str:
    try:
        with open(path) as f:
            return f.read().strip() or "unknown"
    except OSError:
        return "unknown"


def log_end(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


class Monitor:
    """One node's checks: `run(names)` runs them, writes the verdict file and returns the verdict."""

    def __init__(
        self,
        facts: checks.NodeFacts,
        kernel_log: str,
        verdict_path: str = VERDICT,
        state_dir: str = STATE_DIR,
        runner: Optional[Runner] = None,
        clock: Callable[[], float] = time.time,
        efa_root: str = devices.SYSFS_INFINIBAND,
        boot_id_path: str = BOOT_ID,
    ):
        self.boot_id_path = boot_id_path
        self.facts, self.kernel_log, self.verdict_path, self.state_dir = facts, kernel_log, verdict_path, state_dir
        self.runner = runner or Runner()
        self.clock, self.efa_root = clock, efa_root
        self.catalog = xid.load_catalog()
        self.efa_before: Optional[devices.Counters] = None
        if _read_int(self.offset_path) is None:
            _write_int(self.offset_path, log_end(kernel_log))

    @property
    def offset_path(self) -> str:
        return os.path.join(self.state_dir, "kernel-log.offset")

    def xid_since(self, offset: int) -> Tuple[CheckResult, int]:
        lines, end = xid.new_lines(self.kernel_log, offset)
        return xid.check(lines, self.catalog), end

    # A fatal Xid is read once from the log but does not heal: it stays in every verdict until the machine
    # boots again (the catalog's reset or reboot), kept per boot id on disk; so does a spare's failed deep check.
    def _sticky_path(self) -> str:
        return os.path.join(self.state_dir, f"xid-faults.{boot_id(self.boot_id_path)}")

    def sticky(self) -> List[CheckResult]:
        try:
            with open(self._sticky_path()) as f:
                return parse_verdict(f.read()).results
        except (OSError, ValueError):
            return []

    def add_sticky(self, results: Sequence[CheckResult]) -> List[CheckResult]:
        kept = self.sticky()
        new = [r for r in results if r.status == "fail" and r not in kept]
        if new:
            write_verdict(self._sticky_path(), node_verdict(kept + new, self.clock()))
        return kept + new

    def _in_process(self, names: Sequence[str]) -> List[CheckResult]:
        out: List[CheckResult] = []
        if XID in names:
            result, end = self.xid_since(_read_int(self.offset_path) or 0)
            _write_int(self.offset_path, end)
            out += [result] + [r for r in self.add_sticky([result]) if r != result]
        if EFA_COUNTERS in names and self.facts.efa_devices:
            after = devices.read_efa_counters(self.efa_root)
            if self.efa_before is not None:
                out.append(devices.compare_efa(self.efa_before, after, self.facts.efa_devices))
            self.efa_before = after
        return out

    def boot_checked(self) -> bool:
        """Whether the boot checks already ran since the machine booted (the bootstrap's health step, or this
        agent before a restart or a bundle switch): DCGM's deep diagnostic takes the GPUs for minutes, never
        while a job may be running on them."""
        try:
            with open(os.path.join(self.state_dir, "boot-checked")) as f:
                return f.read().strip() == boot_id(self.boot_id_path)
        except OSError:
            return False

    def boot(self) -> NodeVerdict:
        """Every boot check and the Xids logged since the log was last read; remembered for this boot."""
        verdict = self.run(BOOT_CHECKS + (XID,))
        with open(os.path.join(self.state_dir, "boot-checked"), "w") as f:
            f.write(boot_id(self.boot_id_path) + "\n")
        _write_int(deep_checked_path(self.state_dir), int(verdict.written))
        return verdict

    def deep(self) -> NodeVerdict:
        """A held spare's deep check (the controller runs it as a Slurm job inside the spares' reservation): the
        boot checks again, DCGM at its deep level. What failed and the periodic checks never look at again (the
        GPU count, DCGM, the devices) stays in every verdict until the machine boots again, as a fatal Xid does;
        the verdict keeps those already kept, so a node taken out for a Xid never reads healthy in between."""
        results = self.runner.run(checks.specs(BOOT_CHECKS, self.facts))
        kept = self.add_sticky([r for r in results if r.check not in PERIODIC_CHECKS])
        verdict = node_verdict(results + [r for r in kept if r not in results], self.clock())
        write_verdict(self.verdict_path, verdict)
        _write_int(deep_checked_path(self.state_dir), int(verdict.written))
        return verdict

    def run(self, names: Sequence[str], write: bool = True) -> NodeVerdict:
        results = self.runner.run(checks.specs(names, self.facts)) + self._in_process(names)
        verdict = node_verdict(results, self.clock())
        if write:
            write_verdict(self.verdict_path, verdict)
        return verdict


def deep_checked_path(state_dir: str = STATE_DIR) -> str:
    return os.path.join(state_dir, "deep-checked")


def status_fields(path: str = VERDICT, now: Optional[float] = None, state_dir: str = STATE_DIR) -> Dict[str, object]:
    """What the agent's status carries to the controller (controller/health/observe.py report_fields): ok false with
    class health, the deciding check, its action and remedy, when the last verdict failed; its status otherwise; when
    the deep checks last ran (at boot, or a spare's), which tells the controller when a spare's is due."""
    try:
        with open(path) as f:
            v = parse_verdict(f.read())
    except (OSError, ValueError):
        return {}
    top = next((r for r in v.results if r.status == v.status and r.action == v.action), None)
    out: Dict[str, object] = {"health": v.status}  # not its time: the agent writes its status on a change only
    deep = _read_int(deep_checked_path(state_dir))
    if deep:
        out["deepChecked"] = deep
    if not v.healthy:
        out.update(
            {
                "ok": False,
                "class": "health",
                "failure": "health",
                "check": top.check if top else "health",
                "action": v.action,
                "remedy": v.remedy,
                "evidence": top.evidence[:300] if top else v.reason,
            }
        )
    elif v.reason:
        out["healthNote"] = v.reason
    return out


def check_once(
    monitor: Monitor, last: Optional[Tuple[str, str]], log: Callable[[str], None], on_change: Callable[[], None]
) -> Optional[Tuple[str, str]]:
    """One period of the health thread: the boot checks once a boot, else the periodic ones; `on_change` when the
    verdict's (status, action) differs from `last`. Returns the new (status, action)."""
    try:
        v = monitor.run(PERIODIC_CHECKS) if monitor.boot_checked() else monitor.boot()
    except Exception as e:  # a bug here must not stop the agent; the stale verdict then fails Slurm's check
        log(f"health check error: {type(e).__name__}: {e}")
        return last
    if v.status != "ok":
        log(f"health: {v.status}: {v.reason}")
    if (v.status, v.action) != last:
        on_change()
    return v.status, v.action


def start(
    host: str,
    facts_path: str = HEALTH_ENV,
    interval_s: float = INTERVAL_S,
    log: Callable[[str], None] = lambda line: None,
    on_change: Callable[[], None] = lambda: None,
) -> Optional[threading.Thread]:
    """The agent's health thread: the boot checks where this boot has not had them (a node rebooted for a
    remedy checks everything again), then the periodic checks every `interval_s`; `on_change` when the verdict's
    status or action changes (the agent writes its status then, not at its next tick). None where the node has
    no health.env (a node booted before the health step)."""
    try:
        facts, kernel_log = load_facts(host, facts_path)
    except FactsError as e:
        log(f"health checks off: {e}")
        return None

    def loop() -> None:
        monitor = Monitor(facts, kernel_log)
        last: Optional[Tuple[str, str]] = None
        while True:
            started = time.monotonic()
            last = check_once(monitor, last, log, on_change)
            time.sleep(max(0.0, interval_s - (time.monotonic() - started)))

    thread = threading.Thread(target=loop, name="hpcc-health", daemon=True)
    thread.start()
    return thread
