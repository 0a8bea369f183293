"""The head's Grafana as rendered (infra/render/grafana.py, infra/render/dashboards.py): Grafana itself is not run
here (Debian has no package), so its files are checked as Grafana's documentation describes them, every panel's
PromQL by the real `promtool`, and the head's metrics step against the bundle's paths. The panels' queries run
against the real Prometheus in tests/ops/test_dashboard_panels.py."""

from __future__ import annotations

import configparser
import json
import subprocess

import pytest
import yaml

from infra.facts import grafana as facts
from infra.render import grafana
from infra.render.dashboards import DASHBOARDS, panel_queries
from tests.node.metrics_support import tool
from tests.render.bootstrap_cases import contexts

FILES = grafana.grafana_files("30s")
BOARDS = {d.uid: json.loads(FILES[f"{grafana.BUNDLE_DASHBOARDS}/{d.uid}.json"]) for d in DASHBOARDS}


def test_four_dashboards_cluster_node_job_fleet_each_a_file_of_the_bundle():
    assert list(BOARDS) == ["hpcc-cluster", "hpcc-node", "hpcc-job", "hpcc-fleet"]
    assert {v["name"] for v in BOARDS["hpcc-node"]["templating"]["list"]} == {"node"}
    assert {v["name"] for v in BOARDS["hpcc-job"]["templating"]["list"]} == {"job_id"}


@pytest.mark.parametrize("uid", list(BOARDS))
def test_each_dashboard_has_unique_panel_ids_and_reads_the_provisioned_datasource(uid):
    board = BOARDS[uid]
    (source,) = yaml.safe_load(FILES[f"{grafana.BUNDLE_DIR}/datasources.yaml"])["datasources"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)) and board["uid"] == uid and board["schemaVersion"] == facts.SCHEMA_VERSION
    uses = [p["datasource"] for p in board["panels"]] + [t["datasource"] for p in board["panels"] for t in p["targets"]]
    uses += [v["datasource"] for v in board["templating"]["list"]]
    assert all(u == {"type": source["type"], "uid": source["uid"]} for u in uses), uses
    for p in board["panels"]:
        refs = [t["refId"] for t in p["targets"]]
        assert p["targets"] and len(refs) == len(set(refs)) and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24


def test_promtool_parses_every_panels_expression(tmp_path):
    rules = [{"record": f"hpcc:panel_{i}", "expr": expr} for i, (_, _, expr) in enumerate(panel_queries("n", "1"))]
    (tmp_path / "panels.yml").write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    out = subprocess.run([tool("promtool"), "check", "rules", str(tmp_path / "panels.yml")], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


def test_grafana_listens_on_localhost_only_with_no_anonymous_access_and_the_password_from_a_file():
    ini = configparser.ConfigParser(interpolation=None)
    ini.read_string(FILES[f"{grafana.BUNDLE_DIR}/grafana.ini"].decode())
    assert ini["server"]["http_addr"] == "127.0.0.1" and ini["server"]["http_port"] == str(facts.PORT)
    assert ini["auth.anonymous"]["enabled"] == "false" and ini["users"]["allow_sign_up"] == "false"
    assert ini["security"]["admin_password"] == f"$__file{{{grafana.PASSWORD_PATH}}}"
    assert ini["analytics"]["reporting_enabled"] == "false"
    env = dict(line.split("=", 1) for line in FILES[f"{grafana.BUNDLE_DIR}/grafana.env"].decode().splitlines())
    assert env == {"CONF_FILE": grafana.CONFIG_PATH, "PROVISIONING_CFG_DIR": grafana.PROVISIONING_DIR}
    assert f"EnvironmentFile={grafana.ENV_PATH}" in FILES[f"{grafana.BUNDLE_DIR}/hpcc.conf"].decode()


def test_the_datasource_is_the_heads_prometheus_and_the_provider_reads_the_dashboards_directory():
    (source,) = yaml.safe_load(FILES[f"{grafana.BUNDLE_DIR}/datasources.yaml"])["datasources"]
    assert source["url"] == f"${{{grafana.PROMETHEUS_URL_VAR}}}" and source["type"] == "prometheus"
    assert source["jsonData"]["timeInterval"] == "30s" and source["editable"] is False
    (provider,) = yaml.safe_load(FILES[f"{grafana.BUNDLE_DIR}/dashboards.yaml"])["providers"]
    assert provider["type"] == "file" and provider["options"]["path"] == grafana.DASHBOARDS_DIR
    assert provider["allowUiUpdates"] is False


def test_the_heads_metrics_step_installs_every_grafana_file_the_bundle_has_and_only_the_head_has_it():
    from infra.render.userdata import render

    scripts = {name: render(ctx) for name, ctx in contexts() if name.startswith("p5-llm-")}
    head, compute = scripts["p5-llm-head"], scripts["p5-llm-compute"]
    assert "grafana_setup" not in compute
    for name in grafana.INSTALLED:
        assert f'"$HPCC_CURRENT/{grafana.BUNDLE_DIR}/{name}"' in head
    assert f"$HPCC_CURRENT/{grafana.BUNDLE_DIR}/grafana.env" in head and grafana.PROMETHEUS_URL_VAR in head
    assert f'"{facts.PACKAGE}={facts.VERSION}"' in head and facts.KEY_FINGERPRINT in head
    assert "grafana: skipped (no systemd here)" in head
