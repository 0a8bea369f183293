"""Fixtures of the box (tests/box/README.md). Every box is taken down after its tests, even when they fail
or the run is interrupted; a box that crashed harder is cleaned up when the next one starts."""

import os
import signal

import pytest

from tests.box.harness import Box, can_run


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
    signal.signal(signal.SIGTERM, previous)


@pytest.fixture(scope="module")
def cluster():
    """The cpu profile: a head node and two c6i.16xlarge compute nodes, booted once and shared by a module."""
    box = Box(profile="cpu", compute_count=2).start()
    try:
        codes = box.boot(timeout=240)
        assert codes == {n.name: 0 for n in box.nodes}, f"{codes}\n{box.diagnose()}"
        yield box
    finally:
        box.stop()
