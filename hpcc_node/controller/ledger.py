"""The ledger: the controller's whole state in one DynamoDB table, written only by the controller holding the lease.

Every write is one TransactWriteItems whose first element checks the lease (this owner, not expired), so a second
controller (an old head still alive) cannot write once it lost the lease; items carry a version `v` and each write
names the version it read (attribute_not_exists for a new item), so two writers never both win. Names are claimed
twice in the same transaction: the slot (`slot#<name>` at its version) and the instance (`iid#<id>`, create-once),
so one name holds one instance and one instance one name. DynamoDB Developer Guide: "Condition expressions",
"Amazon DynamoDB Transactions"; ParallelCluster keeps its instance names in DynamoDB the same way
(aws-parallelcluster-node, instance_manager.py `_store_assigned_hostnames`).

Items: pk (S, hpcc_contract/ledger.py KEY), v (N), doc (S, JSON); the lease also has `owner` (S) and `expires` (N) for
its condition. The client is a boto3 DynamoDB client, injected."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from hpcc_contract import formats
from hpcc_contract.ledger import KEY
from hpcc_node.awscli import error_code

from .model import Event, GroupState, LaunchRecord, Slot
from .timers import DEFAULT, Timers

LEASE = "lease"
MEMBERSHIP = "membership"
DROPPED = "dropped-statuses"  # the status objects the controller found malformed, for `hpcc status`
# Items one TransactWriteItems may hold, the lease's check among them (DynamoDB API Reference, TransactWriteItems:
# "up to 100 action requests").
TRANSACT_ITEMS = 100


class LeaseLost(Exception):
    """This controller does not hold the lease (another head took it): it must stop writing."""


def cancellation_reasons(e: Exception) -> List[str]:
    """Each item's reason a transaction was cancelled, in order: from botocore's CancellationReasons, or from the
    message both the API and the AWS CLI print ("... specific reasons [ConditionalCheckFailed, None]"; DynamoDB API
    Reference, TransactWriteItems, "TransactionCanceledException")."""
    response = getattr(e, "response", {})
    if response.get("CancellationReasons"):
        return [r.get("Code", "") for r in response["CancellationReasons"]]
    found = re.search(r"\[([A-Za-z, ]*)\]\s*$", response.get("Error", {}).get("Message", ""))
    return [r.strip() for r in found.group(1).split(",")] if found else []


def packed(sizes: Sequence[int], room: int) -> List[List[int]]:
    """The indexes of `sizes`, in order, in runs whose sizes add up to `room` at most (a larger one alone)."""
    out: List[List[int]] = []
    used = room
    for i, n in enumerate(sizes):
        if used + n > room:
            out.append([])
            used = 0
        out[-1].append(i)
        used += n
    return out


class Conflict(Exception):
    """An item changed since it was read: the loop reads again."""


@dataclass
class Loaded:
    slots: Dict[str, Slot] = field(default_factory=dict)
    groups: Dict[str, GroupState] = field(default_factory=dict)
    launches: List[LaunchRecord] = field(default_factory=list)
    events: List[Event] = field(default_factory=list)
    alerts: Dict[str, float] = field(default_factory=dict)
    membership: Dict[str, Any] = field(default_factory=dict)  # generation, digest, etag
    dropped_statuses: Dict[str, Any] = field(default_factory=dict)  # count, some (key -> why), at
    versions: Dict[str, int] = field(default_factory=dict)  # pk -> v, for items that are not dataclasses
    stale: List[str] = field(default_factory=list)  # old events and launch records, for prune()
    dropped: Dict[str, str] = field(default_factory=dict)  # pk -> why: items this controller cannot read


def _key(kind: str, name: str) -> str:
    return f"{kind}#{name}"


def _dumps(doc: Dict[str, Any]) -> str:
    """An item's doc attribute, stamped with its format (hpcc_contract/formats.py LEDGER_ITEM)."""
    return json.dumps(formats.stamp(doc, formats.LEDGER_ITEM), sort_keys=True)


def _loads(item: Dict[str, Any]) -> Dict[str, Any]:
    """An item's doc without its stamp; NewerFormat (naming the item) when a newer hpcc wrote it: this one must not
    act on a ledger it would misread (its loop stops there and logs why, every loop, until it is upgraded)."""
    doc = json.loads(item["doc"]["S"])
    formats.check_doc(f"ledger item {item[KEY]['S']}", doc, formats.LEDGER_ITEM)
    doc.pop(formats.FORMAT_KEY, None)
    return doc


def read_slot(client: Any, table: str, name: str) -> Tuple[Optional[Dict[str, Any]], int]:
    """A slot's document and version, read consistently; (None, 0) when the name is not in the ledger."""
    item = client.get_item(TableName=table, Key={KEY: {"S": _key("slot", name)}}, ConsistentRead=True).get("Item")
    return (_loads(item), int(item["v"]["N"])) if item else (None, 0)


def request_replace(client: Any, table: str, name: str, doc: Dict[str, Any], version: int) -> bool:
    """`hpcc replace`'s write, the one ledger write not made by the controller holding the lease: the slot's `doc`
    (as read_slot gave it) with `replace_requested` set, at version+1 if the slot is still at `version`. False
    when it changed since (the controller wrote it meanwhile): read it again. Nothing else of the slot changes, and
    a controller that read it before loses its own write of it (Conflict) and reads again next loop."""
    try:
        client.update_item(
            TableName=table,
            Key={KEY: {"S": _key("slot", name)}},
            UpdateExpression="SET #d = :doc, v = :next",
            ConditionExpression="v = :v",
            ExpressionAttributeNames={"#d": "doc"},
            ExpressionAttributeValues={
                ":doc": {"S": _dumps({**doc, "replace_requested": True})},
                ":next": {"N": str(version + 1)},
                ":v": {"N": str(version)},
            },
        )
    except Exception as e:  # botocore's or hpcc_node.awscli's ClientError: the same .response
        if error_code(e) != "ConditionalCheckFailedException":
            raise
        return False
    return True


def read_name(client: Any, table: str, instance_id: str) -> Optional[str]:
    """What a node agent calls (it waits until this returns a name): its name by its instance id."""
    item = client.get_item(TableName=table, Key={KEY: {"S": _key("iid", instance_id)}}, ConsistentRead=True).get("Item")
    return _loads(item)["name"] if item else None


class Ledger:
    def __init__(self, client: Any, table: str, owner: str, clock: Callable[[], float], timers: Timers = DEFAULT):
        self.client, self.table, self.owner, self.clock, self.timers = client, table, owner, clock, timers
        self.renewed: Optional[float] = None  # when this controller last took or renewed the lease

    # The lease.
    def acquire(self) -> bool:
        """Take the lease, or renew it; False when another owner holds it unexpired."""
        now = self.clock()
        try:
            self.client.put_item(
                TableName=self.table,
                Item={
                    KEY: {"S": LEASE},
                    "owner": {"S": self.owner},
                    "expires": {"N": str(now + self.timers.lease_seconds)},
                    "v": {"N": "0"},
                    "doc": {"S": _dumps({"owner": self.owner, "at": now})},
                },
                ConditionExpression="attribute_not_exists(pk) OR #o = :me OR expires < :now",
                ExpressionAttributeNames={"#o": "owner"},
                ExpressionAttributeValues={":me": {"S": self.owner}, ":now": {"N": str(now)}},
            )
            self.renewed = now
            return True
        except Exception as e:  # botocore's or hpcc_node.awscli's ClientError: the same .response
            if error_code(e) != "ConditionalCheckFailedException":
                raise
            return False

    def keep(self) -> None:
        """Mid-loop, before each action and each write: renew a lease this controller took once half of it has
        passed, so a slow loop (Slurm or EC2 calls waiting out their timeouts) still writes what it decided instead
        of losing every write after the lease's end, loop after loop; LeaseLost when another controller holds it."""
        if self.renewed is None or self.clock() - self.renewed < self.timers.lease_seconds / 2:
            return
        if not self.acquire():
            raise LeaseLost(f"{self.holder()[0]} took the lease during a slow loop")

    def holder(self) -> Tuple[str, float]:
        item = self.client.get_item(TableName=self.table, Key={KEY: {"S": LEASE}}, ConsistentRead=True).get("Item")
        return (item["owner"]["S"], float(item["expires"]["N"])) if item else ("", 0.0)

    def _lease_check(self) -> Dict:
        return {
            "ConditionCheck": {
                "TableName": self.table,
                "Key": {KEY: {"S": LEASE}},
                "ConditionExpression": "#o = :me AND expires > :now",
                "ExpressionAttributeNames": {"#o": "owner"},
                "ExpressionAttributeValues": {":me": {"S": self.owner}, ":now": {"N": str(self.clock())}},
            }
        }

    def _put(self, pk: str, doc: Dict, version: int) -> Dict:
        """A Put of `doc` at version+1 if the item is still at `version` (0: it must not exist)."""
        put: Dict[str, Any] = {
            "TableName": self.table,
            "Item": {KEY: {"S": pk}, "v": {"N": str(version + 1)}, "doc": {"S": _dumps(doc)}},
        }
        if version == 0:
            put["ConditionExpression"] = "attribute_not_exists(pk)"
        else:
            put.update(ConditionExpression="v = :v", ExpressionAttributeValues={":v": {"N": str(version)}})
        return {"Put": put}

    def _delete(self, pk: str, version: int) -> Dict:
        return {
            "Delete": {
                "TableName": self.table,
                "Key": {KEY: {"S": pk}},
                "ConditionExpression": "v = :v",
                "ExpressionAttributeValues": {":v": {"N": str(version)}},
            }
        }

    def _transact(self, *items: Dict) -> None:
        self.keep()  # a write after a slow call (a CreateFleet answering late) renews the lease it needs first
        try:
            self.client.transact_write_items(TransactItems=[self._lease_check(), *items])
        except Exception as e:
            if error_code(e) != "TransactionCanceledException":
                raise
            reasons = cancellation_reasons(e)
            if reasons and reasons[0] == "ConditionalCheckFailed":
                raise LeaseLost(f"{self.owner} does not hold the lease") from e
            raise Conflict(f"changed since read: {reasons}") from e

    def transact_each(self, writes: Sequence[Sequence[Dict]]) -> List[Optional[Exception]]:
        """Independent writes (each its items, all or none) in as few TransactWriteItems as DynamoDB takes, every
        item with its own condition and the lease's check first; each write's outcome: None, or what refused it
        (Conflict: changed since read). A transaction refused whole is made again write by write, so one item's
        condition or a conflicting writer holds no other write back; LeaseLost stops them all."""
        out: List[Optional[Exception]] = [None] * len(writes)
        for chunk in packed([len(w) for w in writes], TRANSACT_ITEMS - 1):
            if len(chunk) > 1:
                try:
                    self._transact(*(item for i in chunk for item in writes[i]))
                    continue
                except LeaseLost:
                    raise
                except Exception:  # noqa: BLE001 - refused whole: write by write names the one refused
                    pass
            for i in chunk:
                try:
                    self._transact(*writes[i])
                except LeaseLost:
                    raise
                except Exception as e:  # noqa: BLE001 - this write's outcome, for its action
                    out[i] = e
        return out

    # Reading everything (one Scan, pages of 1 MB).
    def load(self) -> Loaded:
        out = Loaded()
        now = self.clock()
        for page in self.client.get_paginator("scan").paginate(TableName=self.table, ConsistentRead=True):
            for item in page.get("Items", []):
                try:
                    self._load_item(item, now, out)
                except formats.NewerFormat:  # a newer hpcc's ledger: not to be acted on in part (_loads)
                    raise
                except (KeyError, ValueError, TypeError, AttributeError) as e:  # one bad item never stops the loop
                    pk = str(item.get(KEY, {}).get("S", "?")) if isinstance(item, dict) else "?"
                    out.dropped[pk[:200]] = f"{type(e).__name__}: {str(e)[:200]}"
        out.events.sort(key=lambda e: e.at)
        return out

    def _load_item(self, item: Dict[str, Any], now: float, out: Loaded) -> None:
        """One scanned item into `out`; raises on an item this controller cannot read."""
        pk, v = item[KEY]["S"], int(item["v"]["N"])
        doc = _loads(item)
        kind, _, name = pk.partition("#")
        if kind == "slot":
            out.slots[name] = Slot(**{**doc, "version": v})
        elif kind == "group":
            out.groups[name] = GroupState(**{**doc, "version": v})
        elif kind == "launch" and now - doc["at"] > (
            self.timers.event_keep_seconds
            if doc.get("instance_ids") is not None
            else 2 * self.timers.orphan_timeout_seconds
        ):
            # a launch's instances are the controller's to name or terminate while it keeps the record (a
            # day, as events); an intent whose result never came is retried within the orphan timeout
            out.stale.append(pk)
        elif kind == "launch":
            ids = doc.get("instance_ids")
            out.launches.append(
                LaunchRecord(
                    doc["token"],
                    doc["group"],
                    doc["count"],
                    doc["at"],
                    tuple(ids) if ids is not None else None,
                    int(doc.get("minimum", 0)),
                )
            )
        elif kind == "event" and now - doc["at"] > self.timers.event_keep_seconds:
            out.stale.append(pk)
        elif kind == "event":
            out.events.append(Event(**doc))
        elif kind == "alert" and now - doc["at"] <= self.timers.breaker_window_seconds:
            out.alerts[name] = doc["at"]
        elif pk == MEMBERSHIP:
            out.membership = doc
        elif pk == DROPPED:
            out.dropped_statuses = doc
        out.versions[pk] = v  # last: a dropped item leaves no version behind

    # Slots and names.
    def slot_write(self, slot: Slot, **changes: Any) -> Tuple[Dict, Slot]:
        """The item writing `slot` with `changes` at its version, and the slot as it will be once written."""
        new = replace(slot, **changes)
        doc = asdict(new)
        doc.pop("version")
        return self._put(_key("slot", slot.name), doc, slot.version), replace(new, version=slot.version + 1)

    def put_slot(self, slot: Slot, **changes: Any) -> Slot:
        item, new = self.slot_write(slot, **changes)
        self._transact(item)
        return new

    def name(self, slot: Slot, instance_id: str, now: float) -> Slot:
        """Give `slot` (new: version 0, or a vacated one at its version) to `instance_id`, both create-once."""
        new = replace(slot, instance_id=instance_id, state="booting", since=now, reason="", replace_requested=False)
        doc = asdict(new)
        doc.pop("version")
        self._transact(
            self._put(_key("iid", instance_id), {"name": slot.name, "at": now}, 0),
            self._put(_key("slot", slot.name), doc, slot.version),
        )
        return replace(new, version=slot.version + 1)

    def forget(self, slot: Slot) -> None:
        self._transact(self._delete(_key("slot", slot.name), slot.version))

    def put_group(self, gs: GroupState, **changes: Any) -> GroupState:
        new = replace(gs, **changes)
        doc = asdict(new)
        doc.pop("version")
        self._transact(self._put(_key("group", gs.name), doc, gs.version))
        return replace(new, version=gs.version + 1)

    # Launches: recorded before CreateFleet (token) and after (instance ids).
    def launch_intent(self, token: str, group: str, count: int, now: float, minimum: int = 0) -> None:
        doc = {"token": token, "group": group, "count": count, "at": now, "instance_ids": None}
        try:
            self._transact(self._put(_key("launch", token), {**doc, **({"minimum": minimum} if minimum else {})}, 0))
        except Conflict:
            pass  # recorded by the run that was killed: the retry uses the same token

    def launch_result(self, token: str, group: str, count: int, at: float, instance_ids: List[str]) -> None:
        pk = _key("launch", token)
        v = self._version(pk)
        self._transact(
            self._put(
                pk, {"token": token, "group": group, "count": count, "at": at, "instance_ids": list(instance_ids)}, v
            )
        )

    def drop_launch(self, token: str) -> None:
        pk = _key("launch", token)
        v = self._version(pk)
        if v:
            self._transact(self._delete(pk, v))

    def _version(self, pk: str) -> int:
        item = self.client.get_item(TableName=self.table, Key={KEY: {"S": pk}}, ConsistentRead=True).get("Item")
        return int(item["v"]["N"]) if item else 0

    # The log of actions (status, the breaker and systemic windows) and raised alerts.
    def event_write(self, event: Event, seq: int) -> Dict:
        """The item recording `event` (create-once: a Conflict means this very step recorded it before a restart)."""
        return self._put(_key("event", f"{event.at:017.3f}-{seq:05d}-{event.kind}-{event.node}"), asdict(event), 0)

    def event(self, event: Event, seq: int) -> None:
        try:
            self._transact(self.event_write(event, seq))
        except Conflict:
            pass  # already recorded by this very step before a restart

    def alert(self, key: str, now: float) -> None:
        pk = _key("alert", key)
        self._transact(self._put(pk, {"at": now}, self._version(pk)))

    def set_membership(self, generation: int, digest: str, etag: str) -> None:
        self.set(MEMBERSHIP, {"generation": generation, "digest": digest, "etag": etag})

    def set(self, pk: str, doc: Dict[str, Any]) -> None:
        """A single item (MEMBERSHIP, DROPPED) written over whatever version it is at."""
        self._transact(self._put(pk, doc, self._version(pk)))

    def prune(self, loaded: Loaded) -> int:
        """Delete the events and launch records past their use (the load marked them stale); returns how many."""
        for pk in loaded.stale:
            try:
                self._transact(self._delete(pk, loaded.versions[pk]))
            except Conflict:
                pass
        return len(loaded.stale)
