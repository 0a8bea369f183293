"""observe(): one Snapshot a loop from EC2, the ledger, the nodes' reports and Slurm, with reads shaped for scale:
DescribeInstances filtered on the cluster's tag in pages of 1,000 (EC2 API reference, DescribeInstances:
MaxResults 5-1000; "Pagination"), DescribeInstanceStatus only for impaired instances and scheduled events (not one
call per instance), the reports listed once and fetched only where their ETag changed. Clients are injected.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from hpcc_contract import formats
from hpcc_contract.names import (
    STATUS_PREFIX,
    TAG_CLUSTER,
    TAG_GROUP,
    TAG_LAUNCH,
    TAG_LAUNCH_SPEC,
    TAG_NODE,
    TAG_ROLE,
    TAG_TEMPLATE_VERSION,
)

from . import slurm_records
from .assess import SCHEDULED_EVENTS
from .health.observe import Extras, report_fields, with_slurm_extras
from .ledger import Loaded
from .membership import key_instance
from .model import CapacityBlock, Group, Instance, Report, Slot, SlurmNode, Snapshot

PAGE = {"PageSize": 1000}
STATES = ["pending", "running", "shutting-down", "stopping", "stopped", "terminated"]


def _epoch(value: Any) -> float:
    """botocore's datetime, or the CLI's ISO 8601 text (`2026-11-24T14:29:23.000Z`, `...+00:00`)."""
    if isinstance(value, str) and "T" in value:
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value.timestamp() if isinstance(value, datetime) else float(value or 0)


def _tags(raw: Iterable[Dict[str, str]]) -> Dict[str, str]:
    return {t["Key"]: t["Value"] for t in raw or ()}


def _version(tag: str) -> int:
    """A template-version tag's number; 0 (unknown) for none or anything else."""
    return int(tag) if tag.isdigit() else 0


def instances(ec2: Any, cluster: str) -> Dict[str, Instance]:
    """The cluster's compute instances, every state (a terminated one tells a name it may move), with the tags
    that say their group, name and launch."""
    out: Dict[str, Instance] = {}
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[
            {"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster]},
            {"Name": f"tag:{TAG_ROLE}", "Values": ["compute"]},
            {"Name": "instance-state-name", "Values": STATES},
        ],
        PaginationConfig=PAGE,
    )
    for page in pages:
        for res in page.get("Reservations", []):
            for i in res.get("Instances", []):
                tags = _tags(i.get("Tags"))
                out[i["InstanceId"]] = Instance(
                    i["InstanceId"],
                    i["State"]["Name"],
                    _epoch(i.get("LaunchTime")),
                    tags.get(TAG_GROUP, ""),
                    i.get("PrivateIpAddress", ""),
                    name_tag=tags.get(TAG_NODE, ""),
                    launch_tag=tags.get(TAG_LAUNCH, ""),
                    template_version=_version(tags.get(TAG_TEMPLATE_VERSION, "")),
                    launch_spec=tags.get(TAG_LAUNCH_SPEC, ""),
                    hop_limit=int((i.get("MetadataOptions") or {}).get("HttpPutResponseHopLimit") or 0),
                )
    return out


def health(ec2: Any, ids: Iterable[str]) -> Dict[str, Tuple[Optional[bool], Tuple[str, ...]]]:
    """Status-check failures and scheduled events, for the account's impaired or event-bearing instances only
    (EC2 API reference, DescribeInstanceStatus filters `instance-status.status`, `system-status.status`,
    `event.code`), kept for `ids`."""
    wanted = set(ids)
    out: Dict[str, Tuple[Optional[bool], Tuple[str, ...]]] = {}
    queries = [
        [{"Name": "instance-status.status", "Values": ["impaired"]}],
        [{"Name": "system-status.status", "Values": ["impaired"]}],
        [{"Name": "event.code", "Values": list(SCHEDULED_EVENTS)}],
    ]
    for filters in queries:
        for page in ec2.get_paginator("describe_instance_status").paginate(Filters=filters, PaginationConfig=PAGE):
            for st in page.get("InstanceStatuses", []):
                iid = st["InstanceId"]
                if iid not in wanted:
                    continue
                impaired = "impaired" in (
                    st.get("InstanceStatus", {}).get("Status"),
                    st.get("SystemStatus", {}).get("Status"),
                )
                events = tuple(
                    e["Code"] for e in st.get("Events", []) if not e.get("Description", "").startswith("[Completed]")
                )
                ok, evs = out.get(iid, (None, ()))
                out[iid] = (False if impaired else ok, tuple(sorted(set(evs + events))))
    return out


def with_health(
    insts: Dict[str, Instance], found: Mapping[str, Tuple[Optional[bool], Tuple[str, ...]]]
) -> Dict[str, Instance]:
    return {
        iid: (replace(i, status_ok=found[iid][0], events=found[iid][1]) if iid in found else i)
        for iid, i in insts.items()
    }


def capacity_blocks(ec2: Any, groups: Sequence[Group]) -> List[Group]:
    """The groups with their Capacity Block's window, from DescribeCapacityReservations (`ReservationType`
    capacity-block, `StartDate`, `EndDate`; EC2 User Guide, capacity-blocks-monitor), one call for all groups."""
    ids = sorted(
        {g.capacity_reservation_id for g in groups if g.market == "capacity-block" and g.capacity_reservation_id}
    )
    if not ids:
        return list(groups)
    found = {}
    for page in ec2.get_paginator("describe_capacity_reservations").paginate(CapacityReservationIds=ids):
        for r in page.get("CapacityReservations", []):
            if r.get("ReservationType") == "capacity-block":
                found[r["CapacityReservationId"]] = CapacityBlock(
                    r["CapacityReservationId"], _epoch(r["StartDate"]), _epoch(r["EndDate"])
                )
    return [replace(g, capacity_block=found.get(g.capacity_reservation_id, g.capacity_block)) for g in groups]


def slurm_nodes(text: str) -> Dict[str, SlurmNode]:
    """Slurm's nodes from `scontrol --json show nodes` or `sinfo --json` (slurm_records.py: each node's states,
    reason and address from its own fields; a reason's text is never read for another field)."""
    return slurm_records.nodes_from_json(text)


READERS = 16  # status objects fetched at once (S3 User Guide, "Best practices design patterns: optimizing Amazon S3
# performance": at least 5,500 GETs a second per prefix)


Read = Tuple[str, Optional[Report], str]  # a status object's ETag, its report, why it is malformed ("": it is not)


def reports(s3: Any, bucket: str, cache: Dict[str, Read], prefix: str = STATUS_PREFIX) -> Dict[str, Report]:
    """The nodes' verdicts (membership.status_body at status_key(arn)) by the instance that wrote them: listed every
    loop, fetched only where the ETag changed since `cache` (updated in place; dropped() names its malformed ones,
    each logged once, when it is fetched). A report is its key's instance's (IAM lets a node write only its own
    key; the body must name the same instance) and says nothing of a name: for_slots() gives it to the slot that
    holds that instance. Its time is at most the object's LastModified, so a body dated in the future cannot
    outlast a newer write. One still booting (ok, phase not ready) is no verdict yet."""
    heard: Dict[str, float] = {}  # LastModified: a heartbeat rewrites the same bytes, so the ETag stays
    changed: List[Tuple[str, str]] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            key, etag = obj["Key"], obj["ETag"]
            heard[key] = _epoch(obj.get("LastModified"))
            if key not in cache or cache[key][0] != etag:
                changed.append((key, etag))

    def fetch(item: Tuple[str, str]) -> Tuple[str, Read]:
        key, etag = item
        return key, (etag, *read_status(s3.get_object(Bucket=bucket, Key=key)["Body"].read(), key))

    if len(changed) > 1:  # only what changed, READERS at once (S3 serves thousands of GETs a second per prefix)
        with ThreadPoolExecutor(max_workers=min(READERS, len(changed))) as pool:
            cache.update(pool.map(fetch, changed))
    else:
        cache.update(map(fetch, changed))
    for key in set(cache) - set(heard):
        del cache[key]
    out: Dict[str, Report] = {}
    for key, (_, r, _) in cache.items():
        if r is not None:
            out[r.instance_id] = replace(r, heard=heard[key], at=min(r.at, heard[key]) if heard[key] else r.at)
    return out


def dropped(cache: Mapping[str, Read]) -> Dict[str, str]:
    """The status objects in `cache` (reports()') that are malformed: key -> why."""
    return {key: why for key, (_, _, why) in cache.items() if why}


def for_slots(slots: Mapping[str, Slot], reps: Mapping[str, Report]) -> Dict[str, Report]:
    """Each slot's report: the one its own instance wrote, under the slot's name (whatever name the body gives:
    a node naming another in its status speaks only for itself)."""
    by_instance: Dict[str, Report] = {}
    for r in reps.values():
        if r.instance_id and (r.instance_id not in by_instance or r.at > by_instance[r.instance_id].at):
            by_instance[r.instance_id] = r
    return {
        name: replace(by_instance[s.instance_id], name=name)
        for name, s in slots.items()
        if s.instance_id and s.instance_id in by_instance
    }


LOG = logging.getLogger("hpcc.controller")


# A status body's fields the controller reads, and their JSON types; the others are hpcc status's and the health
# checks' (report_fields). A field written null reads as not written.
REQUIRED = {"name": "string", "instance_id": "string", "ok": "boolean"}
OPTIONAL = {"failure": "string", "evidence": "string", "at": "number", "phase": "string"}


def json_type(value: Any) -> str:
    """The JSON type json.loads read `value` from."""
    if isinstance(value, bool):
        return "boolean"
    return {str: "string", int: "number", float: "number", list: "array", dict: "object"}.get(type(value), "null")


def verdict(body: bytes, key: str, log: logging.Logger = LOG) -> Optional[Report]:
    """A status object as a Report, or None: malformed (logged with its key and why; the boot grace still
    applies), still booting, or of a newer format (logged: its node runs a newer bundle than this controller)."""
    return read_status(body, key, log)[0]


def read_status(body: bytes, key: str, log: logging.Logger = LOG) -> Tuple[Optional[Report], str]:
    """verdict(), and why the object is malformed ("" when it is not)."""
    report, why = _read(body, key, log)
    if why:  # the key and why, bounded and quoted: node-written text is data
        log.warning("status object %r dropped: %s; no verdict from it until it is written again", key[:200], why)
    return report, why


def _read(body: bytes, key: str, log: logging.Logger) -> Tuple[Optional[Report], str]:
    instance = key_instance(key)
    if not instance:
        return None, "its key names no instance (status/<instance ARN>.json)"
    try:
        doc = json.loads(body)
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError: the message names no more than a position
        return None, f"not JSON ({type(e).__name__}: {str(e)[:80]})"
    if not isinstance(doc, dict):
        return None, f"a JSON {json_type(doc)}, not an object"
    try:
        formats.check_doc("status", doc, formats.STATUS)
    except formats.NewerFormat as e:
        log.warning("%s: %s; read as no verdict", key[:200], e)
        return None, ""
    except formats.BadFormat as e:
        return None, str(e)
    why = _wrong_field(doc)
    if why:
        return None, why
    if doc["instance_id"] != instance:
        return None, f"its body names instance {doc['instance_id'][:40]!r}, not its key's {instance}"
    if doc["ok"] and doc.get("phase", "ready") != "ready":
        return None, ""  # still booting: no verdict yet
    return (
        Report(
            doc["name"],
            instance,
            doc["ok"],
            doc.get("failure") or "",
            (doc.get("evidence") or "")[:300],
            float(doc.get("at") or 0),
            **report_fields(doc),
        ),
        "",
    )


def _wrong_field(doc: Mapping[str, Any]) -> str:
    """The first field missing or of the wrong JSON type, said ("" : none)."""
    for name, kind in {**REQUIRED, **OPTIONAL}.items():
        value = doc.get(name)
        if value is None and name in REQUIRED:
            return f"no {name!r}"
        if value is not None and json_type(value) != kind:
            return f"{name!r} is a {json_type(value)}, not a {kind}"
    return ""


def _generation(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def snapshot(
    cluster: str,
    now: float,
    loaded: Loaded,
    insts: Mapping[str, Instance],
    reps: Mapping[str, Report],
    slurm: Optional[Mapping[str, SlurmNode]],
    bundle: Optional[Mapping[str, Any]] = None,
    head: Optional[Mapping[str, Any]] = None,
    malformed: Optional[Mapping[str, str]] = None,
    membership_found: Optional[str] = None,
) -> Snapshot:
    return Snapshot(
        now=now,
        cluster=cluster,
        slots=dict(loaded.slots),
        instances=dict(insts),
        reports=for_slots(loaded.slots, reps),
        slurm=slurm,
        head=dict(head or {}),
        group_states=dict(loaded.groups),
        launches=tuple(loaded.launches),
        events=tuple(loaded.events),
        alerts=dict(loaded.alerts),
        membership_digest=loaded.membership.get("digest", ""),
        membership_generation=_generation(loaded.membership.get("generation")),
        membership_etag=str(loaded.membership.get("etag") or ""),
        membership_found=membership_found,
        bundle=dict(bundle or {}),
        dropped=dict(malformed or {}),
    )


def observe(
    ec2: Any,
    ledger: Any,
    cluster: str,
    clock: Callable[[], float],
    read_reports: Callable[[], Mapping[str, Report]],
    read_slurm: Optional[Callable[[], Mapping[str, SlurmNode]]],
    bundle: Optional[Mapping[str, Any]] = None,
    head: Optional[Mapping[str, Any]] = None,
    read_extras: Optional[Callable[[], Extras]] = None,
    read_dropped: Optional[Callable[[], Mapping[str, str]]] = None,
    read_membership: Optional[Callable[[], Optional[str]]] = None,
) -> Tuple[Snapshot, Loaded]:
    """Everything decide() needs, read once (`read_slurm`: Slurm's nodes; `read_extras`: its jobs and reservations,
    for the health rules; both slurm_records.Reader's; `read_dropped`: the status objects read_reports found
    malformed, for `hpcc status`; `read_membership`: the published membership object's ETag now)."""
    loaded = ledger.load()
    for pk, why in sorted(loaded.dropped.items()):  # every loop, until it is mended: the rest is reconciled
        LOG.warning("ledger item %s cannot be read (%s): left out of this loop; mend or delete it", pk, why)
    insts = instances(ec2, cluster)
    live = [i for i, x in insts.items() if x.state in ("pending", "running")]
    insts = with_health(insts, health(ec2, live)) if live else insts
    slurm = dict(read_slurm()) if read_slurm is not None else None
    reps = read_reports()
    malformed = read_dropped() if read_dropped is not None else None
    found = read_membership() if read_membership is not None else None
    snap = snapshot(cluster, clock(), loaded, insts, reps, slurm, bundle, head, malformed, found)
    return (with_slurm_extras(snap, read_extras) if read_extras else snap), loaded
