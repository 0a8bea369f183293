"""The shared image cache's cap reaches the head through the settings parameter (IMAGE_CACHE_GIB), so a changed
containers.cacheMaxGiB needs no new bundle: given with containers on, left out with them off (nodes from before the
key accept that text), read back by the nodes' own rules."""

from __future__ import annotations

from hpcc_contract.settings import parse_text
from infra.render.node_settings import parse, settings_value
from tests.facts.instance_data import MOTO_ACCOUNT, offline_facts
from tests.render.bootstrap_cases import configs


def _value(cluster, region):
    return settings_value(cluster, region, offline_facts(), MOTO_ACCOUNT)


def test_the_cap_is_in_the_settings_with_containers_on_and_changes_alone():
    cfg = dict(configs())["p5-llm"]
    assert cfg.cluster.containers_on
    text = _value(cfg.cluster, cfg.region)
    assert f"IMAGE_CACHE_GIB={cfg.cluster.image_cache_gib}\n" in text
    assert parse_text(text)["IMAGE_CACHE_GIB"] == [str(cfg.cluster.image_cache_gib)]
    assert parse(text).image_cache_gib == cfg.cluster.image_cache_gib
    smaller = cfg.cluster.model_copy(
        update={"containers": cfg.cluster.containers.model_copy(update={"cache_max_gib": 50})}
    )
    changed = _value(smaller, cfg.region)
    assert set(changed.splitlines()) ^ set(text.splitlines()) == {
        "IMAGE_CACHE_GIB=50",
        f"IMAGE_CACHE_GIB={cfg.cluster.image_cache_gib}",
    }


def test_no_cap_without_containers():
    cfg = dict(configs())["c6i-oneccl"]
    assert not cfg.cluster.containers_on
    assert "IMAGE_CACHE_GIB" not in _value(cfg.cluster, cfg.region)
