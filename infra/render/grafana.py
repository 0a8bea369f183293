"""Grafana on the head (issue 34): the dashboards of infra/render/dashboards.py in Grafana's JSON model, and the
files that make Grafana serve them, all rendered here and shipped in the bundle (`metrics/grafana/`,
`metrics/dashboards/`) for the head's metrics step (templates/steps/metrics.sh.j2) to install:

- `grafana.ini`, hpcc's whole configuration (the package's own /etc/grafana/grafana.ini is left as it is): bound to
  127.0.0.1 (no port opened: operators reach it through `hpcc dashboard`'s port forward), no anonymous access, no
  sign-up, no phoning home, the admin password read from a file the head generates (Grafana's `$__file{}`
  expansion, "Configure Grafana", "Variable expansion": https://grafana.com/docs/grafana/latest/setup-grafana/configure-grafana/#variable-expansion);
- `grafana.env` and a systemd drop-in that points the package's unit at them (its ExecStart reads CONF_FILE and
  PROVISIONING_CFG_DIR from its environment; a later EnvironmentFile wins);
- a provisioned Prometheus data source, the head's own Prometheus, its address filled in by Grafana from the
  environment the step writes ("Provisioning", "Data sources" and "Using environment variables":
  https://grafana.com/docs/grafana/latest/administration/provisioning/#data-sources);
- a dashboard provider reading the dashboards' directory
  (https://grafana.com/docs/grafana/latest/administration/provisioning/#dashboards).

Nothing here is secret: the password never leaves the head (docs/security.md)."""

from __future__ import annotations

import json
import posixpath

import yaml

from infra.facts import grafana as facts
from infra.render.dashboards import DASHBOARDS, Dashboard, Panel

GRAFANA_DIR = "/etc/hpcc/grafana"
CONFIG_PATH = posixpath.join(GRAFANA_DIR, "grafana.ini")
ENV_PATH = posixpath.join(GRAFANA_DIR, "grafana.env")
PASSWORD_PATH = posixpath.join(GRAFANA_DIR, "admin-password")  # root:grafana 0640, generated on the head
PROVISIONING_DIR = posixpath.join(GRAFANA_DIR, "provisioning")
DASHBOARDS_DIR = posixpath.join(GRAFANA_DIR, "dashboards")
DROP_IN = "/etc/systemd/system/grafana-server.service.d/hpcc.conf"
UNIT = "grafana-server"  # the package's unit and binary
ADMIN_USER = "admin"
DATASOURCE_UID = "hpcc-prometheus"
PROMETHEUS_URL_VAR = "HPCC_PROMETHEUS_URL"  # the head's Prometheus, http://<head address>:9090: only the head knows it
HOME = DASHBOARDS[0].uid
# In the bundle, beside the Prometheus files: path -> where the step installs it (the dashboards go whole)
BUNDLE_DIR, BUNDLE_DASHBOARDS = "metrics/grafana", "metrics/dashboards"
INSTALLED = {
    "grafana.ini": CONFIG_PATH,
    "hpcc.conf": DROP_IN,
    "datasources.yaml": posixpath.join(PROVISIONING_DIR, "datasources", "hpcc.yaml"),
    "dashboards.yaml": posixpath.join(PROVISIONING_DIR, "dashboards", "hpcc.yaml"),
}
PROVISIONING_KINDS = ("datasources", "dashboards", "plugins", "alerting")  # Grafana reads each; empty ones are fine
WIDTH = 24  # Grafana's grid
HEIGHT = 8


def grafana_ini() -> str:
    """hpcc's grafana.ini (sections and keys: the "Configure Grafana" page)."""
    sections = {
        "server": {"http_addr": "127.0.0.1", "http_port": str(facts.PORT)},
        "security": {
            "admin_user": ADMIN_USER,
            "admin_password": f"$__file{{{PASSWORD_PATH}}}",
            "disable_gravatar": "true",
        },
        "auth.anonymous": {"enabled": "false"},
        "users": {"allow_sign_up": "false"},
        "analytics": {"reporting_enabled": "false", "check_for_updates": "false", "check_for_plugin_updates": "false"},
        "news": {"news_feed_enabled": "false"},
        "snapshots": {"external_enabled": "false"},
        "dashboards": {"default_home_dashboard_path": posixpath.join(DASHBOARDS_DIR, f"{HOME}.json")},
    }
    lines = ["; hpcc's Grafana configuration (infra/render/grafana.py); the package's defaults for everything else"]
    for name, keys in sections.items():
        lines += ["", f"[{name}]", *(f"{k} = {v}" for k, v in keys.items())]
    return "\n".join(lines) + "\n"


def grafana_env() -> str:
    """The unit's environment but the Prometheus address (the step adds PROMETHEUS_URL_VAR with the head's)."""
    return f"CONF_FILE={CONFIG_PATH}\nPROVISIONING_CFG_DIR={PROVISIONING_DIR}\n"


def drop_in() -> str:
    head = "# hpcc (infra/render/grafana.py): its configuration, provisioning and Prometheus"
    return f"{head}\n[Service]\nEnvironmentFile={ENV_PATH}\n"


def datasources(scrape_interval: str) -> str:
    """The head's Prometheus as the one, default, read-only data source; `timeInterval` is its scrape interval, so
    Grafana's $__rate_interval spans four scrapes."""
    source = {
        "name": "Prometheus (head)",
        "type": "prometheus",
        "uid": DATASOURCE_UID,
        "access": "proxy",
        "url": f"${{{PROMETHEUS_URL_VAR}}}",
        "isDefault": True,
        "editable": False,
        "jsonData": {"timeInterval": scrape_interval, "httpMethod": "POST"},
    }
    return yaml.safe_dump({"apiVersion": 1, "datasources": [source]}, sort_keys=False, width=1000)


def dashboard_provider() -> str:
    provider = {
        "name": "hpcc",
        "orgId": 1,
        "folder": "hpcc",
        "type": "file",
        "disableDeletion": True,
        "allowUiUpdates": False,
        "updateIntervalSeconds": 60,
        "options": {"path": DASHBOARDS_DIR},
    }
    return yaml.safe_dump({"apiVersion": 1, "providers": [provider]}, sort_keys=False, width=1000)


def _datasource() -> dict:
    return {"type": "prometheus", "uid": DATASOURCE_UID}


def panel_json(p: Panel, pid: int, x: int, y: int) -> dict:
    table = p.kind == "table"
    targets = [
        {
            "refId": chr(ord("A") + i),
            "datasource": _datasource(),
            "expr": q.expr,
            "legendFormat": q.legend or "__auto",
            "instant": table,
            "range": not table,
            "format": "table" if table else "time_series",
        }
        for i, q in enumerate(p.queries)
    ]
    options: dict = {"showHeader": True} if table else {
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }  # fmt: skip
    return {
        "id": pid,
        "type": p.kind,
        "title": p.title,
        "datasource": _datasource(),
        "gridPos": {"x": x, "y": y, "w": p.width, "h": HEIGHT},
        "targets": targets,
        "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
        "options": options,
    }


def _variable(name: str, selector: str, label: str) -> dict:
    query = f"label_values({selector}, {label})"
    return {
        "name": name,
        "label": name,
        "type": "query",
        "datasource": _datasource(),
        "definition": query,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2,  # on time range change: a new node or job appears
        "sort": 3,  # numerically: job ids
        "includeAll": False,
        "multi": False,
        "current": {},
        "options": [],
        "hide": 0,
    }


def dashboard_json(d: Dashboard) -> dict:
    """Grafana's dashboard JSON model (https://grafana.com/docs/grafana/latest/dashboards/build-dashboards/view-dashboard-json-model/):
    the panels laid out left to right, a row at a time."""
    panels, x, y = [], 0, 0
    for pid, p in enumerate(d.panels, start=1):
        if x + p.width > WIDTH:
            x, y = 0, y + HEIGHT
        panels.append(panel_json(p, pid, x, y))
        x += p.width
    return {
        "uid": d.uid,
        "title": d.title,
        "tags": ["hpcc"],
        "schemaVersion": facts.SCHEMA_VERSION,
        "version": 1,
        "editable": False,
        "graphTooltip": 1,  # a shared crosshair: one moment across the panels
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "timezone": "browser",
        "links": [{"type": "dashboards", "tags": ["hpcc"], "title": "hpcc", "keepTime": True, "includeVars": False}],
        "templating": {"list": [_variable(v.name, v.selector, v.label) for v in d.variables]},
        "annotations": {"list": []},
        "panels": panels,
    }


def grafana_files(scrape_interval: str) -> dict[str, bytes]:
    """The bundle's Grafana files, by path inside the bundle."""
    files = {
        f"{BUNDLE_DIR}/grafana.ini": grafana_ini(),
        f"{BUNDLE_DIR}/grafana.env": grafana_env(),
        f"{BUNDLE_DIR}/hpcc.conf": drop_in(),
        f"{BUNDLE_DIR}/datasources.yaml": datasources(scrape_interval),
        f"{BUNDLE_DIR}/dashboards.yaml": dashboard_provider(),
    }
    for d in DASHBOARDS:
        files[f"{BUNDLE_DASHBOARDS}/{d.uid}.json"] = json.dumps(dashboard_json(d), indent=2, sort_keys=True) + "\n"
    return {path: text.encode() for path, text in files.items()}
