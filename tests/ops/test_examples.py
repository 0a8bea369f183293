"""The shipped examples work as written: each plans without a warning (an image that drives its GPUs, a known
price, EFA on where the type has it), the default one is a current GPU type, and the shipped deployer IAM policy
covers every resource type they create."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from infra.config.stackfile import load
from infra.config.validators.placeholders import placeholders
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
def test_every_example_plans_without_a_warning_but_its_placeholders(plans, example, tmp_path):
    """No warning of the rules, a known price; the placeholders the user must fill in (issue 32: an example bucket,
    a documentation address range, a `you@laptop` key) are warned of, each by its field, and nothing else is."""
    result = plans[example]
    console = Console(record=True, width=2000)
    print_summary(result, tmp_path, console)
    text = console.export_text()
    warned = [line for line in text.splitlines() if "warning" in line.lower()]
    assert not result.warnings and "price unknown" not in text, text
    assert [w.split(": ")[1] for w in warned] == [f.field for f in placeholders(result.config)], text
    assert all("placeholder" in w or "example" in w or "documentation" in w for w in warned), warned


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
