"""The controller's process: one reconcile every Timers.loop_seconds, the groups re-read each loop (as clustermgtd
re-reads its config), a loop that fails logged and retried by the next, and a head without the lease standing by.
What wires it to a real head (clients, the table and bucket names, the Slurm commands) is the bundle's."""

from __future__ import annotations

import logging
import subprocess
from dataclasses import replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from . import membership
from . import observe as obs
from .act import LOG, Executor, reconcile_once
from .calls import Costs, Counted, counted_command
from .decide import decide
from .health.observe import extras_reader
from .ledger import LeaseLost, Ledger
from .model import Action, Group, MetricAlert, Report, Snapshot
from .series import ControllerSeries
from .slurm_records import Reader
from .targets import Writer
from .timers import DEFAULT, Timers


def slurm_command(argv: List[str]) -> subprocess.CompletedProcess:
    """Runs one Slurm command (scontrol, sbatch, scancel); a failure is an exception (act logs it; the next loop
    tries again)."""
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60)


def build_step(
    ec2: Any,
    ddb: Any,
    s3: Any,
    cluster: str,
    table: str,
    bucket: str,
    groups: Callable[[], Sequence[Group]],
    owner: str,
    clock: Callable[[], float],
    slurm_run: Optional[Callable[[List[str]], Any]] = None,
    slurm_read: Optional[Reader] = None,
    bundle: Callable[[], Mapping[str, Any]] = dict,
    head: Optional[Mapping[str, Any]] = None,
    timers: Timers = DEFAULT,
    log: logging.Logger = LOG,
    costs: Optional[Costs] = None,
    targets: Optional[Writer] = None,
    metrics_dir: Optional[str] = None,
    alerts: Optional[Callable[[], Optional[Tuple[MetricAlert, ...]]]] = None,
    after: Optional[Callable[[Snapshot], Any]] = None,
) -> Callable[[], Mapping[str, Any]]:
    """One loop of observe -> decide -> act, as a function of nothing (its clients and state are captured).
    `slurm_read`: Slurm's nodes, jobs and reservations (slurm_records.Reader), where the cluster runs Slurm.
    `costs` (the step's `.costs`) counts every call of its clients and Slurm commands and times its phases.
    `targets`: the head's Prometheus scrape targets, kept in step with the membership published (targets.py).
    The step's `.series` (series.py) keeps the controller's series, written to `metrics_dir` after each loop
    (None: not written; the process passes node_exporter's textfile directory). `alerts`: the head's Prometheus
    alerts firing (metric_alerts.Reader; None: no Prometheus). `after`: called with the loop's snapshot after each
    loop with the lease (the images' prewarm, images.py); its failure is logged, the loop's result stands."""
    costs = costs or Costs()
    series = ControllerSeries(metrics_dir)
    ec2, s3 = Counted(ec2, "ec2", costs), Counted(s3, "s3", costs)
    ddb = Counted(ddb, "dynamodb", costs)
    if slurm_run is not None:
        slurm_run = counted_command(slurm_run, costs)
    if slurm_read is not None:
        slurm_read.run = counted_command(slurm_read.run, costs)
    ledger = Ledger(ddb, table, owner, clock, timers)
    cache: Dict[str, obs.Read] = {}
    acted: Set[Tuple[str, str, float]] = set()  # the failed verdicts a loop saw settled

    last: Dict[str, Report] = {}
    published: List[Optional[membership.Published]] = [None]  # the membership last written: its next delta's base

    def reports() -> Dict[str, Report]:
        try:
            found = obs.reports(s3, bucket, cache)
        except Exception as e:  # S3 down: EC2 and Slurm are reconciled all the same, on the verdicts last read
            log.warning(
                "the nodes' statuses cannot be read (%s): this loop keeps their last verdicts and judges no heartbeat",
                str(e)[:300],
            )
            return {k: replace(r, heard=0.0) for k, r in last.items()}  # heard 0: no heartbeat is judged missing
        last.clear()
        last.update(found)
        acted.clear()
        acted.update(failed_verdicts(found, clock() - timers.health_settle_seconds))
        return found

    def step() -> Mapping[str, Any]:
        current = obs.capacity_blocks(ec2, list(groups()))
        limit = max(1, sum(g.size_limit for g in current))  # no hostlist of Slurm's names more nodes
        jobs_now = (lambda: slurm_read.jobs(limit)) if slurm_read is not None else None
        executor = Executor(ec2, ledger, s3, bucket, cluster, current, clock, slurm_run, timers, log, jobs_now=jobs_now)
        executor.published = published[0]
        seen: Dict[str, Tuple[Snapshot, Sequence[Action]]] = {}

        def decided(snap: Snapshot) -> Sequence[Action]:
            seen["loop"] = (snap, decide(snap, current, snap.now, timers))
            return seen["loop"][1]

        def observed() -> Tuple[Snapshot, Any]:
            snap, loaded = obs.observe(
                ec2,
                ledger,
                cluster,
                clock,
                reports,
                slurm_read.nodes if slurm_read is not None else None,
                bundle(),
                head,
                extras_reader(slurm_read, limit) if slurm_read is not None else None,
                lambda: obs.dropped(cache),
                lambda: membership_etag(s3, bucket),
            )
            return (replace(snap, metric_alerts=alerts()) if alerts is not None else snap), loaded

        try:
            result = reconcile_once(
                observed,
                decided,
                executor,
                ledger,
                costs,
            )
        finally:
            published[0] = executor.published
            if targets is not None:
                sync_targets(targets, s3, bucket, published[0], current, log)
        if result["lease"] and "loop" in seen:
            snap, actions = seen["loop"]
            slots = getattr(executor, "slots", snap.slots)  # as the actions left them (Executor.run sets them)
            series.looped(snap, actions, slots, executor.published, [g.name for g in current])
            if after is not None:
                try:
                    after(snap)
                except Exception as e:  # the shared file system down: nodes keep the last document
                    log.warning("after the loop: %s", str(e)[:300])
        return result

    step.costs = costs  # type: ignore[attr-defined]
    step.series = series  # type: ignore[attr-defined]
    step.due = lambda: wake_at(obs.reports(s3, bucket, cache), acted, timers)  # type: ignore[attr-defined]
    return step


def sync_targets(
    targets: Writer,
    s3: Any,
    bucket: str,
    last: Optional[membership.Published],
    groups: Sequence[Group],
    log: logging.Logger = LOG,
) -> None:
    """The scrape targets from the membership this controller published last; before its first publish (a
    restart: the object is the last controller's), from the object itself, read once."""
    if last is not None:
        targets.sync(last.body, groups, last.generation)
        return
    if targets.written:
        return
    try:
        doc, _ = membership.read(s3, bucket)
    except Exception as e:  # S3 down or garbage: the next loop tries again; Prometheus keeps its last list
        log.warning("scrape targets: the membership cannot be read (%s)", str(e)[:300])
        return
    if isinstance(doc, dict):
        targets.sync(membership.body_of(doc), groups, int(doc.get("generation") or 0))


def membership_etag(s3: Any, bucket: str) -> Optional[str]:
    """The published membership object's ETag ("" : none), or None when S3 does not answer (nothing is judged)."""
    try:
        return membership.head(s3, bucket)[1]
    except Exception as e:  # S3 down: the loop goes on, as with the statuses
        LOG.warning("the membership object cannot be read (%s): not compared this loop", str(e)[:300])
        return None


def failed_verdicts(reports: Mapping[str, Report], settled_by: float = float("inf")) -> Set[Tuple[str, str, float]]:
    """The failed reports (each its name, instance and time) written no later than `settled_by`."""
    return {(r.name, r.instance_id, r.at) for r in reports.values() if not r.ok and r.at <= settled_by}


def wake_at(reports: Mapping[str, Report], acted: Set[Tuple[str, str, float]], timers: Timers) -> Optional[float]:
    """When the next loop should run for a failed verdict no loop has acted on: once the first is settled."""
    fresh = [at + timers.health_settle_seconds for _, _, at in failed_verdicts(reports) - acted]
    return min(fresh) if fresh else None


def forever(
    step: Callable[[], Mapping[str, Any]],
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    stop: Callable[[], bool] = lambda: False,
    timers: Timers = DEFAULT,
    log: logging.Logger = LOG,
) -> int:
    """Loops until `stop()`; returns how many loops ran. Between loops, `step.due()` (where the step has one: a
    poll of the nodes' statuses every Timers.wake_poll_seconds) may bring the next loop forward."""
    loops = 0
    due: Callable[[], Optional[float]] = getattr(step, "due", lambda: None)
    costs: Optional[Costs] = getattr(step, "costs", None)
    series: Optional[ControllerSeries] = getattr(step, "series", None)
    while not stop():
        started = clock()
        loops += 1
        try:
            result = step()
            if not result["lease"]:
                log.info("standing by: %s holds the lease until %.0f", result["holder"], result["until"])
        except LeaseLost as e:
            log.warning("lease lost mid-loop (%s): standing by", e)
        except Exception:  # the next loop reads everything again
            log.exception("loop %d failed; retrying in the next loop", loops)
        seconds = clock() - started
        if costs is not None:  # the calls since the last line: this loop's and the status polls before it
            log.info("%s", costs.line(loops, seconds))
            costs.reset()
        if series is not None:
            series.finished(seconds, log)
        next_at = started + timers.loop_seconds
        while clock() < next_at and not stop():
            sleep(max(0.0, min(timers.wake_poll_seconds, next_at - clock())))
            if clock() >= next_at:
                break
            try:
                when = due()
            except Exception as e:  # the next loop reads everything anyway
                log.warning("between loops: the status poll failed (%s)", e)
                continue
            if when is not None and when < next_at:
                log.info(
                    "a node's new failed verdict: the next loop in %.0f s, not %.0f s",
                    max(0.0, when - clock()),
                    next_at - clock(),
                )
                next_at = when
    return loops
