"""The table .ci/run prints at its end: wall time per `make` step, per test module and per box boot phase, from the
JSON lines HPCC_TIMINGS collected (tests/box/timing.py). Figures only: nothing here passes or fails a run."""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def table(lines: list[str]) -> str:
    rows: dict[str, dict[str, float]] = defaultdict(dict)
    for line in lines:
        if line.strip():
            item = json.loads(line)
            kind, name = item["kind"], item["name"]
            rows[kind][name] = rows[kind].get(name, 0.0) + float(item["seconds"])
    out = []
    titles = (
        ("step", "make steps"),
        ("module", "test modules, slowest first"),
        ("test", "box tests (set-up, the test, its return to the baseline), in the order they ran"),
        ("box", "box boots"),
        ("restore", "the shared box back to its baseline after a test"),
    )
    for kind, title in titles:
        if not rows.get(kind):
            continue
        items = rows[kind].items() if kind != "module" else sorted(rows[kind].items(), key=lambda kv: -kv[1])
        width = max(len(name) for name in rows[kind])
        out.append(f"\n{title}:")
        out += [f"  {name:<{width}}  {seconds / 60:6.1f} min  ({seconds:7.1f} s)" for name, seconds in items]
    return "\n".join(out)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(table(f.readlines()))
