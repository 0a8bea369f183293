"""Where a box's time goes: each phase of its start and boot, and what each test module took, measured and printed
(never asserted). With HPCC_TIMINGS set to a file, every figure is also appended to it as a JSON line
({"kind", "name", "seconds"}), which .ci/run turns into its closing table (scripts/ci_timings.py)."""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field


def record(kind: str, name: str, seconds: float) -> None:
    """One figure into HPCC_TIMINGS (if set): kind `step` (a make target), `module` (a test module's wall time),
    `test` (a box test's, as it ends), `box` (a box's phase) or `restore` (the shared box back at its baseline after
    a test)."""
    path = os.environ.get("HPCC_TIMINGS")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps({"kind": kind, "name": name, "seconds": round(seconds, 1)}) + "\n")


@dataclass
class Phases:
    """A box's phases in the order they ran, each with its seconds."""

    done: list = field(default_factory=list)  # (name, seconds)

    @contextmanager
    def timed(self, name: str):
        started = time.time()
        try:
            yield
        finally:
            self.done.append((name, time.time() - started))

    def add(self, name: str, seconds: float) -> None:
        self.done.append((name, seconds))

    def report(self, box: str) -> str:
        """One line per phase, and each recorded into HPCC_TIMINGS as `<box>: <phase>`."""
        lines = []
        for name, seconds in self.done:
            record("box", f"{box}: {name}", seconds)
            lines.append(f"[box] {box}: {name}: {seconds:.1f} s")
        total = sum(s for _, s in self.done)
        record("box", f"{box}: boot in all", total)
        return "\n".join([*lines, f"[box] {box}: boot in all: {total:.1f} s"])
