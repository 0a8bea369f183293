"""Fixtures of the box (tests/box/README.md). Every box is taken down after its tests, even when they fail or the run
is interrupted; a box that crashed harder is cleaned up when the next one starts.

One booted fleet box (tests/box/shared.py) serves every module in SHARED_BOX_MODULES, in that order: it is booted
once, by the first test that asks for it (so each module also passes alone), and each test gets it through the
`fleet` fixture, which waits for the baseline before the test and, after it, undoes what the test changed and
waits for the baseline again. Only one box runs on a machine, so the shared one is stopped before any module with
a box of its own (another shape: no Slurm, hooks, an EFA head); those run after the shared ones."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.box.cloud import FleetBox
from tests.box.node import can_run
from tests.box.shared import boot, differences, shared_fleet, wait_baseline
from tests.box.timing import record

SHARED_BOX_MODULES = (
    "test_box_cluster.py",
    "test_box_slurm.py",
    "test_box_rotation.py",
    "test_box_cloud.py",
    "test_box_upgrade.py",
    "test_box_day2.py",
    "test_box_fleet.py",
    "test_box_recovery.py",
    "test_box_health.py",
    "test_box_metrics.py",
    "test_box_containers.py",
)
_shared: dict[str, FleetBox] = {}


def pytest_collection_modifyitems(items):
    """Box tests that use the shared box first, module by module in SHARED_BOX_MODULES order; everything else
    (other box tests, and every test outside tests/box) keeps its place."""

    def rank(item) -> int:
        name = item.path.name
        return SHARED_BOX_MODULES.index(name) if name in SHARED_BOX_MODULES else len(SHARED_BOX_MODULES)

    slots = [i for i, item in enumerate(items) if "tests/box/" in item.path.as_posix()]
    for i in slots:  # `pytest -n N --dist loadgroup`: every box test on one worker, in this order
        items[i].add_marker(pytest.mark.xdist_group("box"))
    ordered = sorted((items[i] for i in slots), key=rank)  # sorted() is stable: file order within a rank
    for i, item in zip(slots, ordered, strict=True):
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
    box = _shared.pop("fleet", None)
    if box is not None:
        left = differences(box) if box.lock.fd is not None and box.undos == [] else []
        box.stop()
        if left:
            print("[box] the shared box was left off its baseline by its last test: " + "; ".join(left))


@pytest.fixture(scope="module", autouse=True)
def one_box_at_a_time(request):
    """A box module that does not use the shared box gets the machine to itself (module scope: before the
    module's own box fixtures start theirs)."""
    if request.path.name not in SHARED_BOX_MODULES:
        stop_shared_box()


@pytest.fixture(scope="session")
def shared_box(box_machine) -> FleetBox:
    """The shared fleet box, booted by the first test that needs it (tests/box/shared.py)."""
    if "fleet" not in _shared:
        box = shared_fleet()
        _shared["fleet"] = box  # registered before start: a failed start or boot is still stopped
        try:
            boot(box)
        except BaseException:
            stop_shared_box()
            raise
        print("\n" + box.phases.report("shared fleet box"))
    return _shared["fleet"]


@pytest.fixture
def fleet(shared_box, request) -> FleetBox:
    """The shared box at its baseline; after the test, what it changed is undone and the baseline awaited again,
    so a test that leaves the box dirty fails there, naming what differs."""
    name = request.node.name
    waited, differed = wait_baseline(shared_box, f"before {name}")
    if differed:
        print(f"\n[box] {waited:.0f} s until the baseline before {name}; it differed in: {'; '.join(differed)}")
    yield shared_box
    started = time.time()
    undone = shared_box.restore()
    _, differed = wait_baseline(shared_box, f"after {name}" + (f" (undone: {', '.join(undone)})" if undone else ""))
    if undone or differed:
        took = time.time() - started
        record("restore", name, took)
        print(
            f"\n[box] back at the baseline {took:.0f} s after {name}; undone: {', '.join(undone) or 'nothing'}; "
            f"it differed in: {'; '.join(differed) or 'nothing'}"
        )
