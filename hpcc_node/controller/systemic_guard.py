"""The systemic guard, bounded: many nodes failing the same way at once is one alert and no node touched, but not
forever. After `systemic_hold_seconds` one node of the burst is acted on as a canary; once it is back in service
and no longer failing (its replacement ready, or its reboot cleared the fault), the rest follow, at most
`systemic_batch_size` in flight at a time (the circuit breaker still bounds them). A canary that fails again holds
the rest, and the next canary waits a hold again (the slot attempt cap bounds the tries). Pure: the state is the
alert's time and the ledger's events, whose signature is the burst's.

Why: a cause the cluster shares (a driver, an image, a head that lost its network) must not cost every node, but a
hold with no end left two dead nodes of a four-node cluster listed as ready members for good (issue 37, fault 1).
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Mapping, Sequence, Set, Tuple

from hpcc_contract.taxonomy import FailureClass

from .model import ALERT, ENDED, FAILED, READY, Action, Snapshot, Why
from .timers import Timers


def bursts(recent: Iterable[Tuple[str, str]], current: Iterable[Tuple[str, str]], threshold: int) -> Set[str]:
    """The signatures of `current` failures (signature, node) seen on at least `threshold` distinct nodes, counting
    the `recent` ones (the caller's events within the systemic window): one slot failing again and again is that
    slot's (the attempt cap handles it), many nodes failing alike is the cluster's."""
    current = list(current)
    nodes: Dict[str, Set[str]] = {}
    for sig, node in [*recent, *current]:
        nodes.setdefault(sig, set()).add(node)
    return {sig for sig, _ in current if len(nodes[sig]) >= threshold}


def alert_key(sig: str) -> str:
    return f"systemic:{sig}"


def raised_at(snap: Snapshot, key: str, now: float) -> float:
    """When the alert `key` was raised (the ledger keeps its time); `now` when it is raised in this loop."""
    alerts = snap.alerts
    return float(alerts[key]) if isinstance(alerts, Mapping) and key in alerts else now


def released(
    sig: str, failing: Sequence[str], snap: Snapshot, now: float, timers: Timers
) -> Tuple[Set[str], List[Action]]:
    """Which nodes of the burst (`failing`: its nodes in the order to act on them) may be acted on in this loop, and
    the alerts saying why (one per canary, one for the go-ahead)."""
    since = raised_at(snap, alert_key(sig), now)
    acted: Dict[str, float] = {}  # node -> when it was last acted on for this signature since the alert
    for e in snap.events:
        if e.phase == "start" and e.signature == sig and e.at >= since and e.node:
            acted[e.node] = max(acted.get(e.node, 0.0), e.at)
    failing_now = set(failing)
    going: Set[str] = set()  # acted on and still failing on the same incarnation: its remedy goes on
    in_flight, healed = [], []
    for name, at in acted.items():
        slot = snap.slots.get(name)
        if slot is None or slot.state in (FAILED, ENDED):
            continue  # left failed: a failed canary
        back = slot.state == READY and slot.since > at  # a new incarnation (a replacement, a mark) in service
        if name in failing_now:
            if not back:
                going.add(name)
        elif slot.state == READY:
            healed.append(name)
        else:
            in_flight.append(name)
    waiting = [n for n in failing if n not in going]
    if healed:
        room = max(0, timers.systemic_batch_size - len(in_flight) - len(going))
        batch = set(waiting[:room])
        text = (
            f"canary {sorted(healed)[0]} is back in service: the {len(failing)} node(s) still failing the same way "
            f"({sig}) are acted on, {timers.systemic_batch_size} at a time"
        )
        return going | batch, _alert(f"{alert_key(sig)}:go", text, snap) if batch else []
    last = max([since, *acted.values()])
    if going or in_flight or not waiting or now - last < timers.systemic_hold_seconds:
        return going, []  # the canary's remedy is under way, or the hold is not over
    canary = waiting[0]
    text = (
        f"{len(failing)} node(s) failing the same way ({sig}) for {now - since:.0f} s: {canary} is acted on as a "
        "canary; the rest follow once it is back in service"
    )
    return {canary}, _alert(f"{alert_key(sig)}:canary:{canary}:{int(last)}", text, snap)


def _alert(key: str, text: str, snap: Snapshot) -> List[Action]:
    if key in snap.alerts:
        return []
    return [Action(ALERT, why=Why(FailureClass.SYSTEMIC.value, text), data={"key": key})]
