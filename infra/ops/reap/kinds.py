"""What reap works with: the items it finds, and the declarative description of one resource kind (how to
list it, how to tell it is the cluster's, how to delete it and what to wait for), with the one generic
finder and deleter that read such a description. The table itself is in infra/ops/reap/run.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from botocore.exceptions import ClientError

from hpcc_contract.names import TAG_CLUSTER
from infra.ops.aws import Aws, WaitFailed, error_code, error_message, pages, tag_dict, tag_filter, waiter_done


@dataclass
class Item:
    kind: str
    id: str
    name: str = ""
    result: str = ""  # "would delete" | "deleted" | "failed: ..." | "gone"
    extra: dict = field(default_factory=dict, repr=False)

    @property
    def failed(self) -> bool:
        return self.result.startswith("failed")


@dataclass
class Inventory:
    cluster: str
    region: str
    items: list[Item] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be listed, and why

    def of(self, kind: str) -> list[Item]:
        return [i for i in self.items if i.kind == kind]

    @property
    def empty(self) -> bool:
        return not self.items


@dataclass
class Waits:
    timeout: float = 900.0
    poll: float = 5.0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def until(self, done: Callable[[], bool], what: str) -> None:
        """Poll `done` until true; TimeoutError after `timeout` seconds."""
        deadline = self.clock() + self.timeout
        while not done():
            if self.clock() > deadline:
                raise TimeoutError(f"gave up after {self.timeout:.0f}s waiting for {what}")
            self.sleep(self.poll)


@dataclass
class Found:
    """What inventory knows while it lists: the cluster's VPCs, and the records already found per kind."""

    aws: Aws
    inv: Inventory
    vpc_ids: list[str] = field(default_factory=list)
    records: dict[str, list[dict]] = field(default_factory=dict)  # every record re-checked as the cluster's

    @property
    def cluster(self) -> str:
        return self.inv.cluster


# -- ownership -----------------------------------------------------------------------------------------


def missing(e: ClientError) -> bool:
    code = error_code(e)
    return code.endswith((".NotFound", "NotFound", "NoSuchEntity", "ResourceNotFoundException")) or code in (
        "NoSuchEntity",
        "ParameterNotFound",
        "FileSystemNotFound",
        "InvalidAllocationID.NotFound",
        "DataRepositoryAssociationNotFound",
        "NatGatewayNotFound",
    )


def name_tag(record: dict, tags: str = "Tags") -> str:
    return tag_dict(record.get(tags)).get("Name", "")


def owned(tags: list[dict] | None, cluster: str) -> bool:
    return tag_dict(tags).get(TAG_CLUSTER) == cluster


def mine(items: list[dict], cluster: str, vpc_ids: list[str], tag_key: str = "Tags") -> list[dict]:
    """Re-check on our side what a filter asked for (tag or VPC), so an endpoint that ignores a filter
    can never make reap touch another cluster's resources."""
    return [
        i
        for i in items
        if owned(i.get(tag_key), cluster)
        or (i.get("VpcId") and i.get("VpcId") in vpc_ids)
        or any(a.get("VpcId") in vpc_ids for a in i.get("Attachments", []))
    ]


def why(e: BaseException) -> str:
    if isinstance(e, NotImplementedError):
        return f"this endpoint does not implement it: {e}"
    return error_message(e)


# -- the description of a kind -------------------------------------------------------------------------


@dataclass(frozen=True)
class Find:
    """List a kind: by the cluster tag and/or inside the cluster's VPCs (EC2 filters), then re-check each
    record on our side (`mine`, or `owner` when the kind has no tag or VPC to check)."""

    op: str
    id: str  # the record's id field
    service: str = "ec2"
    records: str | None = None  # JMESPath to the records; by default the paginator's result key
    by_tag: bool = True  # ask for the cluster tag (EC2 filter)
    in_vpc: str | None = None  # the EC2 filter name that matches the cluster's VPCs
    filter_param: str = "Filters"  # DescribeNatGateways calls it Filter
    tags: str = "Tags"  # DescribeNetworkInterfaces calls it TagSet
    args: Callable[[Found], dict | None] | None = None  # one more call's arguments (None: not needed)
    owner: Callable[[dict, Found], bool] | None = None
    keep: Callable[[dict, Found], bool] = lambda record, found: True  # e.g. not already deleting
    name: Callable[[dict], str] | None = None  # default: the Name tag
    extra: Callable[[dict], dict] = lambda record: {}
    unlisted: Callable[[str], str] | None = None  # a note when the endpoint cannot list the kind


@dataclass(frozen=True)
class Delete:
    """Delete each item with `op`; `first` undoes what would refuse the delete (an association, an
    attachment); `waiter` (botocore's, or infra/ops/aws.CUSTOM) then waits for all of them."""

    op: str
    args: Callable[[Item], dict]
    service: str = "ec2"
    first: Callable[[Aws, Item], None] | None = None
    waiter: str | None = None
    wait_args: Callable[[list[Item]], dict] = lambda items: {}
    what: str = ""  # what is waited for, in words


FindFn = Callable[[Found], list[Item]]
DeleteFn = Callable[[Aws, list[Item], Waits], None]


@dataclass(frozen=True)
class Kind:
    kind: str
    find: Find | FindFn
    delete: Delete | DeleteFn


# -- the generic finder --------------------------------------------------------------------------------


def records(found: Found, kind: str, spec: Find) -> list[dict]:
    """The kind's records that are the cluster's, listed once per inventory."""
    if kind in found.records:
        return found.records[kind]
    calls = []
    if spec.by_tag:
        calls.append({spec.filter_param: tag_filter(found.cluster)})
    if spec.in_vpc and found.vpc_ids:
        calls.append({spec.filter_param: [{"Name": spec.in_vpc, "Values": found.vpc_ids}]})
    asked = spec.args(found) if spec.args else None
    if asked is not None:
        calls.append(asked)
    if not (spec.by_tag or spec.in_vpc or spec.args):
        calls.append({})  # no server-side filter: list all, `owner` picks
    by_id: dict[str, dict] = {}
    for kw in calls:
        for r in pages(found.aws, spec.service, spec.op, spec.records, **kw):
            if (
                spec.owner(r, found)
                if spec.owner
                else mine([r], found.cluster, found.vpc_ids if spec.in_vpc else [], spec.tags)
            ):
                by_id[r[spec.id]] = r
    found.records[kind] = [by_id[k] for k in sorted(by_id)]
    return found.records[kind]


def find(found: Found, kind: str, spec: Find) -> list[Item]:
    try:
        listed = records(found, kind, spec)
    except (ClientError, NotImplementedError) as e:
        if spec.unlisted is None:
            raise
        found.inv.notes.append(f"could not list {kind.replace('-', ' ')}s ({why(e)}); {spec.unlisted(found.cluster)}")
        return []
    return [
        Item(kind, r[spec.id], spec.name(r) if spec.name else name_tag(r, spec.tags), extra=spec.extra(r))
        for r in listed
        if spec.keep(r, found)
    ]


# -- the generic deleter -------------------------------------------------------------------------------


def fail(it: Item, e: BaseException) -> None:
    it.result = f"failed: {e if isinstance(e, (TimeoutError, WaitFailed)) else why(e)}"


def each(items: list[Item], delete: Callable[[Item], None]) -> list[Item]:
    """Delete one by one; each item gets its own result. Returns the ones whose delete call succeeded."""
    ok = []
    for it in items:
        try:
            delete(it)
        except ClientError as e:
            if missing(e):
                it.result = "gone"
                continue
            fail(it, e)
        except (NotImplementedError, TimeoutError, WaitFailed) as e:
            fail(it, e)
        else:
            it.result = "deleted"
            ok.append(it)
    return ok


def wait(items: list[Item], waits: Waits, done: Callable[[], bool], what: str) -> None:
    """Wait for what the next kinds depend on; if it does not come, every item says so."""
    if not items:
        return
    try:
        waits.until(done, what)
    except (TimeoutError, WaitFailed) as e:
        for it in items:
            fail(it, e)


def unless_missing(call: Callable[[], object]) -> None:
    """Undo an association or attachment that may already be gone."""
    try:
        call()
    except ClientError as e:
        if not missing(e):
            raise


def delete(aws: Aws, spec: Delete, items: list[Item], waits: Waits) -> None:
    def one(it: Item) -> None:
        if spec.first:
            spec.first(aws, it)
        aws.call(spec.service, spec.op, **spec.args(it))

    started = each(items, one)
    if spec.waiter and started:
        wait(
            started,
            waits,
            waiter_done(aws, spec.service, spec.waiter, **spec.wait_args(started)),
            spec.what or f"{spec.waiter} ({len(started)})",
        )
