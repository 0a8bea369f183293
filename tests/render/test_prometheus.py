"""infra/render/prometheus.py: the head's Prometheus configuration, command line and alert rules, checked by the real
promtool (Debian's prometheus package, `make deps`): `check config`, `check rules`, and `test rules` unit tests that
feed each alert its trend (it fires) and a healthy or short-lived input (it does not)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from hpcc_contract import dcgm, metrics
from infra.render import prometheus as prom
from tests.render.prometheus_cases import CASES, QUIET, Case

HEAD_IP = "10.0.0.5"
AMP = "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-0a1b2c3d-4e5f/api/v1/remote_write"


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is missing: `make deps` installs Debian's prometheus package", pytrace=False)
        pytest.skip("needs promtool (Debian's prometheus package: `make deps`)")
    return found


def run(promtool: str, *args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([promtool, *map(str, args)], capture_output=True, text=True, timeout=60)


def write_head(tmp_path: Path, **settings) -> Path:
    """The head's files as the program would lay them out, under tmp_path: the config, the rules, the targets files
    (as the controller writes them: hpcc_contract/metrics.py's file_sd format)."""
    targets = tmp_path / "targets"
    targets.mkdir()
    labels = {metrics.LABEL_NODE: "gpu-001", metrics.LABEL_GROUP: "gpu", metrics.LABEL_INSTANCE_ID: "i-0abc"}
    ports = {
        metrics.JOB_NODE: metrics.NODE_EXPORTER_PORT,
        metrics.JOB_GPU: metrics.DCGM_EXPORTER_PORT,
        metrics.JOB_PROMETHEUS: metrics.PROMETHEUS_PORT,
    }
    for job, name in metrics.TARGET_FILES.items():
        (targets / name).write_text(json.dumps([{"targets": [f"10.0.1.7:{ports[job]}"], "labels": labels}]))
    rules = tmp_path / "rules.yml"
    rules.write_text(prom.alert_rules())
    config = tmp_path / "prometheus.yml"
    config.write_text(prom.prometheus_config(rules_path=str(rules), targets_dir=str(targets), **settings))
    return config


# -- the configuration ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [{}, {"remote_write_url": AMP, "cluster": "llm"}, {"scrape_interval": "5s", "evaluation_interval": "15s"}],
    ids=["local", "remote-write", "short-interval"],
)
def test_promtool_accepts_the_rendered_configuration_its_rules_and_targets(promtool, tmp_path, config):
    out = run(promtool, "check", "config", write_head(tmp_path, **config))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {5 + len(dcgm.RECORDED)} rules found" in out.stdout, out.stdout


def test_promtool_check_config_refuses_a_broken_rules_file_so_the_check_above_means_something(promtool, tmp_path):
    config = write_head(tmp_path)
    doc = yaml.safe_load(prom.alert_rules())
    doc["groups"][0]["rules"][0]["expr"] = "rate(up[5m]"  # an expression Prometheus cannot parse
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(doc))
    out = run(promtool, "check", "config", config)
    assert out.returncode != 0 and "rules.yml" in out.stdout + out.stderr, out.stdout + out.stderr


def test_one_job_per_targets_file_the_self_scrape_among_them():
    doc = yaml.safe_load(prom.prometheus_config(targets_dir="/t"))
    jobs = {j["job_name"]: j for j in doc["scrape_configs"]}
    assert set(jobs) == set(metrics.TARGET_FILES) and metrics.JOB_PROMETHEUS in jobs
    for job, name in metrics.TARGET_FILES.items():
        assert jobs[job]["file_sd_configs"] == [{"files": [f"/t/{name}"], "refresh_interval": prom.FILE_SD_REFRESH}]
        assert "relabel_configs" not in jobs[job] and not jobs[job].get("honor_labels")
    assert doc["rule_files"] == [prom.RULES_PATH] and "remote_write" not in doc
    assert doc["global"] == {"scrape_interval": "30s", "evaluation_interval": "30s"}


def test_remote_write_signs_with_sigv4_for_the_workspaces_region_and_no_keys():
    doc = yaml.safe_load(prom.prometheus_config(remote_write_url=AMP))
    assert doc["remote_write"] == [{"url": AMP, "sigv4": {"region": "us-east-1"}}]
    custom = "https://metrics.example.com/api/v1/write"
    assert prom.remote_write(custom, "eu-west-1") == {"url": custom, "sigv4": {"region": "eu-west-1"}}


@pytest.mark.parametrize(
    "url, region, error",
    [
        (AMP, "eu-west-1", "does not sign for"),  # the workspace is in us-east-1
        ("https://metrics.example.com/api/v1/write", None, "give the region"),
        (AMP.replace("https", "http"), None, "not https"),
        (AMP, "us-east-1; rm", "does not sign for"),
    ],
)
def test_a_remote_write_whose_region_cannot_sign_for_it_is_refused(url, region, error):
    with pytest.raises(ValueError, match=error):
        prom.prometheus_config(remote_write_url=url, region=region)


@pytest.mark.parametrize("value", ["", "0s", "30", "5 m", "1m30", "-5m", "5m\nx: y"])
def test_a_duration_prometheus_would_not_read_is_refused(value):
    with pytest.raises(ValueError, match="not a Prometheus duration"):
        prom.prometheus_config(scrape_interval=value)


def test_the_cluster_label_is_a_cluster_name_or_refused():
    doc = yaml.safe_load(prom.prometheus_config(cluster="llm-2"))
    assert doc["global"]["external_labels"] == {prom.CLUSTER_LABEL: "llm-2"}
    with pytest.raises(ValueError, match="not a cluster name"):
        prom.prometheus_config(cluster='llm"}')


# -- the command line -----------------------------------------------------------------------------------------------


def test_the_command_line_listens_on_the_heads_address_only_and_has_no_lifecycle_api():
    flags = prom.prometheus_flags("15d", "80GB", "/c/prometheus.yml", "/d")
    assert flags == [
        "--config.file=/c/prometheus.yml",
        "--storage.tsdb.path=/d",
        "--storage.tsdb.retention.time=15d",
        "--storage.tsdb.retention.size=80GB",
    ]
    with pytest.raises(ValueError, match="not a Prometheus size"):
        prom.prometheus_flags("15d", "80 GB")
    assert prom.listen_flag(HEAD_IP) == f"--web.listen-address={HEAD_IP}:{metrics.PROMETHEUS_PORT}"
    assert prom.listen_flag("fd00::5") == f"--web.listen-address=[fd00::5]:{metrics.PROMETHEUS_PORT}"
    assert not any("lifecycle" in f for f in flags)


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "head", ""])
def test_prometheus_never_listens_on_every_interface_or_a_name(address):
    with pytest.raises(ValueError):
        prom.listen_flag(address)


# -- the rules ------------------------------------------------------------------------------------------------------


def test_promtool_accepts_the_rules(promtool, tmp_path):
    (tmp_path / "rules.yml").write_text(prom.alert_rules())
    out = run(promtool, "check", "rules", tmp_path / "rules.yml")
    found = f"SUCCESS: {5 + len(dcgm.RECORDED)} rules found"
    assert out.returncode == 0 and found in out.stdout, out.stdout + out.stderr


def _unit_test(case: Case) -> dict:
    """A `promtool test rules` file: the case's series, then its alert at each time it names."""

    def firing(alerts: list) -> list:
        return [{"exp_labels": labels, "exp_annotations": notes} for labels, notes in alerts]

    checks = [{"eval_time": at, "alertname": case.alert, "exp_alerts": firing(alerts)} for at, alerts in case.expect]
    return {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": case.series, "alert_rule_test": checks}],
    }


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_alert_fires_for_its_trend_and_not_for_a_healthy_node_or_a_blip(promtool, tmp_path, case):
    (tmp_path / "rules.yml").write_text(prom.alert_rules())
    (tmp_path / "test.yml").write_text(yaml.safe_dump(_unit_test(case), sort_keys=False))
    out = run(promtool, "test", "rules", tmp_path / "test.yml")
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_has_a_firing_case_and_a_quiet_one():
    fired = {c.alert for c in CASES if any(alerts for _, alerts in c.expect)}
    quiet = {c.alert for c in CASES if c.expect and all(alerts == QUIET for _, alerts in c.expect)}
    assert fired == quiet == {a.name for a in prom.alerts()}


def test_each_rule_waits_its_for_says_what_to_do_and_shows_its_evidence():
    rules = [r for r in yaml.safe_load(prom.alert_rules())["groups"][0]["rules"] if "alert" in r]
    assert [r["alert"] for r in rules] == [a.name for a in prom.alerts()] and len({r["alert"] for r in rules}) == 5
    for r in rules:
        assert prom.check_duration(r["for"], r["alert"]) and r["labels"]["severity"] in ("warning", "critical")
        assert r["labels"][metrics.ALERT_ACTION_LABEL] in metrics.ALERT_ACTIONS
        assert {"summary", "value", metrics.LABEL_NODE} <= set(r["annotations"]), r["alert"]
    drains = {r["alert"] for r in rules if r["labels"][metrics.ALERT_ACTION_LABEL] == metrics.ALERT_ACTION_DRAIN}
    assert drains == {prom.ALERT_GPU_THERMAL, prom.ALERT_GPU_POWER, prom.ALERT_EFA_ERRORS}


# -- every series a rule reads is one somebody exports --------------------------------------------------------------

GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
KEYWORDS = {"and", "or", "unless", "bool", "offset"}


def series_in(expr: str) -> set[str]:
    """The metric names in a PromQL expression: its identifiers once strings, matchers, ranges and label lists are
    gone, less functions (a name before "(") and keywords; a number's exponent (1e9) is not an identifier."""
    bare = GROUPING.sub(" ", re.sub(r"\[[^\]]*\]", " ", re.sub(r"\{[^}]*\}", " ", re.sub(r'"[^"]*"', '""', expr))))
    found = set()
    for m in re.finditer(r"(?<![\w.])[A-Za-z_:][\w:]*", bare):
        if m.group() not in KEYWORDS and not bare[m.end() :].lstrip().startswith("("):
            found.add(m.group())
    return found


def test_series_in_reads_metric_names_and_nothing_else():
    expr = 'sum by (node) (rate(a_total{job="x", c=~"b|c"}[5m]) / 1e9) > 0.5 and on (n) group_left () up == 0'
    assert series_in(expr) == {"a_total", "up"}
    assert series_in("quantile by (n) (0.5, b) - on (n) group_left () c offset 5m") == {"b", "c"}


def test_every_series_the_rules_read_is_hpccs_a_documented_exporters_or_recorded_by_them():
    records = [prom.gpu_record(q) for q in dcgm.RECORDED]
    recorded = {r["record"] for r in records}
    used = set().union(*(series_in(a.expr) for a in prom.alerts()), *(series_in(r["expr"]) for r in records))
    known = set(metrics.SERIES) | set(prom.EXTERNAL_SERIES) | recorded
    assert used and used <= known, used - known
    assert set(prom.EXTERNAL_SERIES) <= used, "an external series no rule reads: drop it from EXTERNAL_SERIES"


def test_a_node_on_either_generation_of_dcgm_names_records_the_same_quantities(promtool, tmp_path):
    """gpu-001's exporter serves 4.8.x's names (hpcc's counters file), gpu-002's DCGM 4.7's (dcgm-exporter 4.9.0's,
    in base units): every recorded quantity reads the same for both, and a GPU is never recorded twice."""
    legacy_node, renamed_node = {**GPU_TARGET_LABELS, "gpu": "0"}, {**GPU_TARGET_LABELS, "gpu": "0", "node": "gpu-002"}
    inputs, checks = [], []
    for n, q in enumerate(dcgm.RECORDED, start=3):
        base = q.in_base_units(float(n))
        inputs += [
            {"series": _series(q.legacy, legacy_node), "values": f"{n}+0x5"},
            {"series": _series(q.renamed, renamed_node), "values": f"{base}+0x5"},
        ]
        expected = [{"labels": _series(q.record, labels), "value": base} for labels in (legacy_node, renamed_node)]
        checks.append({"expr": q.record, "eval_time": "3m", "exp_samples": expected})
    (tmp_path / "rules.yml").write_text(prom.alert_rules())
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": inputs, "promql_expr_test": checks}]}  # fmt: skip
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test, sort_keys=False))
    out = run(promtool, "test", "rules", tmp_path / "test.yml")
    assert out.returncode == 0, out.stdout + out.stderr


GPU_TARGET_LABELS = {"job": metrics.JOB_GPU, "instance": "10.0.1.7:9400", "node": "gpu-001", "UUID": "GPU-0"}


def _series(name: str, labels: dict) -> str:
    return name + "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def test_the_efa_rule_reads_the_counters_the_health_agent_drains_on_and_no_remote_one():
    from hpcc_node.health.devices import LOCAL_ERROR_LIMITS, REMOTE_ERROR_COUNTERS

    assert set(prom.EFA_LOCAL_COUNTERS) == set(LOCAL_ERROR_LIMITS)
    efa = next(a for a in prom.alerts() if a.name == prom.ALERT_EFA_ERRORS)
    assert not any(c in efa.expr for c in REMOTE_ERROR_COUNTERS)
