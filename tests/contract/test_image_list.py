"""The head's listing of the image cache (hpcc_contract/image_list.py), what `hpcc images` reads: it reads back as
written, a newer format is refused by name, a malformed one by its field, and a reference finds its entry whichever
way it is spelled."""

from __future__ import annotations

import json

import pytest

from hpcc_contract import containers as c
from hpcc_contract import formats
from hpcc_contract.image_list import Listing, cached_as, dumps_listing, loads_listing

A = c.CacheEntry(f"sha256:{'a' * 64}", ["nvcr.io/nvidia/pytorch:24.07-py3"], 100, 1.0, 2.5, "gpu-001")
B = c.CacheEntry(f"sha256:{'b' * 64}", [], 7, 3.0, 3.0, "")  # no entry document: its file's own times


def test_a_listing_reads_back_as_written():
    listing = Listing("/fsx/.hpcc/images", 5 << 30, [A, B])
    doc = json.loads(dumps_listing(listing))
    assert doc["format"] == formats.IMAGE_LIST and doc["capBytes"] == 5 << 30
    assert loads_listing(dumps_listing(listing)) == listing
    assert listing.total == 107 and listing.path(A.digest) == f"/fsx/.hpcc/images/sha256-{'a' * 64}.sqsh"
    assert loads_listing(dumps_listing(listing._replace(cap_bytes=None))).cap_bytes is None


def test_a_newer_listing_is_refused_by_name():
    doc = json.loads(dumps_listing(Listing("/fsx/.hpcc/images", None, [A])))
    doc["format"] = formats.IMAGE_LIST + 1
    with pytest.raises(formats.NewerFormat, match="image listing"):
        loads_listing(json.dumps(doc))


@pytest.mark.parametrize(
    "change,says",
    [
        ({"root": "relative"}, "root"),
        ({"capBytes": -1}, "capBytes"),
        ({"capBytes": True}, "capBytes"),
        ({"images": {}}, "images"),
        ({"images": [{"digest": "sha256:x", "references": []}]}, "digest"),
        (
            {"images": [dict(json.loads(dumps_listing(Listing("/r", None, [A])))["images"][0], references=["a b"])]},
            "image reference",
        ),  # noqa: E501
    ],
)
def test_a_malformed_listing_is_refused_by_its_field(change, says):
    doc = dict(json.loads(dumps_listing(Listing("/fsx/.hpcc/images", None, [A]))), **change)
    with pytest.raises(c.BadRecord, match=says):
        loads_listing(json.dumps(doc))


def test_not_json_is_refused():
    with pytest.raises(c.BadRecord, match="not JSON"):
        loads_listing("hpcc containers: something")


def test_a_reference_finds_its_entry_in_any_spelling_and_a_pinned_one_by_digest():
    listing = Listing("/r", None, [A, B])
    assert cached_as(listing, "nvcr.io#nvidia/pytorch:24.07-py3") == A
    assert cached_as(listing, "docker://nvcr.io/nvidia/pytorch:24.07-py3") == A
    assert cached_as(listing, "nvcr.io/nvidia/pytorch:24.08-py3") is None
    assert cached_as(listing, f"ubuntu:22.04@{B.digest}") == B
