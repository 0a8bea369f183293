"""The membership object in moto's S3: 4,096 nodes published and read back, 304 when unchanged, generations only
forward, and no writer overwriting another's."""

from __future__ import annotations

import pytest

from hpcc_node.controller import membership
from hpcc_node.controller.decide import digest
from tests.node.conftest import STATE_BUCKET

BUCKET = STATE_BUCKET


def body(n: int) -> dict:
    nodes = [
        {
            "name": f"gpu-{i:03d}",
            "group": "gpu",
            "ip": f"10.0.{i // 250}.{i % 250 + 4}",
            "instance": f"i-{i:017x}",
            "state": "ready",
        }
        for i in range(n)
    ]
    return {"nodes": nodes, "groups": {"gpu": n}, "bundle": {"uri": "s3://b/bundle.tgz", "sha256": "0" * 64}}


def test_4096_nodes_publish_and_read_back_and_an_unchanged_object_answers_304(s3):
    big = body(4096)
    assert membership.head(s3, BUCKET) == (0, "")
    etag = membership.publish(s3, BUCKET, big, 1, "")
    doc, read_etag = membership.read(s3, BUCKET)
    assert doc["generation"] == 1 and doc["nodes"] == big["nodes"] and read_etag == etag
    assert len(membership.encode(big, 1)) < 1_000_000  # far from any limit; SSM's was 8 KB
    assert membership.read(s3, BUCKET, etag) == (None, etag)  # a cheap poll
    assert membership.head(s3, BUCKET) == (1, etag)


def test_a_writer_never_overwrites_a_generation_it_did_not_read(s3):
    first = membership.publish(s3, BUCKET, body(2), 1, "")
    with pytest.raises(membership.Conflict):
        membership.publish(s3, BUCKET, body(3), 1, "")  # create-once: it exists
    second = membership.publish(s3, BUCKET, body(3), 2, first)
    with pytest.raises(membership.Conflict):
        membership.publish(s3, BUCKET, body(4), 3, first)  # stale ETag
    doc, _ = membership.read(s3, BUCKET, first)
    assert doc["generation"] == 2 and len(doc["nodes"]) == 3 and second


def test_agents_apply_only_newer_generations():
    assert membership.newer(None, {"generation": 1})
    assert membership.newer(4, {"generation": 5})
    assert not membership.newer(5, {"generation": 5}) and not membership.newer(5, {"generation": 4})
    assert not membership.newer(5, None) and not membership.newer(None, {"generation": "6"})


def test_the_digest_ignores_key_order_so_an_unchanged_cluster_publishes_nothing():
    a = body(3)
    b = {"bundle": a["bundle"], "groups": a["groups"], "nodes": a["nodes"]}
    assert digest(a) == digest(b) and digest(a) != digest(body(4))
