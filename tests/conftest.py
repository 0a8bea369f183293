import copy
from pathlib import Path

# hypothesis is imported before any plan: CPython 3.11.7's ast module can be left in a bad state by the plans' worker
# threads, and hypothesis's pytest plugin would otherwise import (and parse) it at the end.
import hypothesis  # noqa: F401 - imported for that side effect alone
import pytest

from infra.config.stackfile import read_raw

ROOT = Path(__file__).resolve().parent.parent
# Fixtures shared across folders: `fake` (a scripted `aws` on PATH) for the render and node tests.
pytest_plugins = ["tests.render.bootstrap_fixtures"]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


@pytest.fixture(scope="module", params=EXAMPLES, ids=lambda p: p.stem)
def planned(request):
    """Each example planned once per module, with its resources kept alive in the embedded AWS."""
    from infra.plan.embedded_aws import embedded_aws
    from infra.plan.runner import plan_stack_file

    config = read_raw(request.param)
    with embedded_aws(config["aws:region"]) as env:
        yield plan_stack_file(request.param, aws=env), env


@pytest.fixture
def example_config():
    """A fresh, mutable copy of an example's config map."""
    return lambda name: copy.deepcopy(read_raw(ROOT / "examples" / f"{name}.yaml"))


# -- wall time per module, for .ci/run's closing table (tests/box/timing.py, scripts/ci_timings.py) -------------
_MODULE_SECONDS: dict[str, float] = {}
_BOX_TEST_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    """Every phase's seconds added to its module's (in the process that sees every report: xdist's controller).
    A box test's own seconds are recorded as soon as it ends: a run stopped at CI's limit still says where the
    time went."""
    module = report.nodeid.split("::", 1)[0]
    _MODULE_SECONDS[module] = _MODULE_SECONDS.get(module, 0.0) + report.duration
    if module.startswith("tests/box/"):
        _BOX_TEST_SECONDS[report.nodeid] = _BOX_TEST_SECONDS.get(report.nodeid, 0.0) + report.duration
        if report.when == "teardown":
            from tests.box.timing import record

            record("test", report.nodeid, _BOX_TEST_SECONDS.pop(report.nodeid))


def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput"):  # an xdist worker: its reports reach the controller too
        return
    from tests.box.timing import record

    for module, seconds in sorted(_MODULE_SECONDS.items()):
        record("module", module, seconds)
