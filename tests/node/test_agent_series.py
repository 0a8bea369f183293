"""The node agent's series (hpcc_node/agent_status.py report_series): the bundle it runs and the membership
generation it applied, in node_exporter's textfile directory, written when either changes."""

from __future__ import annotations

import os
from pathlib import Path

from hpcc_contract import metrics
from hpcc_node import agent, agent_status
from tests.node.agent_support import FakeAws, make_agent
from tests.node.metrics_support import parse, promtool_check, value
from tests.node.test_agent_tick import FOUR, cluster


def read(a) -> dict:
    return parse((Path(a.c.metrics) / metrics.TEXTFILE_AGENT).read_text())


def test_the_agent_writes_its_bundle_and_generation_when_they_change(tmp_path, monkeypatch):
    aws = FakeAws()
    cluster(aws)
    a, sha = make_agent(tmp_path, aws)
    writes: list[str] = []
    real = agent_status.write_textfile
    monkeypatch.setattr(agent_status, "write_textfile", lambda d, f, t: (writes.append(t), real(d, f, t))[1])
    a.tick()
    got = read(a)
    assert value(got, "hpcc_membership_generation") == a.node.hosts_version == 1
    assert value(got, "hpcc_bundle_generation") == int(sha[:13], 16)  # the bundle's sha256, exact in a float64
    a.tick()
    assert len(writes) == 1  # nothing changed: not written again
    aws.members(FOUR + "\n10.0.0.8")
    a.tick()
    assert value(read(a), "hpcc_membership_generation") == a.node.hosts_version == 2 and len(writes) == 2
    out = promtool_check(writes[-1])
    assert (out.returncode, out.stdout + out.stderr) == (0, ""), out.stdout + out.stderr


def test_two_bundles_are_two_numbers_and_no_bundle_is_zero():
    one, two = "ab" * 32, "ab" * 6 + "c" + "ab" * 25 + "d"
    numbers = {agent_status.bundle_number(s) for s in (one, two)}
    assert len(numbers) == 2 and all(0 < n < 2**53 for n in numbers)
    assert agent_status.bundle_number("") == 0


def test_a_failed_write_is_logged_and_tried_again_next_tick(tmp_path):
    aws = FakeAws()
    cluster(aws)
    a, _ = make_agent(tmp_path, aws)
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    good = a.c.metrics
    a.c = a.c._replace(metrics=str(blocked))
    a.tick()
    assert f"agent series not written to {blocked}" in (tmp_path / "compute-001" / "log").read_text()
    a.c = a.c._replace(metrics=good)
    a.tick()  # the same generation: written now all the same
    assert value(read(a), "hpcc_membership_generation") == 1


def test_the_directory_is_node_exporters_unless_the_environment_names_another():
    env = {
        "HPCC_ROLE": "compute",
        "HPCC_STATE_BUCKET": "b",
        "HPCC_STATUS_KEY": "status/x.json",
        "HPCC_SETTINGS_PARAMETER": "/hpcc/c/settings",
        "HPCC_BUNDLE_PARAMETER": "/hpcc/c/bundle",
    }
    expected = metrics.TEXTFILE_DIR if os.path.isdir(metrics.TEXTFILE_DIR) else ""  # made by the metrics step
    assert agent.Config.from_env(env).metrics == expected
    assert agent.Config.from_env({**env, "HPCC_METRICS_DIR": "/tmp/m"}).metrics == "/tmp/m"
