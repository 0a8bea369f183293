"""Each node group's nodes boot from a script rendered for their own group: the loader in a group's launch template
runs that group's script from the bundle, with the group's instance type, GPUs and EFA devices (a p5.48xlarge group
and a c6i.32xlarge group in one cluster: the second group's nodes never run the first's EFA check)."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from hpcc_contract import formats
from infra.config.parse import parse
from infra.plan.runner import plan_config
from infra.render.roles import resolve_role
from tests.facts.instance_data import offline_facts

REGION = "us-east-1"
MIXED = {
    "name": "mixed",
    "headNode": {"instanceType": "c5n.9xlarge"},
    "nodeGroups": [
        {"name": "gpu", "instanceType": "p5.48xlarge", "count": 2},
        {"name": "cpu", "instanceType": "c6i.32xlarge", "count": 2},
        {"name": "plain", "instanceType": "c6i.32xlarge", "count": 1, "efa": False},
    ],
}
LOADER_RUNS = re.compile(r'^exec bash "\$D/current/(roles/[^"]+)"$', re.M)


@pytest.fixture(scope="module")
def planned():
    return plan_config({"aws:region": REGION, "hpcc:cluster": MIXED})


def booted_script(planned, group: str) -> str:
    """The script a node of `group` runs: the one its launch template's loader names, read from the planned bundle."""
    loader = planned.user_data[f"mixed-{group}-lt"]
    path = LOADER_RUNS.search(loader).group(1)
    assert f'[ -f "$DIR/{path}" ]' in loader  # the loader checks for the script it runs
    return planned.bundle_files[path].decode()


@pytest.mark.parametrize("group", ["gpu", "cpu", "plain"])
def test_each_groups_loader_runs_a_script_rendered_for_that_groups_type(planned, group):
    spec = resolve_role(parse(REGION, MIXED).cluster, REGION, "compute", offline_facts(), group)
    script = booted_script(planned, group)
    assert f"compute node ({spec.itype.name})" in script.splitlines()[1]
    assert "${HPCC_HEALTH_GPUS:-" + f"{spec.itype.gpus}" + "}" in script
    assert f'"EFA_DEVICES={spec.efa_devices}"' in script
    if spec.efa_devices:
        assert f"{spec.itype.name} was launched with {spec.efa_devices}\"" in script
    else:
        assert "was launched with" not in script  # no EFA step on a group launched without EFA


def test_the_groups_differ_where_their_types_do(planned):
    gpu, cpu, plain = (booted_script(planned, g) for g in ("gpu", "cpu", "plain"))
    assert "p5.48xlarge was launched with 32" in gpu and "p5.48xlarge" not in cpu and "p5.48xlarge" not in plain
    assert len({gpu, cpu, plain}) == 3


def test_the_manifest_names_each_groups_script_and_digest_under_the_groups_name(planned):
    manifest = json.loads(planned.bundle_files["manifest.json"])
    assert manifest["format"] == formats.BUNDLE_MANIFEST
    assert sorted(manifest["roles"]) == ["cpu", "gpu", "head", "plain"]  # the head's and each group's
    for key, entry in manifest["roles"].items():
        assert entry == {
            "script": f"roles/{key}.sh",
            "bootDigest": hashlib.sha256(planned.bundle_files[f"roles/{key}.sh"]).hexdigest(),
        }
    assert not [p for p in planned.bundle_files if p.startswith("roles/") and p[6:-3] not in manifest["roles"]]
    assert sorted(planned.role_scripts()) == ["cpu", "gpu", "head", "plain"]
