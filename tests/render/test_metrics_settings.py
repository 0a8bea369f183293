"""What the nodes receive of `observability:` (issue 34): METRICS=on with metrics on and no METRICS key at all
otherwise (a node from before the keys refuses a text that has one), the durations in one canonical spelling and
left out at their defaults, the workspace as its remote write endpoint."""

import pytest

from hpcc_contract.settings import METRICS_KEYS, OPTIONAL, OPTIONAL_DEFAULTS, PATTERNS
from infra.config.parse import parse
from infra.config.stackfile import read_raw
from infra.render.node_settings import parse as parse_settings
from infra.render.node_settings import settings_value
from tests.facts.instance_data import MOTO_ACCOUNT, offline_facts
from tests.ops.support import EXAMPLES

ARN = "arn:aws:aps:us-east-1:123456789012:workspace/ws-b226cc2a-a446-46a9-933a-ac50479a5568"
URL = "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-b226cc2a-a446-46a9-933a-ac50479a5568/api/v1/remote_write"


def text(example: str = "p5-llm", **changes) -> str:
    cluster = {**read_raw(EXAMPLES / f"{example}.yaml")["hpcc:cluster"], **changes}
    cfg = parse("us-east-1", cluster)
    return settings_value(cfg.cluster, cfg.region, offline_facts(), MOTO_ACCOUNT)


def metrics_lines(settings: str) -> list[str]:
    return [line for line in settings.splitlines() if line.startswith("METRICS")]


@pytest.mark.parametrize(
    "example,changes,lines",
    [
        ("p5-llm", {}, ["METRICS=on"]),  # Slurm: on, at the defaults
        ("c6i-oneccl", {}, []),  # no Slurm: off, and no key at all
        ("p5-llm", {"observability": {"enabled": False}}, []),
        ("c6i-oneccl", {"observability": {"enabled": True}}, ["METRICS=on"]),
        (
            "p5-llm",
            {"observability": {"scrapeInterval": "60s", "retention": "360h"}},
            ["METRICS=on", "METRICS_SCRAPE_INTERVAL=1m"],
        ),
        (
            "p5-llm",
            {"observability": {"scrapeInterval": "15s", "retention": "3h30m", "remoteWrite": {"workspaceArn": ARN}}},
            ["METRICS=on", "METRICS_SCRAPE_INTERVAL=15s", "METRICS_RETENTION=210m", f"METRICS_REMOTE_WRITE_URL={URL}"],
        ),
        ("p5-llm", {"observability": {"retention": "6w"}}, ["METRICS=on", "METRICS_RETENTION=6w"]),
        ("p5-llm", {"observability": {"enabled": False, "remoteWrite": {"workspaceArn": ARN}}}, []),
    ],
)
def test_the_settings_carry_metrics_only_when_on_and_only_what_differs_from_the_defaults(example, changes, lines):
    assert metrics_lines(text(example, **changes)) == lines


def test_the_nodes_read_back_what_they_were_sent_and_the_defaults_for_what_was_left_out():
    tuned = parse_settings(text(observability={"scrapeInterval": "15s", "remoteWrite": {"workspaceArn": ARN}}))
    assert (tuned.metrics, tuned.metrics_scrape_interval, tuned.metrics_remote_write_url) == ("on", "15s", URL)
    assert tuned.metrics_retention is None and OPTIONAL_DEFAULTS["METRICS_RETENTION"] == "15d"
    assert OPTIONAL_DEFAULTS["METRICS"] == "off" and OPTIONAL_DEFAULTS["METRICS_REMOTE_WRITE_URL"] == ""


def test_every_metrics_key_is_optional_and_exported_to_what_the_bootstrap_starts():
    """A node from before the keys reads a text without them; the bootstrap exports them (settings.sh.j2) for the
    exporters and the head's Prometheus."""
    assert set(METRICS_KEYS) == {k for k in PATTERNS if k.startswith("METRICS")} and set(METRICS_KEYS) <= OPTIONAL
