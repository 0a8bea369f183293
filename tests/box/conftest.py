import os

import pytest

from tests.box.harness import Box, can_run


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/box/" in str(item.fspath):
            item.add_marker(pytest.mark.box)


@pytest.fixture(scope="session", autouse=True)
def box_machine():
    """The box needs root and ip netns. Elsewhere it is skipped with the reason; in CI that is a failure."""
    reason = can_run()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the box cannot run in CI: {reason}")
        pytest.skip(f"box skipped: {reason}")


@pytest.fixture(scope="module")
def cluster():
    """A head node and two compute nodes, booted once for the module."""
    box = Box()
    try:
        box.start()
        codes = box.boot()
        assert codes == {n.name: 0 for n in box.nodes}, {n.name: box.log(n)[-3000:] for n in box.nodes}
        yield box
    finally:
        box.stop()
