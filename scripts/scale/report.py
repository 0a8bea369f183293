"""The figures of every size as one table (a row a figure, a column a size), and issue 38's targets they miss."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .world import Loop


def minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f} min"


def secs(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.0f} s"


def loop_text(loop: Loop | None, top: int = 3) -> str:
    if loop is None:
        return "-"
    phases = "/".join(f"{v:.0f}" for v in loop.phases.values())
    calls = sorted(loop.calls.items(), key=lambda kv: -kv[1])[:top]
    return f"{loop.seconds:.0f} s ({phases}); {sum(loop.calls.values())} calls: " + ", ".join(
        f"{k} {v}" for k, v in calls
    )


def bring_up_text(r: dict[str, Any]) -> str:
    if r["all_ready"] is not None:
        return minutes(r["all_ready"])
    return f"not in {r['horizon'] / 3600:.0f} h: {r['ready']} ready"


def deaths_text(r: dict[str, Any]) -> str:
    if r["seconds"] is not None:
        return f"{r['replaced']}/{r['of']} in {minutes(r['seconds'])}"
    why = "; ".join(r["alerts"]) or ", ".join(f"{k} x{v}" for k, v in r["launch_errors"].items())
    return f"{r['replaced']}/{r['of']} in {r['horizon'] / 60:.0f} min" + (f" ({why})" if why else "")


def _failures(r: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in r["bring_up"]["boot_failures"].items()) or "0"


def _signed(r: dict[str, Any]) -> str:
    rate = r["bring_up"]["signed_per_minute"]
    return "-" if rate is None else f"{rate:.1f}"


def _head_calls(r: dict[str, Any]) -> str:
    per = r["bring_up"]["head_s3_per_certificate"]
    return ("-" if per is None else f"{per:.1f}") + f"; {r['bring_up']['pacer_interval']:.1f} s"


def _head_errors(r: dict[str, Any]) -> str:
    return ", ".join(f"{k} x{v}" for k, v in r["bring_up"]["head_errors"].items()) or "0"


def _one_death(r: dict[str, Any]) -> str:
    s = r["settled"]
    return (
        minutes(s["death_to_ready"]) if s["death_to_ready"] is not None else f"not in {s['death_horizon'] / 3600:.0f} h"
    )


def _pair(a: float | None, b: float | None) -> str:
    return f"{secs(a)} / {secs(b)}"


def _heartbeat(r: dict[str, Any]) -> str:
    gap = r["settled"]["heartbeat_gap_max"]
    return "-" if gap is None else f"{gap:.0f} s of {r['timeout']}"


def _reads(r: dict[str, Any]) -> str:
    s = r["settled"]
    return f"{s['controller_reads_per_change']:.0f}, {s['secret_reads_per_change']:.0f}"


ROWS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("bring-up to all ready", lambda r: bring_up_text(r["bring_up"])),
    ("boots failed, by cause", _failures),
    ("certificates signed / min", _signed),
    ("head's paced S3 calls per certificate; its pacer's interval", _head_calls),
    ("head's signing ticks cut short by an error", _head_errors),
    ("longest bring-up loop (lease/observe/decide/act)", lambda r: loop_text(r["bring_up"]["busiest_loop"])),
    ("steady loop (lease/observe/decide/act)", lambda r: loop_text(r["settled"]["steady_loop"])),
    ("restart to first decision", lambda r: minutes(r["settled"]["restart_to_first_decision"])),
    ("one death to replacement ready", _one_death),
    ("64 deaths to replacements ready", lambda r: deaths_text(r["deaths"])),
    ("64 deaths, capacity for 63: replaced", lambda r: deaths_text(r["deaths_63"])),
    (
        "membership change applied, 50% / 99% of nodes",
        lambda r: _pair(r["settled"]["seen_p50"], r["settled"]["seen_p99"]),
    ),
    ("failed verdict written, 50% / 99%", lambda r: _pair(r["verdicts"]["p50"], r["verdicts"]["p99"])),
    ("heartbeat gap max (of its timeout)", _heartbeat),
    ("membership generations per replacement", lambda r: str(r["settled"]["generations"])),
    ("per membership change: fleet bytes", lambda r: f"{r['settled']['bytes_per_change'] / 1e6:.1f} MB"),
    ("per membership change: controller reads, secret reads", _reads),
]


def table(results: dict[int, dict[str, Any]]) -> str:
    sizes = sorted(results)
    head = ["figure"] + [f"{n:,} nodes" for n in sizes]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join([name, *(cell(results[n]) for n in sizes)]) + " |" for name, cell in ROWS]
    return "\n".join(lines)


def misses(results: dict[int, dict[str, Any]]) -> list[str]:
    """Issue 38's targets (at the largest size simulated) that the figures miss."""
    n = max(results)
    r = results[n]
    out = []
    if r["bring_up"]["all_ready"] is None:
        out.append(f"{n} nodes: bring-up did not finish within {r['bring_up']['horizon'] / 3600:.0f} h")
    if r["bring_up"]["boot_failures"].get("no host certificate"):
        out.append(f"{n} nodes: boots failed for want of a certificate (target 0)")
    p99 = r["settled"]["seen_p99"]
    if p99 is None or p99 > 120:
        out.append(f"{n} nodes: membership change seen by 99% in {secs(p99)} (target <= 120 s)")
    if (r["verdicts"]["p99"] or 0) > 20:
        out.append(f"{n} nodes: failed verdict written (p99) {secs(r['verdicts']['p99'])} (target <= 20 s)")
    gap = r["settled"]["heartbeat_gap_max"] or 0
    if gap > r["timeout"] / 2:
        out.append(f"{n} nodes: heartbeat gap {gap:.0f} s (target <= {r['timeout'] / 2:.0f} s)")
    if r["deaths_63"]["replaced"] < r["deaths_63"]["of"] - 1:
        out.append(f"{n} nodes: {r['deaths_63']['replaced']} of 64 replaced with capacity for 63 (target 63)")
    if r["settled"]["restart_to_first_decision"] > 120:
        took = minutes(r["settled"]["restart_to_first_decision"])
        out.append(f"{n} nodes: restart to first decision {took} (target < 2 min)")
    return out
