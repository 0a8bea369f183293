"""Slurm's nodes, jobs and reservations as the controller reads them: Slurm's own record of each, whatever the
strings users set (a job's name, script path, working directory, comment) or nodes feed (the evidence in a
reason) contain. Never `Key=value` text read anywhere in a line, where a job whose script path holds
`NodeList=...` or `JobId=...` would become another job.

- Nodes: `scontrol --json show nodes` (Slurm 23.02 and later: the data_parser plugins, `state` a list of flags),
  else `sinfo --json` (21.08 and 22.05: the openapi v0.0.37/v0.0.38 plugins, `state` a base state with
  `state_flags`), else `sinfo -h -a -N -O` with fixed fields, the reason last (only an administrator, slurmd or
  hpcc write a node's reason, and whatever it holds stays in the reason).
- Jobs: `squeue --json` (every job slurmctld still holds, finished ones for MinJobAge, whatever the filters:
  squeue(1) "--json"), else `squeue -h -a -r -t all -O` with Slurm's own fields only (id, owner, state, counts,
  times, state reason, node list; never the name or anything else a user sets), and the controller's own deep-check
  jobs by Slurm's filter (`--name`, `--user root`), so their identity is Slurm's match, not a parse.
- Reservations: `scontrol show reservation --oneliner`, read in its leading fields only (ReservationName,
  StartTime, EndTime, Duration, Nodes), which only an administrator writes (scontrol(1), "RESERVATIONS").
A hostlist expands to at most `limit` names (the cluster's node count). A record that cannot be read, or whose
hostlist is longer, is dropped and logged; the others stand.

squeue(1), sinfo(1), scontrol(1): https://slurm.schedmd.com/squeue.html, /sinfo.html, /scontrol.html; the JSON
fields: https://slurm.schedmd.com/rest_api.html (v0.0.38 `jobs`/`nodes`; v0.0.40 the same names, states as lists,
times as `{set, infinite, number}`). Standard library only; `run` (argv -> stdout, raising on failure) is injected.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import time
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

from .model import SlurmJob, SlurmNode

LOG = logging.getLogger("hpcc.controller")
DEEP_CHECK_JOB = "hpcc-deep-check"  # the JobName of a spare's deep check (health/spares.py)
DEEP_CHECK_USER = "root"  # the controller submits it as root

NODES_JSON = (["scontrol", "--json", "show", "nodes"], ["sinfo", "--json"])
NODE_FIELDS = ("NodeList", "NodeAddr", "StateComplete", "Reason")
NODES_FIXED = ["sinfo", "-h", "-a", "-N", "-O", ",".join(f"{f}:0|" for f in NODE_FIELDS[:-1]) + f",{NODE_FIELDS[-1]}:0"]
JOBS_JSON = ["squeue", "--json"]
JOB_FIELDS = ("JobId", "UserName", "State", "RestartCnt", "Requeue", "EndTime", "EligibleTime", "Reason", "NodeList")
SQUEUE_ALL = ["squeue", "-h", "-a", "-r", "-t", "all"]  # every job, each array element, in every state
JOBS_FIXED = [
    *SQUEUE_ALL,
    "-O",
    ",".join(f"{f}:0|" for f in JOB_FIELDS[:-1]) + f",{JOB_FIELDS[-1]}:0",
]
DEEP_CHECKS_FIXED = [
    *SQUEUE_ALL,
    f"--name={DEEP_CHECK_JOB}",
    f"--user={DEEP_CHECK_USER}",
    "-O",
    "JobId:0",
]
RESERVATIONS = ["scontrol", "show", "reservation", "--oneliner"]
# A job's base states (https://slurm.schedmd.com/job_state_codes.html); data_parser lists flags beside it.
JOB_BASE_STATES = (
    "PENDING",
    "RUNNING",
    "SUSPENDED",
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
)
_RESERVATION = re.compile(r"ReservationName=(\S+) StartTime=\S+ EndTime=\S+ Duration=\S+ Nodes=(\S*)(?: |$)")
_DIGITS = 6  # a node number has at most 4 digits (hpcc_contract/hosts.py NODE_NAME); more is not a name of ours
# The most nodes a cluster has (infra/config/nodes.py MAX_NODES; the node side does not import infra:
# tests/test_one_place.py holds the two together): the bound where a caller knows no smaller one.
MAX_NODES = 4096


class BadRecord(ValueError):
    """One record that cannot be read as Slurm's: dropped and logged, never the loop."""


def hostnames(hostlist: str, limit: int) -> FrozenSet[str]:
    """`gpu-[000-002,007],cpu-001` -> each name, zero padding kept as written (Slurm's hostlist rule); at most
    `limit` of them: the sizes are added up before any name is made, so `gpu-[0-99999999999]` costs nothing."""
    text = (hostlist or "").strip()
    if not text or text == "(null)":
        return frozenset()
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth not in (0, 1):
            raise BadRecord(f"hostlist {text[:60]!r}: nested brackets")
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    plan: List[Tuple[str, List[Tuple[int, int, int]], str]] = []
    total = 0
    for part in parts:
        m = re.fullmatch(r"([^\[\],]*)(?:\[([0-9,\-]+)\]([^\[\],]*))?", part)
        if not m or not part:
            raise BadRecord(f"hostlist {text[:60]!r}: {part[:40]!r} is not a host or a range")
        if m.group(2) is None:
            plan.append((part, [], ""))
            total += 1
        else:
            ranges = []
            for rng in m.group(2).split(","):
                lo, _, hi = rng.partition("-")
                if not re.fullmatch(rf"[0-9]{{1,{_DIGITS}}}", lo) or not re.fullmatch(rf"[0-9]{{0,{_DIGITS}}}", hi):
                    raise BadRecord(f"hostlist {text[:60]!r}: range {rng[:20]!r}")
                first, last = int(lo), int(hi or lo)
                if last < first:
                    raise BadRecord(f"hostlist {text[:60]!r}: range {rng[:20]!r} runs backwards")
                ranges.append((first, last, len(lo)))
                total += last - first + 1
            plan.append((m.group(1), ranges, m.group(3)))
        if total > limit:
            raise BadRecord(f"hostlist {text[:60]!r} names more than the cluster's {limit} nodes")
    out = []
    for prefix, ranges, suffix in plan:
        if not ranges:
            out.append(prefix)
        for first, last, width in ranges:
            out += [f"{prefix}{i:0{width}d}{suffix}" for i in range(first, last + 1)]
    return frozenset(out)


def _number(value: Any) -> float:
    """A JSON time or count: a number (v0.0.37/38), or `{set, infinite, number}` (data_parser); 0 when unset."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return 0.0
        value = value.get("number", 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRecord(f"{str(value)[:30]!r} is not a number")
    return float(value)


def _states(value: Any) -> List[str]:
    """A state as a string (v0.0.37/38: `idle`, `PENDING`) or a list of them (data_parser)."""
    items = [value] if isinstance(value, str) else value if isinstance(value, list) else None
    if items is None or not all(isinstance(s, str) for s in items):
        raise BadRecord(f"state {str(value)[:40]!r}")
    return [s.upper() for s in items if s]


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise BadRecord(f"{what} {str(value)[:30]!r} is not text")
    return value


def _document(text: str, key: str) -> List[Any]:
    """The list under `key` of Slurm's JSON answer; ValueError when the answer is not that (another release's
    command that printed something else: the caller tries the next form)."""
    doc = json.loads(text)
    if not isinstance(doc, dict) or not isinstance(doc.get(key), list):
        raise ValueError(f"no {key!r} list in the answer")
    return doc[key]


def _each(records: Sequence[Any], read: Callable[[Any], Any], what: str, log: logging.Logger) -> List[Any]:
    out = []
    for i, rec in enumerate(records):
        try:
            out.append(read(rec))
        except (BadRecord, KeyError, TypeError, AttributeError, ValueError) as e:
            ident = rec.get("job_id", rec.get("name", "?")) if isinstance(rec, dict) else "?"
            log.warning("slurm %s record %d (%s) dropped: %s", what, i, str(ident)[:40], str(e)[:200])
    return out


def _node(rec: Dict[str, Any]) -> SlurmNode:
    states = set(_states(rec["state"])) | set(_states(rec.get("state_flags") or []))
    name = _text(rec["name"], "name")
    if not name:
        raise BadRecord("no name")
    reason = _text(rec.get("reason") or "", "reason")
    return SlurmNode(name, frozenset(states), reason, _text(rec.get("address") or "", "address"))


def nodes_from_json(text: str, log: logging.Logger = LOG) -> Dict[str, SlurmNode]:
    """`scontrol --json show nodes` or `sinfo --json`: each node's states, reason and address."""
    return {n.name: n for n in _each(_document(text, "nodes"), _node, "node", log)}


def nodes_from_fields(text: str, log: logging.Logger = LOG) -> Dict[str, SlurmNode]:
    """NODES_FIXED's lines: `name|address|idle+drain+not_responding|reason`, the reason last and whole."""
    out: Dict[str, SlurmNode] = {}
    for i, line in enumerate(text.splitlines()):
        parts = line.split("|", len(NODE_FIELDS) - 1)
        if (
            len(parts) != len(NODE_FIELDS)
            or not re.fullmatch(r"[A-Za-z0-9._-]+", parts[0])
            or not re.fullmatch(r"[a-z_+*~#%$@^!-]+", parts[2])
        ):
            log.warning("slurm node line %d dropped: %r", i, line[:120])
            continue
        states = {s.strip("*~#%$@^!-").upper() for s in parts[2].split("+") if s.strip("*~#%$@^!-")}
        reason = "" if parts[3].strip() in ("none", "(null)") else parts[3].strip()
        out[parts[0]] = SlurmNode(parts[0], frozenset(states), reason, parts[1].strip())
    return out


def _job(rec: Dict[str, Any], limit: int) -> SlurmJob:
    job_id = rec["job_id"]
    if isinstance(job_id, bool) or not isinstance(job_id, int):
        raise BadRecord(f"job_id {str(job_id)[:20]!r}")
    states = _states(rec["job_state"])  # data_parser: the base state with its flags (job_state_codes.html)
    states = [s for s in states if s in JOB_BASE_STATES] + [s for s in states if s not in JOB_BASE_STATES]
    restarts = rec.get("restart_cnt", 0)
    restarts = int(_number(restarts)) if restarts is not None else 0
    user = rec.get("user_name") or (str(rec["user_id"]) if isinstance(rec.get("user_id"), int) else "")
    return SlurmJob(
        str(job_id),
        states[0] if states else "",
        hostnames(_text(rec.get("nodes") or "", "nodes"), limit),
        restarts,
        _number(rec.get("end_time", 0)),
        rec.get("requeue", True) is not False,
        _text(rec.get("state_reason") or "", "state_reason"),
        _number(rec.get("eligible_time", 0)),
        _text(rec.get("name") or "", "name"),
        _text(user, "user_name"),
    )


def jobs_from_json(text: str, limit: int, log: logging.Logger = LOG) -> Tuple[SlurmJob, ...]:
    """`squeue --json`: each job as Slurm holds it (times are epoch seconds there, no time zone to guess)."""
    return tuple(_each(_document(text, "jobs"), lambda rec: _job(rec, limit), "job", log))


def local_time(value: str) -> float:
    return time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%S"))


def _when(value: str, parse: Callable[[str], float]) -> float:
    try:
        return parse(value)
    except ValueError:
        return 0.0  # N/A, Unknown, None: not ended


def jobs_from_fields(
    text: str,
    deep_checks: FrozenSet[str],
    limit: int,
    log: logging.Logger = LOG,
    parse_time: Callable[[str], float] = local_time,
) -> Tuple[SlurmJob, ...]:
    """JOBS_FIXED's lines (Slurm's fields only), each job's name known only where Slurm's own filter found it one
    of the deep checks (`deep_checks`: their ids)."""
    out = []
    for i, line in enumerate(text.splitlines()):
        parts = line.split("|")
        try:
            if (
                len(parts) != len(JOB_FIELDS)
                or not re.fullmatch(r"[0-9]+(_[0-9]+)?", parts[0])
                or not re.fullmatch(r"[A-Z_]+", parts[2])
            ):
                raise BadRecord(f"{len(parts)} fields")
            job_id, user, state, restarts, requeue, end, eligible, reason, nodes = (p.strip() for p in parts)
            out.append(
                SlurmJob(
                    job_id,
                    state,
                    hostnames(nodes, limit),
                    int(restarts) if restarts.isdigit() else 0,
                    _when(end, parse_time),
                    requeue != "0",
                    reason,
                    _when(eligible, parse_time),
                    DEEP_CHECK_JOB if job_id in deep_checks else "",
                    user,
                )
            )
        except BadRecord as e:
            log.warning("slurm job line %d dropped (%s): %r", i, e, line[:120])
    return tuple(out)


def reservations(text: str, limit: int, log: logging.Logger = LOG) -> Dict[str, FrozenSet[str]]:
    """`scontrol show reservation --oneliner`: name -> its nodes, from the record's leading fields only."""
    out: Dict[str, FrozenSet[str]] = {}
    for line in text.splitlines():
        if not line.startswith("ReservationName="):
            continue
        m = _RESERVATION.match(line)
        try:
            if not m:
                raise BadRecord("not ReservationName, StartTime, EndTime, Duration, Nodes in that order")
            out[m.group(1)] = hostnames(m.group(2), limit)
        except BadRecord as e:
            log.warning("slurm reservation dropped (%s): %r", e, line[:120])
    return out


Run = Callable[[List[str]], str]


def run_command(argv: List[str]) -> str:
    """One read of Slurm; a failure (slurmctld down, an option this release lacks) is an exception."""
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60).stdout


class Reader:
    """Slurm's records through the first form this release answers (JSON where its plugins are there, fixed
    fields otherwise), remembered while it answers; when it fails, the error is raised (a slurmctld that is down
    fails every form) and the next read tries every form again."""

    def __init__(self, run: Run = run_command, log: logging.Logger = LOG):
        self.run, self.log = run, log
        self.form: Dict[str, int] = {}

    def nodes(self) -> Dict[str, SlurmNode]:
        return self._first(
            "nodes",
            [
                *(lambda argv=argv: nodes_from_json(self.run(argv), self.log) for argv in NODES_JSON),
                lambda: nodes_from_fields(self.run(NODES_FIXED), self.log),
            ],
        )

    def jobs(self, limit: int) -> Tuple[SlurmJob, ...]:
        return self._first(
            "jobs",
            [
                lambda: jobs_from_json(self.run(JOBS_JSON), limit, self.log),
                lambda: jobs_from_fields(
                    self.run(JOBS_FIXED), frozenset(self.run(DEEP_CHECKS_FIXED).split()), limit, self.log
                ),
            ],
        )

    def reservations(self, limit: int) -> Dict[str, FrozenSet[str]]:
        return reservations(self.run(RESERVATIONS), limit, self.log)

    def _first(self, what: str, forms: List[Callable[[], Any]]) -> Any:
        known = self.form.pop(what, None)
        error: Optional[Exception] = None
        for i in [known] if known is not None else range(len(forms)):
            try:
                found = forms[i]()
            except (subprocess.CalledProcessError, OSError, ValueError, subprocess.TimeoutExpired) as e:
                error = e
                self.log.debug("slurm %s: form %d: %s", what, i, str(e)[:200])
                continue
            self.form[what] = i
            return found
        assert error is not None
        raise error
