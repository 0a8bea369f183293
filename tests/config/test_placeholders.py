"""Placeholders left in a stack file (issue 32): a warning in `hpcc plan`, an error in `hpcc preflight` and `hpcc up`,
each naming the field and the fix; and a mistyped key answered with the closest known one."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from infra.config.parse import ConfigError, parse
from infra.config.stackfile import load, read_raw
from infra.config.validators.findings import ERROR, WARNING
from infra.config.validators.placeholders import placeholder_errors, placeholders
from infra.ops.cli import app

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
# What the shipped examples leave for the user to fill in, and nothing else.
EXPECTED = {
    "p5-llm": ["cluster.fsx.dataRepositoryPath", "cluster.ssh.allowedCidrs[0]", "cluster.ssh.authorizedKeys[0]"]
}
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGqXj3Pz0jM8kP1c7bJcXlO3w8Vt6r3m2YQK0cRkq9Zs"
BASE = {
    "name": "demo",
    "headNode": {"instanceType": "c6i.xlarge"},
    "nodeGroups": [{"name": "cpu", "instanceType": "c6i.16xlarge", "count": 2}],
}


def cfg(**changes):
    return parse("us-east-1", {**copy.deepcopy(BASE), **changes})


@pytest.mark.parametrize("example", [p.stem for p in EXAMPLES])
def test_the_examples_placeholders_are_found_and_nothing_else(example):
    found = placeholders(load(ROOT / "examples" / f"{example}.yaml"))
    assert [f.field for f in found] == EXPECTED.get(example, [])
    assert all(f.severity == WARNING for f in found)


@pytest.mark.parametrize(
    "ssh, fsx, field, words",
    [
        ({"allowedCidrs": ["10.1.0.0/24", "198.51.100.7/32"]}, {}, "cluster.ssh.allowedCidrs[1]", "RFC 5737"),
        ({"allowedCidrs": ["192.0.2.0/25"]}, {}, "cluster.ssh.allowedCidrs[0]", "nobody can connect"),
        ({"authorizedKeys": [KEY + " you@laptop"]}, {}, "cluster.ssh.authorizedKeys[0]", "cat ~/.ssh/id_ed25519.pub"),
        (
            {"authorizedKeys": [KEY + " ana@work", KEY + " jane@example.com"]},
            {},
            "cluster.ssh.authorizedKeys[1]",
            "your own public key",
        ),
        ({}, {"dataRepositoryPath": "s3://your-bucket/data"}, "cluster.fsx.dataRepositoryPath", "s3://YOUR-BUCKET"),
        ({}, {"dataRepositoryPath": "s3://example-datasets/x"}, "cluster.fsx.dataRepositoryPath", "example bucket"),
    ],
)
def test_each_kind_of_placeholder_names_its_field_and_the_fix(ssh, fsx, field, words):
    [found] = placeholders(cfg(ssh=ssh, fsx=fsx))
    assert found.field == field and words in found.message
    [error] = placeholder_errors(cfg(ssh=ssh, fsx=fsx))
    assert error.severity == ERROR and error.field == field and "`hpcc up` refuses placeholders" in error.message


def test_real_values_are_not_placeholders():
    assert (
        placeholders(
            cfg(
                ssh={"allowedCidrs": ["10.1.0.0/24", "203.0.114.0/24"], "authorizedKeys": [KEY + " ana@work", KEY]},
                fsx={"dataRepositoryPath": "s3://acme-ml-data/tokenized"},
            )
        )
        == []
    )


def _stack(tmp_path: Path) -> Path:
    """The p5-llm example as `hpcc init` gives it: its placeholders left in."""
    path = tmp_path / "Pulumi.llm.yaml"
    path.write_text(yaml.safe_dump({"config": read_raw(ROOT / "examples" / "p5-llm.yaml")}))
    return path


def test_plan_warns_and_preflight_and_up_refuse(tmp_path, monkeypatch):
    path = _stack(tmp_path)
    plan = CliRunner().invoke(app, ["plan", str(path), "--out", str(tmp_path / "plan")], env={"COLUMNS": "400"})
    assert plan.exit_code == 0, plan.output
    assert "warning: cluster.ssh.allowedCidrs[0]: 203.0.113.0/24 is in 203.0.113.0/24" in plan.output
    pre = CliRunner().invoke(app, ["preflight", str(path), "--emulate"], env={"COLUMNS": "400"})
    assert pre.exit_code == 1 and "Traceback" not in pre.output
    for field in EXPECTED["p5-llm"]:
        assert f"error: {field}:" in pre.output
    # up refuses them before anything, even with --skip-preflight, and without the Pulumi CLI being asked for
    monkeypatch.setattr("infra.ops.up.require_pulumi", lambda which=None: pytest.fail("reached Pulumi"))
    up = CliRunner().invoke(app, ["up", str(path), "--skip-preflight", "--yes"], env={"COLUMNS": "400"})
    assert up.exit_code == 1 and "Traceback" not in up.output, up.output
    assert "cluster.fsx.dataRepositoryPath" in up.output and "placeholder" in up.output


@pytest.mark.parametrize(
    "cluster, where, guess",
    [
        ({"headNode": {"instanceTyp": "c6i.xlarge"}}, "cluster.headNode.instanceTyp", "instanceType"),
        ({"nodegroups": []}, "cluster.nodegroups", "nodeGroups"),
        ({"fsx": {"storageCapacityGib": 1200}}, "cluster.fsx.storageCapacityGib", "storageCapacityGiB"),
        ({"schedular": "slurm"}, "cluster.schedular", "scheduler"),
    ],
)
def test_a_mistyped_key_is_answered_with_the_closest_known_one(cluster, where, guess):
    with pytest.raises(ConfigError) as e:
        parse("us-east-1", {**copy.deepcopy(BASE), **cluster})
    assert (where, f"unknown key; did you mean {guess}?") in e.value.problems


def test_a_mistyped_key_in_a_group_and_at_the_top_of_the_file(tmp_path):
    groups = [{"name": "cpu", "instanceType": "c6i.16xlarge", "count": 2, "spare": 1}]
    with pytest.raises(ConfigError) as e:
        parse("us-east-1", {**copy.deepcopy(BASE), "nodeGroups": groups})
    assert ("cluster.nodeGroups[0].spare", "unknown key; did you mean spares?") in e.value.problems
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text("config:\n  aws:region: us-east-1\n  hpcc:clusters: {}\n")
    with pytest.raises(ConfigError) as e:
        load(path)
    assert ("hpcc:clusters", "unknown key; did you mean hpcc:cluster?") in e.value.problems
    with pytest.raises(ConfigError) as e:
        parse("us-east-1", {**copy.deepcopy(BASE), "zzzz": 1})
    assert e.value.problems[0][1].startswith("unknown key (check its spelling")
