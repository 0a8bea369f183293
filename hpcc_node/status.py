"""The node's status JSON in the state bucket's status/<instance ARN>.json (docs/bootstrap-contract.md), as the
agent writes it: the controller's fields (hpcc_node/controller/membership.py status_body: name, instance_id, ok,
failure, evidence, at), the bootstrap's (templates/steps/status.sh.j2's status_json; a test compares the two),
plus the agent's: its protocol and version, the bundle it runs, drift, a refused bundle and, on the head, a halted
rollout."""

from __future__ import annotations

import json
import time
from typing import Any, Dict, List, Optional

from hpcc_contract import formats
from hpcc_contract.names import STATUS_HOSTS_VERSION_META
from hpcc_contract.version import ACCEPTED_PROTOCOLS, AGENT_VERSION, PROTOCOL

LIMIT = 4000  # bytes: one small object a node (it was a Standard parameter, 4 KB)
TAIL_LINES = 15
TAIL_WIDTH = 200
# An unchanged status is written again (the same bytes) this often: the controller reads its object's LastModified
# from the listing it makes anyway, and a node silent for Timers.heartbeat_timeout_seconds is taken out (its agent,
# and the health checks with it, stopped; or, without Slurm's ping, the node itself). 4,096 nodes: 34 PUTs a second.
HEARTBEAT_SECONDS = 120


def heartbeat_seconds(text: str) -> int:
    """HPCC_HEARTBEAT_SECONDS (the box's shorter beat) when it is a number of 5 to 3600 s; else the default."""
    return int(text) if text.isdigit() and 5 <= int(text) <= 3600 else HEARTBEAT_SECONDS


def _clean(line: str, width: int) -> str:
    return "".join(c for c in line[-width:] if c == "\t" or c >= " ")


def status(
    identity: Dict[str, Any],
    phase: str,
    ok: bool,
    message: str,
    *,
    bundle: str,
    log_tail: List[str],
    now: Optional[float] = None,
    step: str = "sync",
    extra: Optional[Dict[str, Any]] = None,
) -> str:
    """identity: node, ip, instanceId (and hostsVersion: the agent leaves it to the object's metadata). extra:
    drifted, class, refused, rollout, slurm. As many of the log's last lines as fit in LIMIT bytes."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))
    lines = [_clean(line, TAIL_WIDTH) for line in log_tail[-TAIL_LINES:]]
    while True:
        at = time.time() if now is None else now
        text_message = _clean(message.replace("\n", " "), 500)
        doc = {
            formats.FORMAT_KEY: formats.STATUS,
            "name": identity["node"],
            "node": identity["node"],
            "ip": identity["ip"],
            "instance_id": identity["instanceId"],
            "instanceId": identity["instanceId"],
            **({"hostsVersion": identity["hostsVersion"]} if "hostsVersion" in identity else {}),
            "phase": phase,
            "step": step,
            "ok": ok,
            "failure": "",
            "evidence": text_message,
            "at": at,
            "message": text_message,
            "updated": stamp,
            "logTail": lines,
            "protocol": PROTOCOL,
            "agentVersion": AGENT_VERSION,
            "bundle": bundle,
            "drifted": None,
        }
        doc.update(extra or {})
        text = json.dumps(doc)
        if len(text.encode()) <= LIMIT or not lines:
            return text
        lines = lines[1:]


def read(value: str) -> Optional[Dict[str, Any]]:
    """Another node's status, if its protocol is one this agent reads (this one or the one before); None otherwise."""
    try:
        doc = json.loads(value)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("protocol", 0) not in ACCEPTED_PROTOCOLS:
        return None
    try:
        formats.check_doc("status", doc, formats.STATUS)
    except (formats.NewerFormat, formats.BadFormat):
        return None  # no verdict from it, as from another protocol's (the reader's own status names its refusals)
    return doc


def with_applied(doc: Dict[str, Any], metadata: Optional[Dict[str, str]]) -> Dict[str, Any]:
    """A status as read with GetObject: its hostsVersion (the membership generation its node applied) from the
    object's metadata, where the agent writes it (hpcc_node/agent_status.py put_status); the bootstrap's writes
    carry it in the body."""
    found = str((metadata or {}).get(STATUS_HOSTS_VERSION_META, ""))
    return {**doc, "hostsVersion": int(found)} if found.isdigit() else doc
