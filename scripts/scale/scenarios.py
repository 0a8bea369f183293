"""The runs the table is made of, each on a fresh World: bring-up from nothing, a settled cluster whose controller
restarts (then its steady loops, heartbeats, one death and the membership changes it publishes), k deaths with or
without the capacity to replace them, and every node's health verdict turning failed once. Each returns plain
figures; None where the run's horizon passed first."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace
from itertools import pairwise
from typing import Any

from hpcc_contract.names import MEMBERSHIP_DELTAS_PREFIX, MEMBERSHIP_KEY, STATUS_PREFIX, certs_key

from .node import verdict
from .world import Loop, Model, World

HOUR = 3600.0


def pct(values: list[float], q: float) -> float | None:
    """The q-th percentile (nearest rank) of `values`; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def _finish(w: World) -> None:
    w.stopped = True
    w.sim.close()
    if w.controller is not None and w.controller.error is not None:
        raise RuntimeError(f"the controller crashed: {w.controller.error!r}") from w.controller.error


def _busiest(loops: list[Loop]) -> Loop | None:
    return max(loops, key=lambda lp: lp.seconds) if loops else None


def bring_up(model: Model, horizon: float = 6 * HOUR) -> dict[str, Any]:
    w = World(model)
    head = w.start_head()
    n = model.nodes
    w.sim.run(horizon, stop=lambda: len(w.ready) >= n)
    done = len(w.ready) >= n
    signed_span = (w.signed[-1][0] - w.signed[0][0]) if len(w.signed) > 1 else 0.0
    out = {
        "all_ready": w.sim.now() if done else None,
        # EC2's launch bucket's bound: the instances past its capacity wait for its refill, then one launch and boot
        "bound": max(0, n - model.launch_bucket) / model.launch_refill
        + model.pending_seconds
        + model.bootstrap_seconds,
        "ready": len(w.ready),
        "horizon": horizon,
        "boot_failures": dict(w.boot_failures),
        "signed": len(w.signed),
        "signed_per_minute": len(w.signed) / (signed_span / 60) if signed_span else None,
        "head_s3_per_certificate": head.s3.calls / len(w.signed) if w.signed else None,
        "head_s3_paced": model.head_s3_paced,
        "head_s3_kind": w.head_s3_kind,
        "in_flight": w.sim.most_in_flight,
        "certificate_wait_p99": pct(w.certificate_waits, 99),
        "pacer_interval": w.pacing.api_interval_ms / 1000,
        "head_errors": Counter(e.split(":")[0] for e in w.head_errors),
        "busiest_loop": _busiest(w.loops),
        "loops": len(w.loops),
        "launch_errors": dict(w.ec2.launch_errors),
    }
    _finish(w)
    return out


def certificates(model: Model, horizon: float = 2 * HOUR) -> dict[str, Any]:
    """Every node of a settled cluster due a certificate at once (none in S3, the head's cache empty, every host key
    published): how long the head takes to sign them all, the head's throughput without the launch bucket's
    pacing of a bring-up."""
    w = World(model)
    w.settle()
    for name in list(w.ready):
        del w.bucket.objects[certs_key(name)]
    w.start_head()
    n = model.nodes
    w.sim.run(horizon, stop=lambda: len(w.signed) >= n)
    out = {
        "seconds": w.sim.now() if len(w.signed) >= n else None,
        "signed": len(w.signed),
        "span": w.signed[-1][0] - w.signed[0][0] if w.signed else None,  # first to last written: the signing alone
        "horizon": horizon,
        "head_s3_kind": w.head_s3_kind,
    }
    _finish(w)
    return out


def _settled(model: Model) -> World:
    """A settled cluster whose controller (re)starts now, run until its first loop is done."""
    w = World(model)
    w.settle()
    signer = w.start_head()
    for name in w.ready:  # a head agent that has been running: it knows what it signed
        signer.issued[name] = w.head_issued(name)
    w.sim.run(24 * HOUR, stop=lambda: bool(w.loops))
    return w


def settled(model: Model, steady: float = HOUR, horizon: float = 2 * HOUR) -> dict[str, Any]:
    """Restart to first decision; a steady loop; heartbeat gaps over `steady`; one death to its replacement ready,
    with the membership generations that publishes and what each costs."""
    w = _settled(model)
    first = w.loops[0]
    restart = first.phases.get("lease", 0.0) + first.phases.get("observe", 0.0)
    start = w.sim.now()
    w.sim.run(start + steady)
    gaps = [b - a for n in w.nodes.values() for a, b in pairwise(n.writes) if b > start]
    steady_loop = w.loops[-1]
    victim = w.nodes[sorted(w.nodes)[len(w.nodes) // 2]]
    before = _counts(w)
    died = w.sim.now()
    w.kill(victim)
    w.sim.run(died + horizon, stop=lambda: w.ready.get(victim.name, (victim.iid,))[0] != victim.iid)
    back = w.ready.get(victim.name, (victim.iid, 0.0))
    generations = sorted(g for g, at in w.published.items() if at >= died)
    after = _counts(w)
    applied = [d for g in generations for d in w.applied_after.get(g, [])]
    per = max(1, len(generations))
    out = {
        "restart_to_first_decision": restart,
        "steady_loop": steady_loop,
        "heartbeat_gap_max": max(gaps) if gaps else None,
        "death_to_ready": back[1] - died if back[0] != victim.iid else None,
        "death_horizon": horizon,
        "generations": len(generations),
        "seen_p50": pct(applied, 50),
        "seen_p99": pct(applied, 99),
        "bytes_per_change": sum(after[k] - before[k] for k in ("membership_bytes", "status_bytes")) / per,
        "controller_reads_per_change": (after["status_gets"] - before["status_gets"]) / per,
        "secret_reads_per_change": (after["apply_secret"] - before["apply_secret"]) / per,
    }
    _finish(w)
    return out


def s3_down(model: Model, horizon: float = 600.0) -> dict[str, Any]:
    """S3 stops answering the controller (every S3 call fails at once), then one node dies: how long, and how many
    loops, until its instance is terminated and a replacement launched. The replacement cannot come up while S3 is
    down (its membership and status are S3's), so this measures the controller's acting, not a ready node."""
    w = _settled(model)
    w.sim.run(w.sim.now() + 2 * model.timers.loop_seconds)
    w.s3_down = True
    victim = w.nodes[sorted(w.nodes)[len(w.nodes) // 2]]
    before = set(w.ec2.instances)
    died, loops = w.sim.now(), len(w.loops)
    w.kill(victim)

    def acted() -> bool:
        launched = any(w.ec2.group_of(i) == w.group.name for i in set(w.ec2.instances) - before)
        return launched and w.ec2.instances[victim.iid].state in ("shutting-down", "terminated")

    w.sim.run(died + horizon, stop=acted)
    done = acted()
    out = {
        "seconds": w.sim.now() - died if done else None,
        "loops": len(w.loops) - loops + 1,  # the loops done since the death, and the one that acted (still running)
        "horizon": horizon,
    }
    _finish(w)
    return out


def hung_call(model: Model) -> dict[str, Any]:
    """One of the controller's calls hangs (clients.READ_SECONDS per attempt, clients.ATTEMPTS attempts): the loop it
    falls in, against the steady loops around it."""
    w = _settled(model)
    w.sim.run(w.sim.now() + 2 * model.timers.loop_seconds)
    steady = max(lp.seconds for lp in w.loops[1:]) if len(w.loops) > 1 else w.loops[0].seconds
    hung_from = len(w.loops)
    w.hang_in_next_loop = True
    w.sim.run(w.sim.now() + 3 * model.timers.loop_seconds)
    out = {"longest": max(lp.seconds for lp in w.loops[hung_from:]), "steady": steady}
    _finish(w)
    return out


def _counts(w: World) -> Counter:
    return Counter(
        membership_bytes=w.bucket.bytes_out[MEMBERSHIP_KEY] + w.bucket.bytes_out[MEMBERSHIP_DELTAS_PREFIX.rstrip("/")],
        status_bytes=w.bucket.bytes_out[STATUS_PREFIX.rstrip("/")] + w.status_change_bytes,
        status_gets=sum(lp.calls.get("s3.get_object", 0) for lp in w.loops),
        apply_secret=w.node_calls["apply_secret"],
    )


def deaths(model: Model, k: int, capacity: int | None, horizon: float = 1800.0) -> dict[str, Any]:
    """k nodes die at once (their instances impaired, slurmd silent) with `capacity` instances left in EC2."""
    w = _settled(replace(model, capacity=capacity))
    w.sim.run(w.sim.now() + 2 * model.timers.loop_seconds)
    victims = [w.nodes[iid] for iid in sorted(w.nodes)[:k]]
    died = w.sim.now()
    for v in victims:
        w.kill(v)

    def replaced() -> int:
        return sum(1 for v in victims if w.ready.get(v.name, (v.iid,))[0] != v.iid)

    w.sim.run(died + horizon, stop=lambda: replaced() == k)
    terminating = [lp for lp in w.loops if lp.started >= died and lp.calls.get("ec2.terminate_instances")]
    out = {
        # the first loop that terminated a dead node's instance also launched (None: none terminated)
        "launch_with_terminate": bool(terminating[0].calls.get("ec2.create_fleet")) if terminating else None,
        "busiest_loop": _busiest([lp for lp in w.loops if lp.started >= died]),
        "acting_loop": terminating[0] if terminating else None,  # the first to terminate a dead node's instance
        "replaced": replaced(),
        "of": k,
        "seconds": w.sim.now() - died if replaced() == k else None,
        "horizon": horizon,
        "alerts": sorted(w.alerts()),
        "launch_errors": dict(w.ec2.launch_errors),
    }
    _finish(w)
    return out


def verdicts(model: Model, window: float = 600.0) -> dict[str, Any]:
    """Every node's health verdict turns failed once, at a random moment of `window`: how long until written."""
    w = _settled(model)
    start = w.sim.now()
    for n in w.nodes.values():
        w.sim.start(verdict(w, n), w.sim.rng.random() * window)
    w.sim.run(start + window + 2 * HOUR, stop=lambda: len(w.verdict_delays) >= len(w.nodes))
    out = {"p50": pct(w.verdict_delays, 50), "p99": pct(w.verdict_delays, 99), "written": len(w.verdict_delays)}
    _finish(w)
    return out
