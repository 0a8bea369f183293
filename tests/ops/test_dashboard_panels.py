"""Every panel of every dashboard (infra/render/dashboards.py) against the real Prometheus scraping exporters shaped
like the real ones (tests/ops/prometheus_support.py): each query, its variables filled with a node and a job the
exporters have, returns something; each variable's choices include them; and the exporters serve only names a real
exporter exports, so a panel that passes here reads series that exist on a cluster."""

from __future__ import annotations

import time

import pytest

from infra.ops import top as ops_top
from infra.render.dashboards import DASHBOARDS, EXPORTED, metric_names, panel_queries
from tests.node.metrics_support import parse
from tests.ops.prometheus_support import JOB_ID, TROUBLED, bodies, synthetic_prometheus

QUERIES = panel_queries(node=TROUBLED, job_id=JOB_ID)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    with synthetic_prometheus(tmp_path_factory.mktemp("prometheus")) as base:
        yield base


def eventually(base: str, expr: str, seconds: float = 60.0) -> list:
    """The query's result once it has one (rates need two scrapes, alerts an evaluation), else the last, empty."""
    deadline, found = time.monotonic() + seconds, []
    while time.monotonic() < deadline:
        found = ops_top.query(base, expr)
        if found:
            break
        time.sleep(1)
    return found


def test_every_panels_query_returns_series_from_the_real_prometheus(prometheus):
    empty = [f"{uid} / {title}: {expr}" for uid, title, expr in QUERIES if not eventually(prometheus, expr, 30)]
    assert not empty, "panels with nothing to show:\n" + "\n".join(empty)


@pytest.mark.parametrize("dashboard", [d for d in DASHBOARDS if d.variables], ids=lambda d: d.uid)
def test_each_variables_choices_come_from_a_series_that_has_them(prometheus, dashboard):
    for v in dashboard.variables:
        values = {m.get(v.label) for m, _ in eventually(prometheus, v.selector)}
        assert {"node": TROUBLED, "job_id": JOB_ID}[v.name] in values, (v, values)


def test_the_synthetic_exporters_serve_only_names_a_real_exporter_exports():
    served = {name for text in bodies().values() for name, _ in parse(text)}
    assert served <= EXPORTED, served - EXPORTED


def test_every_panel_reads_only_exported_series_each_selector_naming_its_job():
    assert QUERIES
    for uid, title, expr in QUERIES:
        names = metric_names(expr)
        assert names and names <= EXPORTED, (uid, title, names - EXPORTED)
        assert "$" not in expr.replace('"$1"', ""), (uid, title, expr)  # every variable filled in
