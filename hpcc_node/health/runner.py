"""Runs checks, each in its own child process with a deadline. A check that does not answer in time is a
FAILURE, never a pass: a hung Lustre mount leaves its reader in uninterruptible sleep, where even SIGKILL waits,
so the runner kills the child's process group, does not wait for it, and remembers it; until that child is
gone, the check fails as "still blocked" instead of starting another child to hang beside it.

A tool that is missing is a failure that says so ("nvidia-smi missing on a GPU node"): unlike ParallelCluster's
GPU health check, which exits 0 when nvidia-smi or DCGM is absent, a check that cannot look never passes.
Output goes to temporary files, not pipes: a grandchild that keeps a pipe open cannot make the runner wait.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from hpcc_node.health.verdict import CHECK_TIMEOUT_S, CheckResult, fail, unknown

Parse = Callable[[str, int], CheckResult]
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass(frozen=True)
class CheckSpec:
    name: str  # the check's name (verdict.py)
    argv: Tuple[str, ...]
    parse: Parse  # (stdout, exit code) -> result; stderr is appended to stdout when the exit code is not 0
    timeout_s: float = CHECK_TIMEOUT_S
    needed_on: str = "this node"  # why the tool must exist: "a GPU node", "an EFA node"
    label: str = ""  # what a reason calls the command (default: the tool's name): "the write probe of /fsx"

    @property
    def what(self) -> str:
        return self.label or os.path.basename(self.argv[0])


def child_env(base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The children's environment: the caller's PATH (stand-ins in the box), C locale for stable output, and
    hpcc_node importable for the Python probes."""
    env = dict(os.environ if base is None else base)
    env["LC_ALL"] = "C"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
    return env


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Runner:
    def __init__(
        self,
        env: Optional[Mapping[str, str]] = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        kill: Callable[[int, int], None] = _kill_group,
        poll_s: float = 0.05,
    ):
        self.env = child_env(env)
        self.clock, self.sleep, self.kill, self.poll_s = clock, sleep, kill, poll_s
        self.stuck: Dict[str, Tuple[subprocess.Popen, float]] = {}  # check -> (abandoned child, since)
        # check -> (output, exit code) of its last child that answered: the numbers behind its verdict, which the
        # health series read again with the check's own reader (series.py); never part of a verdict
        self.outputs: Dict[str, Tuple[str, int]] = {}

    def _blocked(self, spec: CheckSpec) -> Optional[CheckResult]:
        if spec.name not in self.stuck:
            return None
        proc, since = self.stuck[spec.name]
        if proc.poll() is not None:
            del self.stuck[spec.name]
            return None
        return fail(
            spec.name,
            f"{spec.what} still blocked {self.clock() - since:.0f} s after its timeout "
            f"(pid {proc.pid}, not started again)",
            "drain",
        )

    def _start(self, spec: CheckSpec):
        tool = spec.argv[0]
        if shutil.which(tool, path=self.env.get("PATH")) is None:
            return fail(spec.name, f"{os.path.basename(tool)} missing on {spec.needed_on}", "drain")
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        try:
            proc = subprocess.Popen(
                list(spec.argv), stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=self.env, start_new_session=True
            )
        except OSError as e:
            out.close()
            err.close()
            return fail(
                spec.name, f"{os.path.basename(tool)} cannot run on {spec.needed_on}: {e.strerror or e}", "drain"
            )
        return proc, out, err, self.clock() + spec.timeout_s

    def _finish(self, spec: CheckSpec, rc: int, out, err) -> CheckResult:
        texts = []
        for f in (out, err):
            f.seek(0)
            texts.append(f.read().decode("utf-8", "replace"))
            f.close()
        text = texts[0] if rc == 0 else texts[0] + texts[1]
        self.outputs[spec.name] = (text, rc)
        try:
            return spec.parse(text, rc)
        except Exception as e:  # a parser bug is unknown: never a pass, never a drain
            return unknown(spec.name, f"the {spec.name} parser failed: {type(e).__name__}: {e}")

    def run(self, specs: Sequence[CheckSpec]) -> List[CheckResult]:
        """Every check at once; returns when each has answered or passed its deadline, in the given order."""
        results: Dict[int, CheckResult] = {}
        running = {}
        for i, spec in enumerate(specs):
            started = self._blocked(spec) or self._start(spec)
            if isinstance(started, CheckResult):
                results[i] = started
            else:
                running[i] = started
        while running:
            for i, (proc, out, err, deadline) in list(running.items()):
                spec = specs[i]
                rc = proc.poll()
                if rc is not None:
                    results[i] = self._finish(spec, rc, out, err)
                elif self.clock() >= deadline:
                    self.kill(proc.pid, signal.SIGKILL)
                    out.close(), err.close()
                    if proc.poll() is None:  # in uninterruptible sleep: leave it, remember it
                        self.stuck[spec.name] = (proc, self.clock())
                    results[i] = fail(
                        spec.name,
                        f"{spec.what} gave no answer within {spec.timeout_s:g} s (killed: a hung check is a failure)",
                        "drain",
                    )
                else:
                    continue
                del running[i]
            if running:
                self.sleep(self.poll_s)
        return [results[i] for i in range(len(specs))]
