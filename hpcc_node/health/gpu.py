"""NVIDIA GPU checks from the tools' documented outputs: `nvidia-smi -L`, `nvidia-smi --query-gpu ... --format=csv`,
`dcgmi diag -r N -j`. Each parser takes (stdout, exit code) and returns one CheckResult; the runner runs the tool.

nvidia-smi: https://docs.nvidia.com/deploy/nvidia-smi/index.html (`-L`, `--query-gpu`, `--format=csv,noheader`;
the field names are those `nvidia-smi --help-query-gpu` lists; the two remapped_rows fields mirror NVML's
nvmlRemappedRowsInfo_v2_t bPending and bFailureOccurred, https://docs.nvidia.com/deploy/nvml-api/; a value the
GPU does not report prints `[N/A]` or `[Not Supported]`; a driver without a field refuses the whole query).
Row remapping: https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/ (a pending remapping takes effect at the
next GPU reset; a remapping failure is the RMA threshold).
Recovery action: the same page's "Error Recovery and Response Flags" and NVML's nvmlDeviceGpuRecoveryAction_t (None,
GPU reset, node reboot, drain P2P, drain P2P and reset, bus reset, system reboot), read from nvidia-smi's
`gpu_recovery_action` field by its words, since drivers spell them differently; a driver without the field makes
the check unknown, never a failure.
DCGM diagnostics: https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html; the JSON keys
are NVIDIA/DCGM's nvvs/include/NvvsJsonStrings.h (`DCGM Diagnostic` since DCGM 4, `DCGM GPU Diagnostic` before;
`test_categories` > `tests` > `results` with a `status` each; DCGM 4 adds `test_summary`).
"""

from __future__ import annotations

import json
import re
from typing import List, Optional, Tuple

from hpcc_node.health.verdict import (
    DCGM_DIAG,
    GPU_COUNT,
    GPU_MEMORY,
    GPU_RECOVERY,
    CheckResult,
    fail,
    ok,
    unknown,
    warn,
)

QUERY_FIELDS = (
    "index",
    "pci.bus_id",
    "ecc.errors.uncorrected.volatile.total",
    "remapped_rows.pending",
    "remapped_rows.failure",
)
NVIDIA_SMI_QUERY = ("nvidia-smi", "--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv,noheader")
NVIDIA_SMI_LIST = ("nvidia-smi", "-L")
NVIDIA_SMI_RECOVERY = ("nvidia-smi", "--query-gpu=index,pci.bus_id,gpu_recovery_action", "--format=csv,noheader")


def dcgmi_argv(level: int) -> Tuple[str, ...]:
    return ("dcgmi", "diag", "-r", str(level), "-j")


_LIST_LINE = re.compile(r"^GPU (\d+): .+ \(UUID: GPU-[0-9a-fA-F-]+\)$")
_NOT_REPORTED = ("[N/A]", "[Not Supported]", "N/A")


def _tool_failed(check: str, tool: str, out: str, rc: int, remedy: str) -> CheckResult:
    first = next((line.strip() for line in out.splitlines() if line.strip()), "no output")
    return fail(check, f"{tool} failed (exit {rc}): {first[:160]}", "drain", remedy)


def parse_list(out: str, rc: int, expected: int) -> CheckResult:
    """`nvidia-smi -L`: one `GPU <i>: <name> (UUID: GPU-...)` line per GPU (MIG devices are indented under it)."""
    if rc != 0:
        return _tool_failed(GPU_COUNT, "nvidia-smi -L", out, rc, "reboot")
    lines = [line for line in out.splitlines() if line.strip()]
    gpus = [line for line in lines if _LIST_LINE.match(line)]
    odd = [line for line in lines if not line.startswith((" ", "\t")) and not _LIST_LINE.match(line)]
    if odd:
        return unknown(GPU_COUNT, f"nvidia-smi -L printed a line this parser does not know: {odd[0][:120]}")
    if len(gpus) != expected:
        return fail(GPU_COUNT, f"{len(gpus)} GPU(s) visible, the instance type has {expected}", "drain", "replace")
    return ok(GPU_COUNT, f"{len(gpus)} GPU(s)")


def _flag(value: str) -> Optional[bool]:
    v = value.strip().lower()
    if v in ("yes", "1", "true"):
        return True
    if v in ("no", "0", "false"):
        return False
    return None


def parse_query_rows(
    out: str,
) -> Tuple[List[Tuple[str, str, Optional[int], Optional[bool], Optional[bool]]], List[str]]:
    """Rows of `--query-gpu=<QUERY_FIELDS> --format=csv,noheader`: (index, bus, ecc, pending, failure) with None
    where the GPU does not report the field; and the lines that could not be read."""
    rows, bad = [], []
    for line in out.splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(QUERY_FIELDS) or not cells[0].isdigit():
            bad.append(line)
            continue
        index, bus, ecc, pending, failure = cells
        if ecc.isdigit():
            ecc_n: Optional[int] = int(ecc)
        elif ecc in _NOT_REPORTED:
            ecc_n = None
        else:
            bad.append(line)
            continue
        flags = [_flag(pending), _flag(failure)]
        if any(f is None and c not in _NOT_REPORTED for f, c in zip(flags, (pending, failure))):
            bad.append(line)
            continue
        rows.append((index, bus, ecc_n, flags[0], flags[1]))
    return rows, bad


def parse_query(out: str, rc: int) -> CheckResult:
    """Uncorrected ECC errors since the driver loaded, pending and failed row remappings, per GPU."""
    if rc != 0 and "is not a valid field to query" in out:  # a driver older than a field: not the node's fault
        return unknown(GPU_MEMORY, f"this driver's nvidia-smi lacks a queried field: {out.strip()[:120]}")
    if rc != 0:
        return _tool_failed(GPU_MEMORY, "nvidia-smi --query-gpu", out, rc, "reboot")
    rows, bad = parse_query_rows(out)
    if bad:
        return unknown(GPU_MEMORY, f"nvidia-smi --query-gpu printed a line this parser does not read: {bad[0][:120]}")
    if not rows:
        return unknown(GPU_MEMORY, "nvidia-smi --query-gpu listed no GPU")
    failed = [f"GPU {i} ({bus}): row remapping failed" for i, bus, _, _, f in rows if f]
    if failed:
        return fail(GPU_MEMORY, "; ".join(failed), "drain", "replace")
    ecc = [f"GPU {i} ({bus}): {n} uncorrected ECC error(s)" for i, bus, n, _, _ in rows if n]
    pending = [f"GPU {i} ({bus}): row remapping pending" for i, bus, _, p, _ in rows if p]
    if ecc or pending:
        return fail(GPU_MEMORY, "; ".join(ecc + pending) + " (a GPU reset applies the remapping)", "drain", "reset")
    blind = [i for i, _, n, p, f in rows if n is None or p is None or f is None]
    if blind:
        return warn(GPU_MEMORY, f"GPU(s) {', '.join(blind)} do not report ECC or row remapping")
    return ok(GPU_MEMORY, f"{len(rows)} GPU(s): no uncorrected ECC error, no remapping pending or failed")


def _recovery(value: str):
    """(action, remedy) for a recovery action's words; None for words this parser does not know."""
    v = value.strip().lower()
    if v == "none":
        return "none", "none"
    if "reboot" in v:  # node or system reboot: the OS may be inconsistent, the job is lost
        return "down", "reboot"
    if "drain" in v:  # drain P2P (and reset): finish what runs, then reset when idle
        return "drain", "reset"
    if "reset" in v:  # GPU or bus reset: NVIDIA says terminate every GPU process first
        return "down", "reset"
    return None


def parse_recovery(out: str, rc: int) -> CheckResult:
    """`--query-gpu=index,pci.bus_id,gpu_recovery_action`: any GPU asking for a recovery takes the node out."""
    if rc != 0 and "is not a valid field to query" in out:
        return unknown(GPU_RECOVERY, "this driver's nvidia-smi does not report the GPU recovery action")
    if rc != 0:
        return _tool_failed(GPU_RECOVERY, "nvidia-smi --query-gpu", out, rc, "reboot")
    asks, blind, odd = [], [], []
    for line in (line for line in out.splitlines() if line.strip()):
        cells = [c.strip() for c in line.split(",")]
        decided = _recovery(cells[2]) if len(cells) == 3 and cells[0].isdigit() else None
        if len(cells) == 3 and cells[2] in _NOT_REPORTED:
            blind.append(cells[0])
        elif decided is None:
            odd.append(line)
        elif decided[0] != "none":
            asks.append((f"GPU {cells[0]} ({cells[1]}): recovery action {cells[2]}", decided))
    if odd or not out.strip():
        first = odd[0][:120] if odd else "no output"
        return unknown(GPU_RECOVERY, f"nvidia-smi printed a recovery action this parser does not read: {first}")
    if asks:
        action = "down" if any(a == "down" for _, (a, _r) in asks) else "drain"
        remedy = "reboot" if any(r == "reboot" for _, (_a, r) in asks) else "reset"
        return fail(GPU_RECOVERY, "; ".join(text for text, _ in asks), action, remedy)
    if blind:
        return warn(GPU_RECOVERY, f"GPU(s) {', '.join(blind)} do not report a recovery action")
    return ok(GPU_RECOVERY, "no GPU asks for a recovery")


def _diag_tests(doc: dict) -> Optional[list]:
    body = doc.get("DCGM Diagnostic") or doc.get("DCGM GPU Diagnostic")
    if not isinstance(body, dict) or not isinstance(body.get("test_categories"), list):
        return None
    return [
        t
        for cat in body["test_categories"]
        if isinstance(cat, dict)
        for t in cat.get("tests", [])
        if isinstance(t, dict)
    ]


def _result_text(result: dict) -> str:
    gpu = result.get("entity_id", result.get("gpu_id", result.get("gpu_ids", "?")))
    notes = [w.get("message") or w.get("warning") or "" for w in result.get("warnings", []) if isinstance(w, dict)]
    return f"GPU {gpu}" + (f": {notes[0][:120]}" if notes and notes[0] else "")


def parse_dcgm(out: str, rc: int) -> CheckResult:
    """`dcgmi diag -r N -j`: every test's results; a Fail fails the node, a Warn warns, Pass and Skip pass."""
    try:
        tests = _diag_tests(json.loads(out))
    except (ValueError, AttributeError):
        tests = None
    if tests is None:
        if rc != 0:
            return _tool_failed(DCGM_DIAG, "dcgmi diag", out, rc, "none")
        return unknown(DCGM_DIAG, f"dcgmi diag printed no diagnostic this parser reads: {out.strip()[:120]}")
    failed, warned, odd = [], [], []
    for test in tests:
        name = test.get("name", "?")
        results = [r for r in test.get("results", []) if isinstance(r, dict)]
        summary = test.get("test_summary", {}).get("status") if isinstance(test.get("test_summary"), dict) else None
        statuses = [(str(r.get("status", "")).lower(), r) for r in results] or [(str(summary or "").lower(), {})]
        for status, result in statuses:
            if status == "fail":
                failed.append(f"{name}: {_result_text(result)}" if result else name)
            elif status == "warn":
                warned.append(name)
            elif status not in ("pass", "skip", "not run"):
                odd.append(f"{name}: {status or 'no status'}")
    if failed:
        return fail(DCGM_DIAG, "dcgmi diag failed " + "; ".join(failed), "drain", "replace")
    if odd:
        return unknown(DCGM_DIAG, "dcgmi diag status this parser does not know: " + "; ".join(odd))
    if warned:
        return warn(DCGM_DIAG, "dcgmi diag warned: " + ", ".join(sorted(set(warned))))
    if not tests:
        return unknown(DCGM_DIAG, "dcgmi diag ran no test")
    return ok(DCGM_DIAG, f"dcgmi diag: {len(tests)} test(s) passed")
