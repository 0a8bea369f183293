"""`python3 -m hpcc_node.containers ensure|evict|list` (hpcc_node/containers/__main__.py): JSON on stdout, a bad
argument or reference one line on stderr and exit 2 (never a traceback), and enroot run with a list of arguments,
the import pinned to the digest the cache keys it by."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcc_contract import containers as c
from hpcc_node.containers import __main__ as cli

ROOT = Path(__file__).resolve().parents[2]
DIGEST = f"sha256:{'e' * 64}"
FAKE_ENROOT = f"""#!{sys.executable}
import json, os, sys
with open(os.environ["FAKE_ENROOT_LOG"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1] == "digest":
    print("some progress line")
    print("{DIGEST}")
elif sys.argv[1] == "import":
    if "broken" in sys.argv[-1]:
        sys.stderr.write("[ERROR] URL https://registry/v2/broken/manifests returned error code: 404\\n")
        sys.exit(1)
    with open(sys.argv[sys.argv.index("--output") + 1], "wb") as f:
        f.write(b"hsqs" + b"0" * 96)
"""


@pytest.fixture
def enroot(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "enroot").write_text(FAKE_ENROOT)
    (bin_dir / "enroot").chmod(0o755)
    log = tmp_path / "enroot.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_ENROOT_LOG", str(log))
    return log


def run(*argv: str):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def test_ensure_imports_through_enroot_pinned_to_the_digest_and_prints_the_path(tmp_path, enroot):
    root = tmp_path / "fsx"
    code, out, err = run("--fsx", str(root), "--node", "gpu-001", "ensure", "nvcr.io#nvidia/pytorch:24.07-py3")
    assert code == 0, err
    path = str(root / ".hpcc" / "images" / c.image_name(DIGEST))
    assert json.loads(out) == {"reference": "nvcr.io/nvidia/pytorch:24.07-py3", "digest": DIGEST, "path": path}
    calls = [json.loads(line) for line in enroot.read_text().splitlines()]
    temp = c.temp_name(DIGEST, "gpu-001", os.getpid())
    assert calls == [
        ["digest", "--", "docker://nvcr.io#nvidia/pytorch:24.07-py3"],
        ["import", "--output", str(root / ".hpcc/images" / temp), "--", f"docker://nvcr.io#nvidia/pytorch:24.07-py3@{DIGEST}"],
    ]  # fmt: skip
    code, out, _ = run("--fsx", str(root), "list")
    (image,) = json.loads(out)["images"]
    assert code == 0 and image["references"] == ["nvcr.io/nvidia/pytorch:24.07-py3"] and image["size"] == 100
    assert set(image) == {"references", "digest", "size", "created", "lastUsed", "importedBy"}


def test_a_failed_enroot_import_exits_1_with_enroots_own_words(tmp_path, enroot):
    code, out, err = run("--root", str(tmp_path / "c"), "--node", "gpu-001", "ensure", "nvcr.io#team/broken:1")
    assert code == 1 and out == ""
    assert err.splitlines()[-1].startswith("hpcc containers: enroot import nvcr.io/team/broken:1: exit 1: [ERROR] URL")
    assert sorted(os.listdir(tmp_path / "c")) == [c.lock_name(DIGEST)]


def test_evict_takes_a_size_and_prints_what_it_did(tmp_path, enroot):
    root = str(tmp_path / "c")
    assert run("--root", root, "ensure", "ubuntu:22.04")[0] == 0
    code, out, _ = run("--root", root, "evict", "--cap", "1G")
    assert code == 0 and json.loads(out)["evictions"] == [] and len(json.loads(out)["images"]) == 1
    code, out, err = run("--root", root, "evict", "--cap", "0")
    (kept,) = json.loads(out)["evictions"]  # just used: within the grace
    assert code == 0 and not kept["evicted"] and "in use" in kept["reason"]


@pytest.mark.parametrize(
    "argv,says",
    [
        (["ensure", "ubuntu;id"], "image reference 'ubuntu;id'"),
        (["ensure", "dockerd://ubuntu"], "only docker://"),
        (["evict", "--cap", "lots"], "size 'lots'"),
        (["evict"], "the following arguments are required: --cap"),
        (["prune"], "invalid choice"),
        ([], "the following arguments are required: command"),
        (["--node", "../x", "list"], "node '../x' is not a node name"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, argv, says, enroot):
    code, out, err = run("--root", str(tmp_path), *argv)
    assert code == 2 and out == "" and says in err and "Traceback" not in err
    assert not enroot.exists()  # nothing was asked of a registry


def test_the_module_runs_as_a_program_without_a_traceback(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "hpcc_node.containers", "--root", str(tmp_path), "ensure", "UPPER/case"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "image name" in done.stderr and "Traceback" not in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "hpcc_node.containers", "--root", str(tmp_path), "list"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and json.loads(done.stdout) == {"images": []}


@pytest.mark.parametrize("text,size", [("0", 0), ("512", 512), ("2K", 2048), ("3G", 3 << 30), ("1TiB", 1 << 40)])
def test_sizes_are_bytes_or_binary_units(text, size):
    assert cli.parse_size(text) == size
