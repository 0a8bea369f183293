"""The ledger's DynamoDB table and the state bucket in memory, with the answers the controller's code relies on
(conditional puts and transactions, S3's ETags, 304 and 412), and `Timed`: a client whose every call, and every
page of a paginator, first sleeps on the virtual clock for as long as one `aws` CLI process takes."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from typing import Any

from hpcc_contract.ledger import KEY

from .ec2 import ClientError, Pages
from .kernel import Sim

SCAN_PAGE_BYTES = 1 << 20  # DynamoDB Scan returns at most 1 MB a page (API reference, Scan)
LIST_PAGE_KEYS = 1000  # ListObjectsV2 returns at most 1,000 keys a page


class Table:
    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.on_slot: Callable[[str, dict[str, Any]], None] = lambda name, doc: None

    def _ok(self, cond: dict[str, Any], item: dict[str, Any] | None) -> bool:
        expr = cond.get("ConditionExpression", "")
        if expr == "attribute_not_exists(pk)":
            return item is None
        if expr == "v = :v":
            return item is not None and item["v"]["N"] == cond["ExpressionAttributeValues"][":v"]["N"]
        return True  # the lease's conditions: one controller holds it here

    def put_item(self, TableName: str, Item: dict[str, Any], **cond: Any) -> dict[str, Any]:
        self.items[Item[KEY]["S"]] = Item
        return {}

    def get_item(self, TableName: str, Key: dict[str, Any], **_: Any) -> dict[str, Any]:
        item = self.items.get(Key[KEY]["S"])
        return {"Item": item} if item else {}

    def update_item(self, **req: Any) -> dict[str, Any]:
        pk = req["Key"][KEY]["S"]
        if not self._ok(req, self.items.get(pk)):
            raise ClientError("ConditionalCheckFailedException")
        values = req["ExpressionAttributeValues"]
        self.items[pk] = {**self.items[pk], "doc": values[":doc"], "v": values[":next"]}
        return {}

    def transact_write_items(self, TransactItems: list[dict[str, Any]]) -> dict[str, Any]:
        reasons = []
        for t in TransactItems:
            ((kind, body),) = t.items()
            pk = (body.get("Item") or body["Key"])[KEY]["S"]
            reasons.append("None" if self._ok(body, self.items.get(pk)) else "ConditionalCheckFailed")
        if "ConditionalCheckFailed" in reasons:
            raise ClientError("TransactionCanceledException", "cancelled", reasons)
        for t in TransactItems:
            ((kind, body),) = t.items()
            if kind == "Put":
                pk = body["Item"][KEY]["S"]
                self.items[pk] = body["Item"]
                if pk.startswith("slot#"):
                    self.on_slot(pk[5:], json.loads(body["Item"]["doc"]["S"]))
            elif kind == "Delete":
                self.items.pop(body["Key"][KEY]["S"], None)
        return {}

    def get_paginator(self, name: str) -> Pages:
        assert name == "scan", name
        pages: list[dict[str, Any]] = [{"Items": []}]
        size = 0
        for item in self.items.values():
            n = len(item["doc"]["S"]) + 40
            if size + n > SCAN_PAGE_BYTES:
                pages.append({"Items": []})
                size = 0
            pages[-1]["Items"].append(item)
            size += n
        return Pages(pages)


class Body:
    def __init__(self, data: bytes):
        self.data = data

    def read(self) -> bytes:
        return self.data


class Bucket:
    """One S3 bucket: objects with ETags and LastModified on the virtual clock; bytes served counted per prefix."""

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self.objects: dict[str, tuple[bytes, str, float, dict[str, str]]] = {}
        self.bytes_out: Counter = Counter()
        self.gets: Counter = Counter()
        self.on_put: Callable[[str, dict[str, str]], None] = lambda key, metadata: None

    @staticmethod
    def prefix(key: str) -> str:
        return key.split("/", 1)[0] if "/" in key else key

    def put(self, key: str, body: bytes, metadata: dict[str, str] | None = None) -> str:
        etag = '"' + hashlib.md5(body).hexdigest() + '"'
        self.objects[key] = (body, etag, self.clock(), dict(metadata or {}))
        self.on_put(key, dict(metadata or {}))
        return etag

    def put_object(self, Bucket: str, Key: str, Body: bytes, **params: Any) -> dict[str, Any]:
        old = self.objects.get(Key)
        if ("IfMatch" in params and (old is None or old[1] != params["IfMatch"])) or (
            params.get("IfNoneMatch") == "*" and old is not None
        ):
            raise ClientError("PreconditionFailed")
        return {"ETag": self.put(Key, Body if isinstance(Body, bytes) else Body.encode(), params.get("Metadata"))}

    def get_object(self, Bucket: str, Key: str, IfNoneMatch: str = "") -> dict[str, Any]:
        self.gets[self.prefix(Key)] += 1
        if Key not in self.objects:
            raise ClientError("NoSuchKey")
        body, etag, _, _ = self.objects[Key]
        if IfNoneMatch and IfNoneMatch == etag:
            raise ClientError("304")
        self.bytes_out[self.prefix(Key)] += len(body)
        return {"Body": Body(body), "ETag": etag}

    def head_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        if Key not in self.objects:
            raise ClientError("404")
        _, etag, _, meta = self.objects[Key]
        return {"ETag": etag, "Metadata": meta}

    def get_paginator(self, name: str) -> Pages:
        assert name == "list_objects_v2", name
        return _Listing(self)


class _Listing(Pages):
    def __init__(self, bucket: Bucket):
        self.bucket = bucket

    def paginate(self, Bucket: str, Prefix: str = "", **_: Any):  # read when asked, as S3 answers
        keys = sorted(k for k in self.bucket.objects if k.startswith(Prefix))
        for start in range(0, max(1, len(keys)), LIST_PAGE_KEYS):
            yield {
                "Contents": [
                    {"Key": k, "ETag": self.bucket.objects[k][1], "LastModified": self.bucket.objects[k][2]}
                    for k in keys[start : start + LIST_PAGE_KEYS]
                ]
            }


class Timed:
    """A client of the controller (or the head's signer): each operation and each page costs `latency(service,
    operation, params)` virtual seconds before it is answered."""

    def __init__(self, sim: Sim, client: Any, service: str, latency: Callable[[str, str, dict[str, Any]], float]):
        self._sim, self._client, self._service, self._latency = sim, client, service, latency

    def get_paginator(self, operation: str) -> Any:
        inner, sim, cost = self._client.get_paginator(operation), self._sim, self._latency
        service = self._service

        class _Timed:
            def paginate(self, **params: Any):
                for page in inner.paginate(**params):  # each page one request, answered after its latency
                    sim.sleep(cost(service, operation, params))
                    yield page

        return _Timed()

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._client, name)
        if name.startswith("_") or not callable(found):
            return found

        def call(*args: Any, **params: Any) -> Any:
            self._sim.sleep(self._latency(self._service, name, params))
            return found(*args, **params)

        return call
