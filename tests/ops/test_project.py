"""The user's project (infra/ops/project.py): which stack a file is, where the project is, what `hpcc init` writes."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from infra.config.stackfile import load
from infra.ops.cli import app
from infra.ops.project import ProjectError, find_project, init_project, policy_pack, stack_name

ROOT = Path(__file__).resolve().parents[2]


def test_the_stack_comes_from_the_file_name_and_is_never_guessed():
    assert stack_name(Path("x/Pulumi.bert.yaml"), None) == "bert"
    assert stack_name(Path("Pulumi.bert.yml"), "other") == "other"
    with pytest.raises(ProjectError, match="--stack"):
        stack_name(ROOT / "examples" / "p5-llm.yaml", None)


EXAMPLE = str(ROOT / "examples" / "p5-llm.yaml")  # not named Pulumi.<stack>.yaml: it names no stack


# replace needs a cluster, not a stack: a stack file of any name gives it (issue 32), so without one it is asked for
@pytest.mark.parametrize("args", [["up", EXAMPLE], ["destroy", EXAMPLE], ["replace", "head"]])
def test_operator_commands_without_a_stack_exit_2_before_touching_pulumi(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no stack file here to fall back on
    run = CliRunner().invoke(app, args)
    assert run.exit_code == 2 and "--stack NAME" in " ".join(run.output.split()) and "Traceback" not in run.output


def test_init_writes_a_project_that_plans_and_refuses_to_overwrite_it(tmp_path):
    written = init_project(tmp_path / "p", "p3dn-bert", venv="/opt/hpcc-env")
    p = tmp_path / "p"
    assert written.stack == "bert" and find_project(p / "slurm") == p
    assert "virtualenv: /opt/hpcc-env" in (p / "Pulumi.yaml").read_text()
    assert "main: hpcc/program/" in (p / "Pulumi.yaml").read_text()
    assert 'run_module("infra.__main__"' in (p / "hpcc" / "program" / "__main__.py").read_text()
    assert policy_pack(p) == p / "hpcc" / "policy"
    assert load(p / "Pulumi.bert.yaml") == load(ROOT / "examples" / "p3dn-bert.yaml")
    assert (p / "slurm" / "torchrun.sbatch").read_text() == (ROOT / "examples/slurm/torchrun.sbatch").read_text()
    stack_file = (p / "Pulumi.bert.yaml").read_text()
    with pytest.raises(ProjectError, match="exists"):
        init_project(p, "p5-llm")
    init_project(p, refresh=True, venv="/opt/new-env")
    assert "virtualenv: /opt/new-env" in (p / "Pulumi.yaml").read_text()
    assert (p / "Pulumi.bert.yaml").read_text() == stack_file  # refresh never touches the cluster's config


def test_init_refuses_an_unknown_example_with_the_choices(tmp_path):
    run = CliRunner().invoke(app, ["init", str(tmp_path / "p"), "--example", "p9"])
    assert run.exit_code == 2 and "p5-llm" in run.output and not (tmp_path / "p").exists()


def test_without_a_project_up_says_to_run_init(tmp_path):
    from infra.ops import OpsError
    from infra.ops.up import pack_for

    cfg = tmp_path / "Pulumi.x.yaml"
    cfg.write_text((ROOT / "examples" / "c6i-oneccl.yaml").read_text())
    with pytest.raises(OpsError, match="hpcc init"):
        pack_for(cfg) if find_project(tmp_path) is None else pytest.skip("a Pulumi.yaml above the tmp dir")


def test_up_refuses_a_project_written_for_another_hpcc_environment(tmp_path):
    from infra.ops import OpsError
    from infra.ops.project import environment, stale_environment
    from infra.ops.up import pack_for

    init_project(tmp_path / "p", "c6i-oneccl", venv="/opt/elsewhere")
    assert "--refresh" in stale_environment(tmp_path / "p", venv="/opt/here")
    with pytest.raises(OpsError, match="hpcc init .* --refresh"):
        pack_for(tmp_path / "p" / "Pulumi.cpu-oneccl.yaml")
    init_project(tmp_path / "p", refresh=True)
    assert stale_environment(tmp_path / "p") is None and environment() is not None
    assert pack_for(tmp_path / "p" / "Pulumi.cpu-oneccl.yaml") == tmp_path / "p" / "hpcc" / "policy"
    assert stale_environment(ROOT) is None  # the checkout's own Pulumi.yaml is not one `hpcc init` wrote
