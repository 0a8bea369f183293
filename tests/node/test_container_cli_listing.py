"""What `hpcc images` runs on the head (hpcc_node/containers/__main__.py): `list --json` prints the contract's
versioned listing with the cache's root and its cap, and `python3 -m hpcc_node.containers.warm` imports with the
image service's own enroot (service.py root_enroot), refusing plainly when root's credentials directory is not there."""

from __future__ import annotations

import io
import os

from hpcc_contract import containers as c
from hpcc_contract.image_list import Listing, loads_listing
from hpcc_node.containers import __main__ as cli
from hpcc_node.containers import warm

DIGEST = f"sha256:{'d' * 64}"


def run(*argv: str):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def warm_run(*argv: str):
    out, err = io.StringIO(), io.StringIO()
    code = warm.main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def fake_enroot(calls):
    def resolve(ref):
        calls.append(("digest", ref.canonical))
        return DIGEST

    def import_(ref, digest, dest):
        calls.append(("import", ref.canonical))
        with open(dest, "wb") as f:
            f.write(b"hsqs" + b"0" * 60)

    return resolve, import_


def test_list_json_is_the_versioned_listing_with_root_and_cap(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(warm, "root_enroot", lambda: fake_enroot(calls))
    root = str(tmp_path / "fsx" / ".hpcc" / "images")
    assert warm_run("--fsx", str(tmp_path / "fsx"), "--node", "head", "ensure", "ubuntu:22.04")[0] == 0
    code, out, err = run("--fsx", str(tmp_path / "fsx"), "list", "--json", "--cap", "2G")
    assert code == 0, err
    listing = loads_listing(out)
    assert listing._replace(images=[]) == Listing(root, 2 << 30, [])
    (entry,) = listing.images
    assert entry.digest == DIGEST and entry.size == 64 and entry.imported_by == "head"
    assert entry.references == ["registry-1.docker.io/library/ubuntu:22.04"]
    assert calls == [
        ("digest", "registry-1.docker.io/library/ubuntu:22.04"),
        ("import", "registry-1.docker.io/library/ubuntu:22.04"),
    ]  # noqa: E501
    assert loads_listing(run("--root", root, "list", "--json")[1]).cap_bytes is None


def test_without_roots_credentials_directory_the_service_import_says_so(tmp_path, monkeypatch):
    if os.path.isdir(c.ROOT_ENROOT_CONFIG):  # a machine that has one: nothing to show here
        return
    code, out, err = warm_run("--root", str(tmp_path), "ensure", "ubuntu:22.04")
    assert code == 1 and out == "" and c.ROOT_ENROOT_CONFIG in err and "Traceback" not in err


def test_a_bad_cap_is_one_line_and_exit_2(tmp_path):
    code, out, err = run("--root", str(tmp_path), "list", "--json", "--cap", "lots")
    assert code == 2 and "size 'lots'" in err
