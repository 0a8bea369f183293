"""`hpcc replace NODE...`: ask the controller for a new instance under each named node, with no Pulumi run.

It records `replace_requested` on each node's slot in the ledger (hpcc_node/controller/ledger.py
`request_replace`, which owns the item's shape); the controller
reads it at its next loop and does the rest (decide.py `down_and_replace`: DOWN in Slurm with an `hpcc:` reason,
terminate, and once the instance is shutting down the name moves to a newly launched one, not counted against the
group's failure budget; requests spend a budget of their own, the circuit breaker's size an hour:
decide_failures.py `requested_within_budget`). This is the one ledger write not made by the controller: it holds no
lease, so it is a single conditional UpdateItem at the version it read (DynamoDB Developer Guide, "Condition
expressions"), changing nothing but the flag; a controller that read the slot before loses its own write of it
(Conflict) and reads again next loop.

It needs only DynamoDB on the cluster's table: the deployer's credentials on the operator's machine, or the head's
instance role on the head (`hpcc replace --cluster C --region R NODE` there). The core below takes a boto3-shaped
client and uses the standard library only, so the node side can call the same function.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hpcc_node.controller import model
from hpcc_node.controller.ledger import read_slot, request_replace
from hpcc_node.controller.timers import Timers

RETRIES = 5  # a controller writing the same slot at that moment: read again, at most this often


class UnknownNodes(ValueError):
    """A NODE argument that is not a name in the ledger (a usage error: exit 2)."""


class Busy(RuntimeError):
    """The slot kept changing under the request (the controller writing it each time): try again."""


@dataclass(frozen=True)
class Requested:
    node: str
    group: str
    instance_id: str
    state: str
    already: str = ""  # why nothing was written: already requested, already being replaced


def check_names(known: Sequence[str], wanted: Sequence[str], cluster: str) -> list[str]:
    """The wanted names in the order given, once each; unknown ones raise UnknownNodes listing the known."""
    if not wanted:
        raise UnknownNodes("name at least one node to replace, e.g. gpu-001")
    unknown = [n for n in wanted if n not in known]
    if unknown:
        listed = ", ".join(sorted(known)) or "none (the controller has named no node yet)"
        head = (
            " (the head is Pulumi's, not the controller's: `pulumi up --replace <the head's URN>` replaces it)"
            if "head" in unknown
            else ""
        )
        raise UnknownNodes(f"not a node of cluster {cluster!r}: {', '.join(unknown)}{head}; its nodes are: {listed}")
    return list(dict.fromkeys(wanted))


def request(ddb: Any, table: str, cluster: str, nodes: Sequence[str], known: Sequence[str]) -> list[Requested]:
    """Record the request on each named slot; names are checked first, so a typo writes nothing."""
    names = check_names(known, nodes, cluster)
    out = []
    for name in names:
        for _ in range(RETRIES):
            doc, version = read_slot(ddb, table, name)
            if doc is None:
                raise UnknownNodes(f"{name} left the ledger while asking (the controller removed it): nothing to do")
            if doc.get("state") == model.REPLACING or doc.get("replace_requested"):
                why = "being replaced already" if doc.get("state") == model.REPLACING else "requested already"
                out.append(Requested(name, doc.get("group", ""), doc.get("instance_id", ""), doc["state"], why))
                break
            if not request_replace(ddb, table, name, doc, version):
                continue  # the controller wrote it meanwhile: read again
            out.append(Requested(name, doc.get("group", ""), doc.get("instance_id", ""), doc.get("state", "")))
            break
        else:
            raise Busy(f"{name}: the slot changed {RETRIES} times while asking; run hpcc replace again")
    return out


def plan_text(done: Sequence[Requested], cluster: str, loop_seconds: int) -> list[str]:
    """What the controller will do, and where to watch it."""
    lines = []
    for r in done:
        if r.already:
            lines.append(f"{r.node} ({r.instance_id or 'no instance'}): {r.already}; nothing written")
            continue
        lines.append(f"{r.node} ({r.instance_id or 'no instance'}, {r.state}): replacement requested in the ledger")
    if any(not r.already for r in done):
        t = Timers()
        breaker_text = f"{t.breaker_min} (or {t.breaker_fraction:.0%} of the nodes, if more)"
        lines += [
            f"the controller on the head acts at its next loop (within {loop_seconds} s): it marks each node "
            "DOWN in Slurm (reason `hpcc: requested by hpcc replace`), terminates its instance, and once EC2 "
            "shows it shutting down gives the name to a new instance of the same group (launched from the "
            "group's launch template); not counted against the group's failure budget, but at most "
            f"{breaker_text} requested replacements an hour (more wait, and `hpcc status` says so)",
            f"watch: `hpcc status --cluster {cluster}` (per group, and the controller's actions), or on the "
            "head `journalctl -u hpcc-controller -f` (also /var/log/hpcc/controller.log)",
        ]
    return lines


def known_names(loaded_slots: dict[str, Any]) -> list[str]:
    return sorted(loaded_slots)
