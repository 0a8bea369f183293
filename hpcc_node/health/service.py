"""The checks wired to a node: its facts (/etc/hpcc/health.env, written by the bootstrap's health step), the
monitor the agent runs every verdict.INTERVAL_S seconds in its own thread (each command check in a child with a
timeout: runner.py), the verdict file it writes, and the status fields the agent reports to the controller.

The Xid check reads the kernel's own records in its ring buffer (/dev/kmsg; xid.py KmsgSource), never a file
others can write; a test harness may name a stand-in file instead (health.env's XID_STANDIN, which only the
bootstrap writes, and only when its environment sets HPCC_XID_STANDIN: the box does, nothing on EC2). Where it read
up to is kept on disk (a restarted agent does not read a Xid twice; after a reboot the new boot's records are read
from their start, so a Xid logged while the agent was down is still read); the first monitor of a node starts at
the source's end. A source that cannot be read makes the check `unknown`, never ok. The EFA counters are compared
between two periods of one monitor.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from hpcc_contract import metrics
from hpcc_contract.settings import BOOT_DIAG_LEVEL_DEFAULT, boot_diag_level_problem
from hpcc_node.health import checks, devices, gpu, xid
from hpcc_node.health.runner import Runner
from hpcc_node.health.series import HealthSeries
from hpcc_node.health.verdict import (
    BOOT_CHECKS,
    EFA_COUNTERS,
    GPU_MEMORY,
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
# KERNEL_LOG: what bootstraps before issue 33 wrote (/var/log/kern.log, which any local user can write through
# syslog): still accepted in health.env, never read. XID_STANDIN: a test harness's stand-in kernel log.
FACT_KEYS = {
    "GPUS": int,
    "EFA_DEVICES": int,
    "NEURON_DEVICES": int,
    "DCGM_LEVEL": int,
    "DISK_MIN_FREE_GIB": float,
    "SHARED_MOUNT": str,
    "KERNEL_LOG": str,
    "XID_STANDIN": str,
}


class FactsError(ValueError):
    """health.env is missing or malformed: the message names the line."""


def parse_facts(text: str, host: str) -> Tuple[checks.NodeFacts, str]:
    """(the node's facts, the stand-in kernel log or "" for the kernel's own) from KEY=VALUE lines; never sourced,
    each value checked."""
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
    return facts, str(found.get("XID_STANDIN") or "")


def load_facts(host: str, path: str = HEALTH_ENV) -> Tuple[checks.NodeFacts, str]:
    try:
        with open(path) as f:
            facts, standin = parse_facts(f.read(), host)
            st = os.fstat(f.fileno())
    except FileNotFoundError:
        raise FactsError(f"{path} is missing: the bootstrap's health step writes it") from None
    if standin and (st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022):
        raise FactsError(
            f"{path} names a stand-in kernel log but others than root may write it "
            f"(owner uid {st.st_uid}, mode {st.st_mode & 0o777:o})"
        )
    return facts, standin


def _read_int(path: str) -> Optional[int]:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _write_int(path: str, value: int) -> None:
    write_text(path, str(value))


def boot_id(path: str = BOOT_ID) -> str:
    try:
        with open(path) as f:
            return f.read().strip() or "unknown"
    except OSError:
        return "unknown"


def read_text(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None


def write_text(path: str, value: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{value}\n")
    os.replace(tmp, path)


class Monitor:
    """One node's checks: `run(names)` runs them, writes the verdict file and returns the verdict.
    `xid_standin`: a test harness's stand-in kernel log ("": the kernel's ring buffer); `xid_source`: a source
    of the tests' own. `metrics_dir`: where `run` writes the health series (series.py; None: not written, as the
    Slurm entry points' and the boot step's monitors do), `log` where a failed write is said."""

    def __init__(
        self,
        facts: checks.NodeFacts,
        xid_standin: str = "",
        verdict_path: str = VERDICT,
        state_dir: str = STATE_DIR,
        runner: Optional[Runner] = None,
        clock: Callable[[], float] = time.time,
        efa_root: str = devices.SYSFS_INFINIBAND,
        boot_id_path: str = BOOT_ID,
        xid_source=None,
        metrics_dir: Optional[str] = None,
        log: Callable[[str], None] = lambda line: None,
    ):
        self.boot_id_path = boot_id_path
        self.metrics_dir, self.log, self.series = metrics_dir, log, HealthSeries()
        self.facts, self.verdict_path, self.state_dir = facts, verdict_path, state_dir
        self.source = xid_source or (
            xid.StandinSource(xid_standin) if xid_standin else xid.KmsgSource(lambda: boot_id(self.boot_id_path))
        )
        self.runner = runner or Runner()
        self.clock, self.efa_root = clock, efa_root
        self.catalog = xid.load_catalog()
        self.efa_before: Optional[devices.Counters] = None
        if metrics_dir:  # the checks of the last verdict (the boot step's, a previous agent's) until they run again
            self.series.seed(self.verdict_path)
        if read_text(self.position_path) is None:
            end = self.source_end()
            if end is not None:
                write_text(self.position_path, end)

    @property
    def position_path(self) -> str:
        return os.path.join(self.state_dir, "xid-source.position")

    def source_end(self) -> Optional[str]:
        """Where the Xid source ends now (a job's start, a new monitor's); None when it cannot be read."""
        try:
            return self.source.end()
        except xid.SourceError:
            return None

    def xid_since(self, position: Optional[str]) -> Tuple[CheckResult, Optional[str]]:
        return xid.source_check(self.source, position, self.catalog, self.series.saw_xids)

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
            position = read_text(self.position_path)
            result, end = self.xid_since(position)
            if end is not None and end != position:
                write_text(self.position_path, end)
            out += [result] + [r for r in self.add_sticky([result]) if r != result]
        if EFA_COUNTERS in names and self.facts.efa_devices:
            after = devices.read_efa_counters(self.efa_root)
            if self.metrics_dir:
                self.series.saw_efa(after, devices.read_efa_counters(self.efa_root, devices.BYTE_COUNTERS))
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
        if self.metrics_dir:
            self.write_series(verdict)
        return verdict

    def write_series(self, verdict: NodeVerdict) -> None:
        """The health series after a run; a failure is logged, never raised: the series never stop the checks."""
        try:
            self.series.saw_results(verdict.results, verdict.written)
            out = getattr(self.runner, "outputs", {}).pop(GPU_MEMORY, None)  # this run's nvidia-smi query
            if out is not None and out[1] == 0:
                self.series.saw_gpus(gpu.parse_query_rows(out[0])[0])
            self.series.write(str(self.metrics_dir))
        except Exception as e:  # a full disk, a bug in the series: the verdict is written already
            self.log(f"health series not written to {self.metrics_dir}: {type(e).__name__}: {e}")


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
        if top is not None:  # `unknown xid` in hpcc status: a check that could not tell (no kernel log, ...)
            out["healthCheck"] = top.check
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
    metrics_dir: str = metrics.TEXTFILE_DIR,
) -> Optional[threading.Thread]:
    """The agent's health thread: the boot checks where this boot has not had them (a node rebooted for a
    remedy checks everything again), then the periodic checks every `interval_s`; `on_change` when the verdict's
    status or action changes (the agent writes its status then, not at its next tick). None where the node has
    no health.env (a node booted before the health step). The thread's monitor is the one writer of the health
    series (metrics_dir: node_exporter's textfile directory)."""
    try:
        facts, xid_standin = load_facts(host, facts_path)
    except FactsError as e:
        log(f"health checks off: {e}")
        return None

    def loop() -> None:
        monitor = Monitor(facts, xid_standin, metrics_dir=metrics_dir, log=log)
        last: Optional[Tuple[str, str]] = None
        while True:
            started = time.monotonic()
            last = check_once(monitor, last, log, on_change)
            time.sleep(max(0.0, interval_s - (time.monotonic() - started)))

    thread = threading.Thread(target=loop, name="hpcc-health", daemon=True)
    thread.start()
    return thread
