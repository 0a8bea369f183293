"""The image cache's directory striped over every OST when a node makes it (hpcc_node/containers/lustre.py): each
image is a large file every node reads at once."""

from __future__ import annotations

import os
import subprocess

from hpcc_node.containers import lustre
from tests.node.test_container_cache import D1, REF, Importer, make


class Run:
    def __init__(self, code: int = 0, stderr: str = "") -> None:
        self.calls: list = []
        self.code, self.stderr = code, stderr

    def __call__(self, argv, **kw) -> subprocess.CompletedProcess:
        self.calls.append(argv)
        return subprocess.CompletedProcess(argv, self.code, "", self.stderr)


def test_the_directory_is_striped_over_every_ost():
    run, said = Run(), []
    assert lustre.stripe_wide("/fsx/.hpcc/images", said.append, run=run, which=lambda tool: "/usr/bin/lfs")
    assert run.calls == [["lfs", "setstripe", "-c", "-1", "/fsx/.hpcc/images"]]
    assert "striped over every OST" in said[0]


def test_without_lfs_or_when_it_fails_the_cache_goes_on_and_says_why():
    said: list = []
    assert not lustre.stripe_wide("/fsx/.hpcc/images", said.append, run=Run(), which=lambda tool: None)
    assert "no lfs here" in said[0]
    failing = Run(code=1, stderr="lfs setstripe: setstripe error for '/fsx/.hpcc/images': Operation not supported")
    assert not lustre.stripe_wide("/fsx/.hpcc/images", said.append, run=failing, which=lambda tool: "/usr/bin/lfs")
    assert "exit 1" in said[1] and "Operation not supported" in said[1]


def test_the_node_that_makes_the_cache_directory_lays_it_out_once(tmp_path):
    made: list = []
    root = tmp_path / "images"
    lay_out = lambda d: made.append((d, os.listdir(d)))  # noqa: E731
    make(root, Importer(), layout=lay_out).ensure(REF)
    assert made == [(str(root), [])]  # before any file is made in it: existing files keep their layout
    assert (root / f"sha256-{D1.split(':')[1]}.sqsh").exists()
    make(root, Importer(), layout=lay_out).ensure(REF)  # the directory exists: its layout is left alone
    assert len(made) == 1
