"""The head's Prometheus sizing (infra/facts/prometheus_sizing.py) and the plan's warning for a head too small for
the cluster's metrics (infra/config/validators/type_rules.py head_holds_the_metrics)."""

from __future__ import annotations

import pytest

from hpcc_contract import dcgm
from infra.config.parse import parse
from infra.config.validators.check import check_config
from infra.facts import prometheus_sizing as sizing
from infra.facts.efa import efa_device_count, interface_layout
from infra.facts.instance_types import HEAD_FIELD
from tests.config.test_rules import cluster
from tests.facts.instance_data import offline_facts

# scripts/bench_series.py's counts with the real node_exporter and hpcc's writers (README, Benchmark)
MEASURED = {"p5.48xlarge": 903, "p4d.24xlarge": 679, "c6i.32xlarge": 274}


@pytest.mark.parametrize("name, counted", sorted(MEASURED.items()))
def test_the_series_estimate_is_within_ten_percent_of_the_counted_gpu_nodes_and_above_the_cpu_one(name, counted):
    itype = offline_facts().get(name)
    estimate = sizing.node_series(itype.gpus, efa_device_count(interface_layout(itype, True)))
    if itype.gpus:
        assert abs(estimate - counted) <= counted // 10, (name, estimate, counted)
    else:
        assert estimate >= counted, (name, estimate, counted)


def warnings(**overrides) -> list[tuple[str, str]]:
    cfg = parse("us-east-1", cluster(scheduler="slurm", **overrides))
    return [(f.field, f.message) for f in check_config(cfg, offline_facts()) if not f.is_error]


def test_a_head_too_small_for_the_clusters_series_is_warned_with_the_memory_to_give():
    big = {"compute__instanceType": "p5.48xlarge", "compute__count": 4096}
    found = [m for f, m in warnings(headNode__instanceType="m6i.large", **big) if f == HEAD_FIELD and "Prometheus" in m]
    assert found and "4,096 nodes' metrics" in found[0] and "m6i.large's 8 GiB" in found[0], found
    assert "give a head type with at least" in found[0] and "observability.enabled: false" in found[0]
    assert not [m for f, m in warnings(headNode__instanceType="r6i.16xlarge", **big) if "Prometheus" in m]
    assert not [m for f, m in warnings(observability__enabled=False, **big) if "Prometheus" in m]
    small = {"compute__instanceType": "p5.48xlarge", "compute__count": 64, "headNode__instanceType": "m6i.large"}
    assert not [m for f, m in warnings(**small) if "Prometheus" in m]


def test_the_memory_model_grows_with_the_series():
    assert sizing.prometheus_bytes(2_000_000) - sizing.prometheus_bytes(1_000_000) == (
        1_000_000 * sizing.PROMETHEUS_BYTES_PER_SERIES
    )


def test_the_head_holds_a_gpu_nodes_recorded_quantities_beside_what_it_scrapes():
    assert sizing.head_series(8, 32) - sizing.node_series(8, 32) == 8 * len(dcgm.RECORDED) == 64
    assert sizing.head_series(0, 0) == sizing.node_series(0, 0)
