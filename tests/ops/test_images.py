"""`hpcc images` and `hpcc images pull` (infra/ops/cli_images.py, infra/ops/images.py) against a fake head: the
table and the total against the cap, --json as the contract's listing, a bad IMAGE refused by name before anything
runs, a pull's progress streamed and its path, digest and size said, a second pull answered from the listing
without asking a registry, the head's failures and a deadline said in one line."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hpcc_contract import containers as c
from hpcc_contract.image_list import Listing, dumps_listing, loads_listing
from infra.ops import cli_images, images
from infra.ops.cli import app

NOW = 1_700_000_000.0
PYTORCH = c.CacheEntry(
    f"sha256:{'a' * 64}", ["nvcr.io/nvidia/pytorch:24.07-py3"], 21 << 30, NOW - 7200, NOW - 300, "gpu-001"
)
UBUNTU = c.CacheEntry(
    f"sha256:{'b' * 64}", ["registry-1.docker.io/library/ubuntu:22.04"], 30 << 20, NOW - 9e5, NOW - 9e4, "head"
)
NEW = f"sha256:{'c' * 64}"
ROOT = "/fsx/.hpcc/images"


class FakeHead:
    """The head as the scripts see it: the listing, and an import that adds the reference's image."""

    def __init__(self, images=(PYTORCH, UBUNTU), cap=100 << 30, fail=None):
        self.listing = Listing(ROOT, cap, list(images))
        self.scripts: list[str] = []
        self.fail = fail

    def __call__(self, script, on_line, timeout_s):
        self.scripts.append(script)
        if self.fail:
            return images.HeadRun(self.fail[0], "", ["enroot: something", self.fail[1]])
        if "ensure" in script:
            ensure = next(line for line in script.splitlines() if " ensure " in line)
            words = shlex.split(ensure)
            ref = c.parse_reference(words[words.index("ensure") + 1])
            for line in (f"importing {ref.canonical} ({NEW})", "Fetching image manifest", f"imported {ref.canonical}"):
                on_line(line)
            self.listing.images.insert(0, c.CacheEntry(NEW, [ref.canonical], 5 << 30, NOW, NOW, "head"))
        return images.HeadRun(0, dumps_listing(self.listing), [])


@pytest.fixture
def head(monkeypatch):
    fake = FakeHead()
    monkeypatch.setattr(cli_images, "head_runner", lambda *a: ("llm", fake))
    monkeypatch.setattr(cli_images.time, "time", lambda: NOW)
    return fake


def hpcc(*argv):
    return CliRunner().invoke(app, list(argv), env={"COLUMNS": "200"})


def test_the_table_lists_each_image_and_the_total_against_the_cap(head):
    done = hpcc("images", "--cluster", "llm", "--region", "us-east-1")
    assert done.exit_code == 0, done.output
    assert "nvcr.io/nvidia/pytorch:24.07-py3" in done.output and "sha256:aaaaaaaaaaaa" in done.output
    assert "21.0 GiB" in done.output and "5 min ago" in done.output and "gpu-001" in done.output
    assert "1 d ago" in done.output
    assert "2 image(s), 21.0 GiB of a 100.0 GiB cap (21%)" in done.output
    assert len(head.scripts) == 1 and "list --json" in head.scripts[0] and "ensure" not in head.scripts[0]


def test_json_is_the_contracts_listing(head):
    done = hpcc("images", "--json", "--cluster", "llm")
    assert done.exit_code == 0, done.output
    assert loads_listing(done.output) == head.listing


def test_an_explicit_list_subcommand_is_the_same(head):
    assert (
        hpcc("images", "list", "--json", "--cluster", "llm").output
        == hpcc("images", "--json", "--cluster", "llm").output
    )


@pytest.mark.parametrize(
    "image,says",
    [
        ("ubuntu;id", "IMAGE: image reference 'ubuntu;id'"),
        ("Upper/Case", "the image name"),
        ("/fsx/x.sqsh", "squashfs"),
    ],
)
def test_a_bad_image_is_refused_by_name_before_the_head_is_asked(monkeypatch, image, says):
    asked = []
    monkeypatch.setattr(cli_images, "head_runner", lambda *a: asked.append(a))
    done = hpcc("images", "pull", image, "--cluster", "llm")
    assert done.exit_code == 2 and says in " ".join(done.output.split()) and "Traceback" not in done.output
    assert asked == []


def test_a_pull_streams_the_heads_progress_and_says_where_the_image_is(head):
    done = hpcc("images", "pull", "nvcr.io#nvidia/nemo:24.05", "--cluster", "llm")
    assert done.exit_code == 0, done.output
    assert "Fetching image manifest" in done.output  # streamed from the head's stderr
    assert f"{ROOT}/sha256-{'c' * 64}.sqsh" in done.output and NEW in done.output and "5.0 GiB" in done.output
    assert "imported" in done.output
    list_first, pulled = head.scripts
    assert "ensure" not in list_first
    ensure = next(line for line in pulled.splitlines() if " ensure " in line)
    assert shlex.split(ensure)[-3:] == ["ensure", "nvcr.io#nvidia/nemo:24.05", ">/dev/null"]
    assert "hpcc_node.containers.warm" in ensure  # root's private enroot credentials, as the image service imports


def test_a_second_pull_of_a_cached_image_asks_no_registry(head):
    assert hpcc("images", "pull", "nvcr.io#nvidia/nemo:24.05", "--cluster", "llm").exit_code == 0
    done = hpcc("images", "pull", "nvcr.io/nvidia/nemo:24.05", "--cluster", "llm")  # Docker's spelling, same image
    assert done.exit_code == 0 and "already cached" in done.output, done.output
    assert sum("ensure" in s for s in head.scripts) == 1  # the second ran the listing alone


def test_refresh_asks_the_registry_again(head):
    done = hpcc("images", "pull", "ubuntu:22.04", "--refresh", "--cluster", "llm")
    assert done.exit_code == 0 and "already cached" not in done.output
    assert [("ensure" in s) for s in head.scripts] == [True]


def test_a_pull_json_names_the_path(head):
    done = hpcc("images", "pull", "ubuntu:22.04", "--json", "--cluster", "llm")
    doc = json.loads(done.output)
    assert doc["already"] and doc["digest"] == UBUNTU.digest and doc["path"] == f"{ROOT}/sha256-{'b' * 64}.sqsh"


def test_a_failure_on_the_head_is_its_own_last_line_and_exit_1(monkeypatch):
    fake = FakeHead(fail=(1, "hpcc containers: enroot import nvcr.io/x/y:1: exit 1: 401 Unauthorized"))
    monkeypatch.setattr(cli_images, "head_runner", lambda *a: ("llm", fake))
    done = hpcc("images", "pull", "nvcr.io#x/y:1", "--refresh", "--cluster", "llm")
    assert done.exit_code == 1 and "401 Unauthorized" in done.output and "Traceback" not in done.output


def test_an_old_bundle_on_the_head_is_named(monkeypatch):
    fake = FakeHead(fail=(2, "hpcc containers: unrecognized arguments: --json"))
    monkeypatch.setattr(cli_images, "head_runner", lambda *a: ("llm", fake))
    done = hpcc("images", "--cluster", "llm")
    assert done.exit_code == 1 and "predate `hpcc images`" in " ".join(done.output.split())


def test_no_cap_and_over_the_cap_are_said():
    assert "give no cap" in images.total_line(Listing(ROOT, None, [UBUNTU]))
    assert "over it" in images.total_line(Listing(ROOT, 1 << 30, [PYTORCH]))


# -- the runner, with this machine's bash standing in for the head -----------------------------------------------


def test_the_runner_streams_stderr_lines_and_returns_stdout():
    seen: list[str] = []
    run = images.stream_runner(["env"])
    got = run("echo one >&2; echo '{\"x\": 1}'; echo two >&2; exit 3\n", seen.append, 30)
    assert got.code == 3 and json.loads(got.out) == {"x": 1} and seen == ["one", "two"] == got.err


def test_the_runner_gives_up_at_its_deadline_saying_the_last_line():
    run = images.stream_runner(["env"])
    with pytest.raises(images.HeadTimeout, match="its last line: still importing"):
        run("echo still importing >&2; sleep 30\n", lambda line: None, 0.5)


def test_a_timed_out_pull_says_a_second_pull_waits_for_the_same_import():
    def slow(script, on_line, timeout_s):
        if "ensure" in script:
            raise images.HeadTimeout("gave up after 1 min waiting for the head")
        return images.HeadRun(0, dumps_listing(Listing(ROOT, None, [])), [])

    with pytest.raises(images.OpsError, match="pull` again waits for it"):
        images.pull(slow, "ubuntu:24.04", lambda line: None, 60)


def test_the_scripts_read_the_heads_settings_and_run_the_bundles_node_package():
    script = images.list_script()
    assert "sudo -n cat /etc/hpcc/settings" in script and "PYTHONPATH=/opt/hpcc/current" in script
    assert 'list --json ${cap:+--cap "${cap}G"}' in script
    with pytest.raises(c.BadReference):
        images.pull_script("x y")
    assert sys.executable  # the runner tests above run bash via env


# -- the scripts themselves, run by this machine's bash with the node package from this checkout ------------------


@pytest.fixture
def local_head(tmp_path, monkeypatch):
    """The head's side on this machine: `sudo -n` a pass-through, the settings a file, the bundle this checkout."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sudo").write_text('#!/bin/sh\n[ "$1" = -n ] && shift\nexec "$@"\n')
    (bin_dir / "sudo").chmod(0o755)
    (bin_dir / "python3").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    fsx = tmp_path / "fsx"
    settings = tmp_path / "settings"
    settings.write_text(f"NODE_COUNT=2\nMOUNT_POINT={fsx}\nIMAGE_CACHE_GIB=2\n")
    monkeypatch.setattr(images, "HEAD_SETTINGS", str(settings))
    monkeypatch.setattr(images, "NODE_PACKAGE", str(Path(__file__).resolve().parents[2]))
    root = c.cache_root(str(fsx))
    os.makedirs(root)
    (Path(root) / c.image_name(UBUNTU.digest)).write_bytes(b"h" * 64)
    (Path(root) / c.entry_name(UBUNTU.digest)).write_text(c.dumps_entry(UBUNTU))
    return images.stream_runner(["env"]), root


def test_the_list_script_runs_the_node_package_with_the_heads_mount_and_cap(local_head):
    runner, root = local_head
    found = images.listing(runner)
    assert found.root == root and found.cap_bytes == 2 << 30
    assert [(e.digest, e.references, e.size) for e in found.images] == [(UBUNTU.digest, UBUNTU.references, 64)]


def test_the_pull_script_imports_with_the_services_credentials_or_says_they_are_missing(local_head):
    runner, _ = local_head
    if os.path.isdir(c.ROOT_ENROOT_CONFIG):  # a machine with root's credentials would import for real
        pytest.skip("this machine has root's enroot credentials")
    lines: list[str] = []
    with pytest.raises(
        images.OpsError, match=f"exit 1\\): hpcc containers: root's enroot credentials: .*{c.ROOT_ENROOT_CONFIG}"
    ):
        images.pull(runner, "nvcr.io#nvidia/pytorch:24.07-py3", lines.append, 60, refresh=True)
    assert images.pull(runner, "ubuntu:22.04", lines.append, 60).already  # from the listing: warm.py never ran


def test_the_head_is_reached_by_its_public_address_else_the_operator_is_told_to_give_via(monkeypatch):
    from infra.ops import forward

    head = {"InstanceId": "i-0123456789abcdef0", "PrivateIpAddress": "10.0.0.4"}
    monkeypatch.setattr(forward, "running_head", lambda aws, cluster, region: head)
    with pytest.raises(images.OpsError, match="no public address .* give --via, .*AWS-StartSSHSession"):
        images.head_via(None, "llm", "us-east-1", "ubuntu")
    head["PublicIpAddress"] = "198.18.0.7"
    assert images.head_via(None, "llm", "us-east-1", "alice") == ["ssh", "-o", "BatchMode=yes", "alice@198.18.0.7"]


def test_via_is_split_into_words_and_reaches_the_runner(monkeypatch):
    seen = []
    monkeypatch.setattr(images, "stream_runner", lambda via: seen.append(via) or FakeHead())
    monkeypatch.setattr(cli_images.support, "target_of", lambda *a: ("llm", "us-east-1"))
    done = hpcc("images", "--cluster", "llm", "--via", "ssh -p 2222 'ubuntu@head host'")
    assert done.exit_code == 0, done.output
    assert seen == [["ssh", "-p", "2222", "ubuntu@head host"]]
