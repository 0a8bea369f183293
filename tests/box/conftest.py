"""Fixtures of the box (tests/box/README.md). Every box is taken down after its tests, even when they fail
or the run is interrupted; a box that crashed harder is cleaned up when the next one starts.

One booted cpu box with Slurm (`cluster`) serves every module in SHARED_BOX_MODULES, in that order: booting costs
about a minute; day 2 comes last: it adds and replaces nodes, checks them in Slurm and adds a failing one.
Sharing is only a speed-up: each module sets up what it needs (test_box_slurm.py makes day 2's changes itself
when run alone). Only one box runs on a machine, so the shared one
is stopped before any other box test (the faults boot their own)."""

from __future__ import annotations

import os
import signal

import pytest

from tests.box.cloud import FleetBox
from tests.box.harness import Box
from tests.box.node import can_run
from tests.box.settle import settle

SHARED_BOX_MODULES = ("test_box_cluster.py", "test_box_slurm.py", "test_box_day2.py")
_shared: dict[str, Box] = {}


def pytest_collection_modifyitems(items):
    """Box tests that use the shared box first, module by module in SHARED_BOX_MODULES order; everything else
    (other box tests, and every test outside tests/box) keeps its place."""

    def rank(item) -> int:
        name = item.path.name
        return SHARED_BOX_MODULES.index(name) if name in SHARED_BOX_MODULES else len(SHARED_BOX_MODULES)

    slots = [i for i, item in enumerate(items) if "tests/box/" in item.path.as_posix()]
    for i in slots:  # `pytest -n N --dist loadgroup` (make test): every box test on one worker, in this order
        items[i].add_marker(pytest.mark.xdist_group("box"))
    ordered = sorted((items[i] for i in slots), key=rank)  # sorted() is stable: file order within a rank
    for i, item in zip(slots, ordered):
        items[i] = item


@pytest.fixture(scope="session", autouse=True)
def box_machine():
    """The box needs root and ip netns. Elsewhere it is skipped with the reason; with CI=true that is a failure."""
    reason = can_run()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the box cannot run in CI: {reason}", pytrace=False)
        pytest.skip(f"box skipped: {reason}")
    # `timeout`, CI cancellation: turn SIGTERM into an interrupt so fixtures tear their box down.
    previous = signal.getsignal(signal.SIGTERM)

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
    yield
    stop_shared_box()
    signal.signal(signal.SIGTERM, previous)


def stop_shared_box() -> None:
    box = _shared.pop("cluster", None)
    if box is not None:
        box.stop()


@pytest.fixture(scope="module", autouse=True)
def one_box_at_a_time(request):
    """A box module that does not use the shared box gets the machine to itself (module scope: before the
    module's own box fixtures start theirs)."""
    if request.path.name not in SHARED_BOX_MODULES:
        stop_shared_box()


@pytest.fixture(scope="session")
def cluster(box_machine):
    """The cpu profile with `scheduler: slurm`: a head node whose controller launches one group `compute` of two
    c6i.16xlarge nodes (tests/box/cloud.py), booted once for every module in SHARED_BOX_MODULES (they run first,
    in that order)."""
    box: Box = FleetBox(profile="cpu", scheduler="slurm", groups=[{"name": "compute", "count": 2}])
    _shared["cluster"] = box  # registered before start: a failed start or boot is still stopped
    box.start()
    codes = box.boot(timeout=360)
    if codes != {n.name: 0 for n in box.nodes}:
        diagnosis = box.diagnose()
        stop_shared_box()
        pytest.fail(f"the shared box did not boot: {codes}\n{diagnosis}", pytrace=False)
    took = settle(box)  # the agents' first ticks done: the tests see the cluster a user gets
    print(f"[box] the shared box settled {took:.0f} s after its bootstraps ended")
    return box
