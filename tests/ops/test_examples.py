"""The shipped examples work as written: each plans without a warning (an image that drives its GPUs, a known
price, EFA on where the type has it), the default one is a current GPU type, and the shipped deployer IAM policy
covers every resource type they create."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from infra.config.stackfile import load
from infra.ops.deployer_policy import WRITES, planned_types, render, shipped
from infra.ops.plan_summary import print_summary
from infra.ops.project import DEFAULT_EXAMPLE

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
CURRENT_GPU_FAMILIES = ("p5", "p5e", "p5en", "p6")  # H100 and newer


@pytest.fixture(scope="module")
def plans():
    from infra.plan.runner import plan_stack_file

    return {p.stem: plan_stack_file(p) for p in EXAMPLES}


@pytest.mark.parametrize("example", [p.stem for p in EXAMPLES])
def test_every_example_plans_without_a_warning(plans, example, tmp_path):
    result = plans[example]
    console = Console(record=True, width=200)
    print_summary(result, tmp_path, console)
    text = console.export_text()
    assert not result.warnings and "warning" not in text.lower() and "price unknown" not in text, text


def test_the_default_example_is_a_current_gpu_type():
    makefile = (ROOT / "Makefile").read_text()
    assert f"EXAMPLE ?= examples/{DEFAULT_EXAMPLE}.yaml" in makefile  # make plan and hpcc init start from the same one
    family = load(ROOT / "examples" / f"{DEFAULT_EXAMPLE}.yaml").cluster.compute.instance_type.split(".")[0]
    assert family in CURRENT_GPU_FAMILIES


def test_the_shipped_deployer_policy_is_the_one_generated_from_what_the_examples_create(plans):
    types = planned_types(plans.values())
    assert {t for t in types if t.startswith("aws:")} <= set(WRITES)  # every created type has its IAM actions
    assert shipped() == render(types), "policy/deployer-policy.json is stale: python -m infra.ops.deployer_policy"
    # IAM: a managed policy is at most 6,144 characters, whitespace not counted.
    assert len(json.dumps(json.loads(shipped()), separators=(",", ":"))) <= 6144


def test_the_ssm_login_lands_as_the_login_user_who_holds_the_cluster_key(plans):
    outputs = plans["c6i-oneccl"].outputs  # no ssh.allowedCidrs: Session Manager
    assert outputs["sshCommand"].startswith("aws ssm start-session --region us-east-1 --target i-")
    assert outputs["sshCommand"].endswith(
        "--document-name AWS-StartInteractiveCommand --parameters 'command=sudo -iu ubuntu'"
    )
