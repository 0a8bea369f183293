"""The head's Prometheus alerts in the heal loop (issue 34): each loop the controller reads the alerts firing
(Prometheus' HTTP API, GET /api/v1/alerts: https://prometheus.io/docs/prometheus/latest/querying/api/#alerts) and
decides, as the rest of decide() does, from the snapshot alone:

- every firing alert is an alert of the controller's own (one per rule and node while it fires, kept in the ledger
  like the others), so `hpcc events` and `hpcc status` show it with its evidence (the rule's summary);
- a rule labelled `hpcc_action: drain` (hpcc_contract/metrics.py) drains its node in Slurm, reason
  `hpcc: alert <rule>: ...`: Slurm lets the running job finish and starts no new one; once the rule stops firing
  the node is resumed. A metric never replaces a node and never takes one down: the health agent's verdicts stay
  the source for faults (assess.py leaves an alert's drain to this module);
- Prometheus unreachable, or answering nonsense: no alert is raised, drained or resumed this loop (logged), and
  the rest of the loop goes on. Its outage never stops the heal loop.
Without Slurm a drain has no meaning (the hostfiles follow the health verdicts only): alerts are events there."""

from __future__ import annotations

import calendar
import json
import logging
import re
import urllib.request
from dataclasses import replace
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from hpcc_contract import metrics
from hpcc_node.health.verdict import clean_reason

from .assess import HELD_STATES
from .decide_failures import alert
from .model import ALERT_REASON, DRAIN, READY, RESUME, Action, MetricAlert, Snapshot, Why

LOG = logging.getLogger("hpcc.controller")
KEY_PREFIX = "metrics:"  # the ledger's alert keys: metrics:<rule>:<node>
TIMEOUT_SECONDS = 5.0  # a loop waits no longer for Prometheus
SUMMARY_CHARS = 300
_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")


def rfc3339(text: str) -> float:
    """Prometheus' activeAt ("2026-11-30T12:00:00.123456789Z" or with an offset) as epoch seconds."""
    m = _RFC3339.match(text)
    if not m:
        raise ValueError(f"{text[:40]!r} is not an RFC 3339 time")
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    at = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) + float("0." + (m.group(7) or "0"))
    if m.group(8) != "Z":
        sign = 1 if m.group(8)[0] == "+" else -1
        at -= sign * (int(m.group(8)[1:3]) * 3600 + int(m.group(8)[4:6]) * 60)
    return at


def parse(doc: Any) -> Tuple[MetricAlert, ...]:
    """The firing alerts of an /api/v1/alerts answer (pending ones are not yet a trend); ValueError when the answer
    is not one. An alert without a node label is the cluster's, not a node's (node ""); a label or annotation is
    the series' text: data here, cut, never parsed for anything else."""
    if not isinstance(doc, dict) or doc.get("status") != "success" or not isinstance(doc.get("data"), dict):
        raise ValueError("not a successful /api/v1/alerts answer")
    found = doc["data"].get("alerts")
    if not isinstance(found, list):
        raise ValueError("no alerts list in the answer")
    out = []
    for a in found:
        if not isinstance(a, dict) or a.get("state") != "firing":
            continue
        labels, notes = a.get("labels") or {}, a.get("annotations") or {}
        if not isinstance(labels, dict) or not isinstance(notes, dict) or not labels.get("alertname"):
            continue
        action = str(labels.get(metrics.ALERT_ACTION_LABEL, ""))
        try:
            since = rfc3339(str(a.get("activeAt", "")))
        except ValueError:
            since = 0.0
        out.append(
            MetricAlert(
                str(labels["alertname"])[:100],
                str(labels.get(metrics.LABEL_NODE, ""))[:100],
                str(labels.get(metrics.LABEL_INSTANCE_ID, ""))[:40],
                action if action in metrics.ALERT_ACTIONS else metrics.ALERT_ACTION_EVENT,
                str(notes.get("summary", ""))[:SUMMARY_CHARS],
                since,
            )
        )
    return tuple(sorted(out, key=lambda x: (x.name, x.node, x.instance_id)))


def fetch_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as answer:  # noqa: S310 - the head's own http URL
        return json.loads(answer.read())


class Reader:
    """The alerts firing now, or None when Prometheus does not answer (said once when it stops and when it is
    back, not every loop)."""

    def __init__(self, url: str, fetch: Callable[[str], Any] = fetch_json, log: logging.Logger = LOG):
        self.url, self.fetch, self.log = url, fetch, log
        self.failing = ""

    def __call__(self) -> Optional[Tuple[MetricAlert, ...]]:
        try:
            found = parse(self.fetch(self.url))
        except Exception as e:  # noqa: BLE001 - refused, timed out, not JSON, not the API: the loop goes on
            why = f"{type(e).__name__}: {str(e)[:200]}"
            if why != self.failing:
                self.log.warning("Prometheus alerts unread (%s): %s; the heal loop goes on without them", self.url, why)
            self.failing = why
            return None
        if self.failing:
            self.log.info("Prometheus alerts read again from %s", self.url)
            self.failing = ""
        return found


def alert_url(head_ip: str) -> str:
    host = f"[{head_ip}]" if ":" in head_ip else head_ip
    return f"http://{host}:{metrics.PROMETHEUS_PORT}/api/v1/alerts"


def drain_reason(a: MetricAlert) -> str:
    """The Slurm reason: a summary carries the series' labels, node-written text, so it is cleaned as every reason
    hpcc gives Slurm is (one printable line, no `Key=` token, bounded)."""
    return clean_reason(f"{ALERT_REASON}{a.name}: {a.summary}")


def alert_actions(snap: Snapshot, busy: Set[str], raised: set, systemic_at: int) -> List[Action]:
    """The controller's alert for every firing rule, a drain for each `drain` rule's node that is ready and in
    service, and a resume for a node an alert drained once no `drain` rule fires for it. `busy`: the nodes this
    loop's other actions already touch (a replacement, a health verdict's drain): left to them. A `drain` rule
    firing on `systemic_at` nodes or more at once (Timers.systemic_threshold, as for the health verdicts) is the
    cluster's (a hot hall, a rule gone wrong): one systemic alert, and none of its nodes drained."""
    if snap.metric_alerts is None:
        return []  # Prometheus off or not answering: nothing decided from metrics this loop
    out: List[Action] = []
    draining: Dict[str, MetricAlert] = {}
    for a in snap.metric_alerts:
        slot = snap.slots.get(a.node)
        where = f" on {a.node}" if a.node else ""
        text = f"alert {a.name}{where}: {a.summary}" if a.summary else f"alert {a.name}{where}"
        for raise_ in alert(f"{KEY_PREFIX}{a.name}:{a.node or '-'}", text, snap, raised, slot.group if slot else ""):
            out.append(replace(raise_, node=a.node))  # on its node: `hpcc events --node` finds it
        if a.action == metrics.ALERT_ACTION_DRAIN and slot is not None and a.instance_id in ("", slot.instance_id):
            draining.setdefault(a.node, a)
    if snap.slurm is None:
        return out
    by_rule: Dict[str, Set[str]] = {}
    for node_name, a in draining.items():
        by_rule.setdefault(a.name, set()).add(node_name)
    for rule, nodes in sorted(by_rule.items()):
        if len(nodes) >= systemic_at:
            text = f"alert {rule} fires on {len(nodes)} nodes at once: the cluster's fault, not theirs; none drained"
            out += alert(f"systemic:{KEY_PREFIX}{rule}", text, snap, raised)
            draining = {n: a for n, a in draining.items() if a.name != rule}
    for name, slot in sorted(snap.slots.items()):
        node = snap.slurm.get(name)
        if slot.state != READY or name in busy or node is None:
            continue
        common: Dict[str, Any] = dict(group=slot.group, node=name, instance_id=slot.instance_id)
        firing = draining.get(name)
        if firing is not None and not node.states & HELD_STATES:
            why = Why("", f"alert {firing.name}: {firing.summary}")
            out.append(Action(DRAIN, why=why, data={"reason": drain_reason(firing)}, **common))
        elif (
            firing is None
            and "DRAIN" in node.states
            and node.reason.startswith(ALERT_REASON)
            and getattr(snap.reports.get(name), "ok", True)  # a failing verdict meanwhile: the health rules' node
        ):
            rule = node.reason[len(ALERT_REASON) :].split(":", 1)[0]
            out.append(Action(RESUME, why=Why("", f"alert {rule} no longer fires"), **common))
    return out
