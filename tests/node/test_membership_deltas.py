"""A membership change costs each node what changed, not the cluster (issue 38): the controller writes each
generation's delta before the object, an agent's poll is a HeadObject, and a node that holds generation n patches
its copy to the published bytes, or reads the whole object whenever the deltas do not lead there. In moto's S3."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from hpcc_contract import formats
from hpcc_contract.names import MEMBERSHIP_DELTAS_KEPT, MEMBERSHIP_KEY, membership_delta_key
from hpcc_node.controller import membership
from tests.node.test_controller_membership import BUCKET
from tests.node.test_controller_membership import body as numbered


def body(n: int) -> dict:
    """n nodes in the controller's order (decide.membership_body sorts them by name: gpu-1000 before gpu-101)."""
    b = numbered(n)
    return {**b, "nodes": sorted(b["nodes"], key=lambda node: node["name"])}


class Counted:
    """The S3 client, each call and the bytes of each body it answered written down."""

    def __init__(self, s3):
        self.s3, self.calls, self.bytes = s3, [], 0

    def head_object(self, **kw):
        self.calls.append(("head", kw["Key"]))
        return self.s3.head_object(**kw)

    def get_object(self, **kw):
        self.calls.append(("get", kw["Key"]))
        out = self.s3.get_object(**kw)
        data = out["Body"].read()
        self.bytes += len(data)
        out["Body"] = type("B", (), {"read": lambda self_: data})()
        return out

    def put_object(self, **kw):
        self.calls.append(("put", kw["Key"]))
        return self.s3.put_object(**kw)


def replaced(b: dict, i: int, instance: str, ip: str) -> dict:
    """`b` with node i on another instance and address (a replacement)."""
    nodes = [dict(n, instance=instance, ip=ip) if k == i else n for k, n in enumerate(b["nodes"])]
    return {**b, "nodes": nodes}


def publish(s3, b: dict, last=None):
    return membership.publish_next(s3, BUCKET, b, last, lambda n: None)


def test_a_delta_patches_a_copy_to_exactly_the_published_bytes():
    before = body(6)
    after = replaced(before, 2, "i-0000000000000beef", "10.0.9.9")
    after = {**after, "nodes": [n for n in after["nodes"] if n["name"] != "gpu-004"], "groups": {"gpu": 5}}
    after["nodes"].append({"name": "gpu-006", "group": "gpu", "ip": "10.0.9.10", "instance": "i-6", "state": "booting"})
    after["nodes"].sort(key=lambda n: n["name"])
    change = membership.delta(before, after, 8)
    assert [n["name"] for n in change["changed"]] == ["gpu-002", "gpu-006"] and change["removed"] == ["gpu-004"]
    patched = membership.patch(json.loads(membership.encode(before, 7)), change)
    assert membership.encode(membership.body_of(patched), 8) == membership.encode(after, 8)
    assert membership.patch(json.loads(membership.encode(before, 6)), change) is None  # not its base
    forged = {**change, "changed": [dict(change["changed"][0], ip="10.6.6.6")]}
    assert membership.patch(json.loads(membership.encode(before, 7)), forged) is None  # bytes not the controller's


def test_a_replacement_at_4096_nodes_reaches_a_node_as_a_small_delta_and_a_steady_poll_is_one_head(s3):
    big = body(4096)
    last = publish(s3, big)
    node = Counted(s3)
    doc, etag = membership.follow(node, BUCKET, None, "")  # a new agent reads the whole object once
    assert doc["generation"] == 1 and node.bytes > 400_000
    node.calls, node.bytes = [], 0
    assert membership.follow(node, BUCKET, doc, etag) == (None, etag) and node.calls == [("head", MEMBERSHIP_KEY)]
    publish(s3, replaced(big, 100, "i-00000000000000new", "10.0.99.4"), last)
    node.calls = []
    got, etag = membership.follow(node, BUCKET, doc, etag)
    assert node.calls == [("head", MEMBERSHIP_KEY), ("get", membership_delta_key(2))]
    assert got["generation"] == 2 and got["nodes"][100]["instance"] == "i-00000000000000new"
    assert node.bytes < 2_000  # was the whole 400 KB object at every node, every generation
    assert membership.read(s3, BUCKET)[0] == got


def test_a_node_generations_behind_chains_the_deltas_and_one_too_far_behind_reads_the_whole_object(s3):
    b, last = body(8), None
    held = None
    for g in range(1, MEMBERSHIP_DELTAS_KEPT + 3):
        b = replaced(b, g % 8, f"i-{g:017x}", f"10.1.0.{g}")
        last = publish(s3, b, last)
        if g == 1:
            held, _ = membership.read(s3, BUCKET)
        if g == 4:
            node = Counted(s3)
            got, _ = membership.follow(node, BUCKET, held, "stale")
            assert [c for c in node.calls if c[0] == "get"] == [("get", membership_delta_key(n)) for n in (2, 3, 4)]
            assert got == membership.read(s3, BUCKET)[0]
    node = Counted(s3)
    got, _ = membership.follow(node, BUCKET, held, "stale")  # generation 1 of 34: the ring has moved on
    assert node.calls == [("head", MEMBERSHIP_KEY), ("get", MEMBERSHIP_KEY)] and got["generation"] == last.generation


class Denied:
    """A node role that may not read the deltas yet (its bundle arrived before `hpcc up` granted their prefix)."""

    def __init__(self, s3):
        self.s3 = s3

    def head_object(self, **kw):
        return self.s3.head_object(**kw)

    def get_object(self, **kw):
        if kw["Key"] != MEMBERSHIP_KEY:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "GetObject")
        return self.s3.get_object(**kw)


def test_a_node_not_yet_allowed_to_read_the_deltas_reads_the_whole_object(s3):
    b = body(8)
    last = publish(s3, b)
    held, etag = membership.read(s3, BUCKET)
    publish(s3, replaced(b, 5, "i-00000000000000005", "10.2.0.5"), last)
    got, _ = membership.follow(Denied(s3), BUCKET, held, etag)
    assert got == membership.read(s3, BUCKET)[0] and got["generation"] == 2


@pytest.mark.parametrize("harm", ["missing", "tampered", "newer", "no digest"])
def test_a_delta_that_does_not_lead_to_the_published_bytes_falls_back_to_the_whole_object(s3, harm):
    b = body(8)
    last = publish(s3, b)
    held, etag = membership.read(s3, BUCKET)
    publish(s3, replaced(b, 3, "i-00000000000000003", "10.2.0.3"), last)
    key = membership_delta_key(2)
    if harm == "missing":
        s3.delete_object(Bucket=BUCKET, Key=key)
    elif harm in ("tampered", "newer"):
        change = json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
        change = {**change, "rest": {**change["rest"], "groups": {"gpu": 99}}} if harm == "tampered" else change
        change = formats.stamp(change, formats.MEMBERSHIP_DELTA + 1) if harm == "newer" else change
        s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(change).encode())
    else:  # an object written before deltas: no sha256 in its metadata
        data = s3.get_object(Bucket=BUCKET, Key=MEMBERSHIP_KEY)["Body"].read()
        s3.put_object(Bucket=BUCKET, Key=MEMBERSHIP_KEY, Body=data, Metadata={"generation": "2"})
    node = Counted(s3)
    got, _ = membership.follow(node, BUCKET, held, etag)
    assert node.calls[-1] == ("get", MEMBERSHIP_KEY) and got == membership.read(s3, BUCKET)[0]
    assert got["nodes"][3]["instance"] == "i-00000000000000003"


def test_the_controller_writes_the_delta_before_the_object_and_reads_the_object_only_after_a_restart(s3):
    b = body(8)
    head = Counted(s3)
    first = publish(head, b)
    assert head.calls == [("head", MEMBERSHIP_KEY), ("put", MEMBERSHIP_KEY)]  # generation 1: no base, no delta
    head.calls = []
    second = publish(head, replaced(b, 1, "i-1b", "10.3.0.1"), first)
    assert head.calls == [("head", MEMBERSHIP_KEY), ("put", membership_delta_key(2)), ("put", MEMBERSHIP_KEY)]
    head.calls = []
    publish(head, replaced(b, 2, "i-2b", "10.3.0.2"), None)  # a restarted controller holds no body
    assert head.calls == [
        ("head", MEMBERSHIP_KEY),
        ("get", MEMBERSHIP_KEY),
        ("put", membership_delta_key(3)),
        ("put", MEMBERSHIP_KEY),
    ]
    assert second.generation == 2
    marked = []
    membership.publish_next(s3, BUCKET, b, None, marked.append)
    assert marked == [4]  # the ledger's mark names the generation about to be written, before anything is


def test_deltas_that_lead_elsewhere_than_the_published_object_are_not_taken(s3):
    """A delta consistent with itself and its base, but the object was written again without one (a writer of
    before deltas): the copy must be the published bytes, so the whole object is read."""
    b = body(8)
    last = publish(s3, b)
    held, etag = membership.read(s3, BUCKET)
    second = publish(s3, replaced(b, 4, "i-00000000000000004", "10.2.0.4"), last)
    membership.publish(s3, BUCKET, replaced(b, 6, "i-00000000000000006", "10.2.0.6"), 2, second.etag)
    node = Counted(s3)
    got, _ = membership.follow(node, BUCKET, held, etag)
    assert node.calls[-1] == ("get", MEMBERSHIP_KEY) and got["nodes"][6]["instance"] == "i-00000000000000006"
