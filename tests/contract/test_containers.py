"""The image cache's contract (hpcc_contract/containers.py): image references as pyxis users write them, normalised
as enroot reads them, and refused by name when malformed; the cache's file names; the entry and usage documents
round-trip and carry their format version."""

from __future__ import annotations

import json

import pytest

from hpcc_contract import containers as c
from hpcc_contract import formats

HEX = "0123456789abcdef" * 4
DIGEST = f"sha256:{HEX}"


@pytest.mark.parametrize(
    "written,canonical,uri",
    [
        (
            "nvcr.io#nvidia/pytorch:24.07-py3",
            "nvcr.io/nvidia/pytorch:24.07-py3",
            "docker://nvcr.io#nvidia/pytorch:24.07-py3",
        ),
        ("docker://nvcr.io#nvidia/pytorch:24.07-py3", "nvcr.io/nvidia/pytorch:24.07-py3", None),
        ("docker://nvcr.io/nvidia/pytorch:24.07-py3", "nvcr.io/nvidia/pytorch:24.07-py3", None),
        (
            "ubuntu:22.04",
            "registry-1.docker.io/library/ubuntu:22.04",
            "docker://registry-1.docker.io#library/ubuntu:22.04",
        ),
        ("ubuntu", "registry-1.docker.io/library/ubuntu:latest", None),
        ("docker.io/ubuntu", "registry-1.docker.io/library/ubuntu:latest", None),
        ("index.docker.io#nvidia/cuda:12.4.1-base", "registry-1.docker.io/nvidia/cuda:12.4.1-base", None),
        ("nvidia/cuda:12.4.1-base", "registry-1.docker.io/nvidia/cuda:12.4.1-base", None),
        ("localhost/foo", "registry-1.docker.io/localhost/foo:latest", None),  # enroot: a registry has '.' or ':'
        ("localhost:5000/team/app:v1", "localhost:5000/team/app:v1", "docker://localhost:5000#team/app:v1"),
        (
            "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1",
            "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1",
            None,
        ),
        (f"ubuntu@{DIGEST}", f"registry-1.docker.io/library/ubuntu:latest@{DIGEST}", None),
        (f"nvcr.io/nvidia/pytorch:24.07-py3@{DIGEST}", f"nvcr.io/nvidia/pytorch:24.07-py3@{DIGEST}", None),
        (
            "bob@nvcr.io#nvidia/pytorch:24.07-py3",
            "nvcr.io/nvidia/pytorch:24.07-py3",
            "docker://bob@nvcr.io#nvidia/pytorch:24.07-py3",
        ),
    ],
)
def test_a_reference_is_normalised_as_enroot_reads_it(written, canonical, uri):
    ref = c.parse_reference(written)
    assert ref.canonical == canonical
    if uri:
        assert ref.enroot_uri() == uri
    assert c.parse_reference(ref.canonical).canonical == canonical  # the canonical form reads as itself
    assert c.parse_reference(ref.enroot_uri()).canonical == canonical


def test_an_import_is_pinned_to_the_digest_the_cache_keys_it_by():
    ref = c.parse_reference("nvcr.io#nvidia/pytorch:24.07-py3")
    assert ref.enroot_uri(DIGEST) == f"docker://nvcr.io#nvidia/pytorch:24.07-py3@{DIGEST}"


@pytest.mark.parametrize(
    "written,why",
    [
        ("", "empty"),
        ("ubuntu;id", "image name"),
        ("ubuntu $(id)", "space"),
        ("ubuntu\n", "control"),
        ("ubuntü", "non-ASCII"),
        ("UBUNTU", "image name"),
        ("dockerd://ubuntu", "only docker://"),
        ("podman://ubuntu", "only docker://"),
        ("/fsx/images/train.sqsh", "squashfs path"),
        ("./train.sqsh", "squashfs path"),
        ("#nvidia/pytorch", "no registry"),
        ("nvcr.io#", "image name"),
        ("ubuntu:", "tag"),
        ("ubuntu:-x", "tag"),
        ("ubuntu:" + "x" * 129, "tag"),
        ("ubuntu@sha256:abc", "digest"),
        (f"ubuntu@sha512:{HEX}{HEX}", "digest"),
        ("reg:port/x", "registry"),
        ("-bad.io/x", "registry"),
        ("$oauthtoken@nvcr.io#nvidia/pytorch", "user"),
        ("nvcr.io#nvidia//pytorch", "image name"),
        ("x" * 600, "longer than"),
    ],
)
def test_a_malformed_reference_is_refused_saying_which_part(written, why):
    with pytest.raises(c.BadReference, match=why):
        c.parse_reference(written)


def test_file_names_are_the_digest_and_only_the_entries_names_read_back():
    assert c.image_name(DIGEST) == f"sha256-{HEX}.sqsh"
    assert c.lock_name(DIGEST) == f"sha256-{HEX}.lock"
    assert c.entry_name(DIGEST) == f"sha256-{HEX}.json"
    assert c.digest_of(c.image_name(DIGEST)) == c.digest_of(c.lock_name(DIGEST)) == DIGEST
    temp = c.temp_name(DIGEST, "gpu-003", 42)
    assert temp.startswith(c.temp_prefix(DIGEST)) and temp.startswith(".") and c.digest_of(temp) is None
    assert c.digest_of("sha256-abc.sqsh") is None and c.digest_of(f"sha256-{HEX}") is None
    assert c.cache_root("/fsx") == "/fsx/.hpcc/images" and c.usage_dir("/fsx") == "/fsx/.hpcc/image-usage"
    with pytest.raises(c.BadReference):
        c.stem("sha256:../../etc")


def entry(**kw) -> c.CacheEntry:
    fields = dict(
        digest=DIGEST,
        references=["nvcr.io/nvidia/pytorch:24.07-py3"],
        size=123,
        created=1000.0,
        last_used=2000.5,
        imported_by="gpu-003",
    )
    return c.CacheEntry(**{**fields, **kw})


def test_a_cache_entry_round_trips_with_its_version():
    text = c.dumps_entry(entry())
    assert json.loads(text)[formats.FORMAT_KEY] == formats.IMAGE_ENTRY == 1
    assert c.loads_entry(text) == entry()


def test_a_newer_or_malformed_cache_entry_is_refused():
    doc = json.loads(c.dumps_entry(entry()))
    with pytest.raises(formats.NewerFormat, match="image cache entry format 2 is newer"):
        c.loads_entry(json.dumps({**doc, "format": 2}))
    for bad in ({"size": -1}, {"size": "1"}, {"lastUsed": True}, {"digest": "sha256:x"}, {"references": "x"}):
        with pytest.raises(c.BadRecord):
            c.loads_entry(json.dumps({**doc, **bad}))
    with pytest.raises(c.BadRecord, match="not JSON"):
        c.loads_entry('{"format": 1, "dig')


def usage(**kw) -> c.UsageRecord:
    fields = dict(job="1234_7", reference="ubuntu:22.04", digest=None, node="gpu-003", time=1700000000.0)
    return c.UsageRecord(**{**fields, **kw})


def test_a_usage_record_is_one_line_with_its_version_and_reads_back_canonical():
    line = c.dumps_usage(usage(digest=DIGEST))
    assert line.endswith("\n") and line.count("\n") == 1
    assert json.loads(line)[formats.FORMAT_KEY] == formats.IMAGE_USE == 1
    assert c.loads_usage(line) == usage(reference="registry-1.docker.io/library/ubuntu:22.04", digest=DIGEST)
    assert c.loads_usage(c.dumps_usage(usage())).digest is None  # the Prolog may not know it yet


def test_a_newer_or_malformed_usage_record_is_refused():
    doc = json.loads(c.dumps_usage(usage()))
    with pytest.raises(formats.NewerFormat, match="image usage record format 2 is newer"):
        c.loads_usage(json.dumps({**doc, "format": 2}))
    for bad in ({"job": "12; rm"}, {"node": "../x"}, {"reference": "UP"}, {"digest": "md5:1"}, {"time": None}):
        with pytest.raises(c.BadRecord):
            c.loads_usage(json.dumps({**doc, **bad}))
    with pytest.raises(c.BadRecord, match="job"):
        c.dumps_usage(usage(job="x"))
    with pytest.raises(c.BadReference):
        c.dumps_usage(usage(reference="dockerd://x"))


def test_an_image_request_and_answer_round_trip_stamped():
    wire = c.dumps_request(c.ImageRequest("docker://nvcr.io#nvidia/pytorch:24.07-py3", "1234_7"))
    assert wire.endswith(b"\n") and json.loads(wire)[formats.FORMAT_KEY] == formats.IMAGE_REQUEST
    assert c.loads_request(wire) == ("docker://nvcr.io#nvidia/pytorch:24.07-py3", "1234_7")
    assert c.loads_answer(c.dumps_answer(c.ImageAnswer("/fsx/.hpcc/images/x.sqsh", None))).path == (
        "/fsx/.hpcc/images/x.sqsh"
    )
    said = c.loads_answer(c.dumps_answer(c.ImageAnswer(None, "no\nsuch image" + "x" * 20000)))
    assert said.path is None and said.error and said.error.startswith("no such image") and "\n" not in said.error


@pytest.mark.parametrize(
    "wire,says",
    [
        (b"\xff\xfe", "not UTF-8"),
        (b"[1]", "not a JSON object"),
        (b'{"reference": "ubuntu", "job": "12; rm"}', "not a Slurm job id"),
        (b'{"reference": 5, "job": "12"}', "reference is not"),
    ],
)
def test_a_malformed_image_request_is_refused_by_name(wire, says):
    with pytest.raises(c.BadRecord, match=says):
        c.loads_request(wire)


def test_an_answer_without_an_absolute_path_or_an_error_is_refused():
    for doc in ({"path": "relative.sqsh"}, {"path": "/a\nb"}, {}):
        with pytest.raises(c.BadRecord):
            c.loads_answer(json.dumps(doc).encode())
