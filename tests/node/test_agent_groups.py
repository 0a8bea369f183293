"""A node of a cluster with several node groups follows its own group's script in the bundle (roles/<group>.sh:
hpcc_contract/names.py boot_key): its boot digest, the drift it reports, the self-check and what the agent runs
(apply-dcgm, apply-membership) are its group's, never the first group's; a bundle of manifest format 1 (one
roles/compute.sh for every group: what a rollback may return to) is read by role."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from hpcc_node import agent as node_agent
from hpcc_node import state, upgrade
from tests.box import bundles
from tests.node.agent_support import CONFIG, SETTINGS, FakeAws, FakeRun, P, make_agent, node
from tests.node.test_agent_metrics import METRICS

GROUPS = {
    "head": "#!/bin/bash\n# head boot steps\n",
    "gpu": "#!/bin/bash\n# compute boot steps: p5.48xlarge, 8 GPUs, 32 EFA devices\n",
    "cpu": "#!/bin/bash\n# compute boot steps: c6i.32xlarge, no GPU, 1 EFA device\n",
}


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def restarted(config, record: state.AgentRecord) -> node_agent.Agent:
    """An agent started on a node whose agent.json says `record` (what the agent before it wrote)."""
    state.write_record(config.path("agent.json"), record)
    aws = aws_with_settings()
    return node_agent.Agent(config, aws, clock=lambda: 1000.0, run=FakeRun(Path(config.etc)), s3=aws.s3)


def aws_with_settings() -> FakeAws:
    aws = FakeAws()
    aws.members("10.0.0.4\n10.0.0.5")
    aws.put(f"{P}/settings", SETTINGS)
    return aws


@pytest.mark.parametrize("name,key", [("gpu-000", "gpu"), ("cpu-003", "cpu"), ("head", "head")])
def test_a_node_booted_of_its_groups_script_records_that_scripts_digest(tmp_path, name, key):
    agent, _ = make_agent(tmp_path, aws_with_settings(), name, scripts=GROUPS)
    assert agent.own_script() == str(Path(agent.current_dir()) / "roles" / f"{key}.sh")
    assert agent.record.boot_digest == digest(GROUPS[key])
    assert state.read_record(agent.c.path("agent.json")).boot_digest == digest(GROUPS[key])


def test_a_gpu_node_of_the_second_group_applies_dcgm_with_its_own_groups_script(tmp_path):
    scripts = {"head": GROUPS["head"], "cpu": GROUPS["cpu"], "gpu": GROUPS["gpu"]}  # the GPU group second
    agent, _ = make_agent(tmp_path, aws_with_settings(), "gpu-001", ip="10.0.0.5", scripts=scripts, patches=METRICS)
    (Path(agent.c.etc) / "health.env").write_text("GPUS=8\nEFA_DEVICES=32\nDCGM_LEVEL=2\n")
    agent.follow_dcgm()
    argv = next(a for a in agent.run.calls if a[-1] == "apply-dcgm")
    assert argv[:2] == ["bash", str(Path(agent.current_dir()) / "roles" / "gpu.sh")]


def test_a_node_booted_of_another_groups_script_is_drifted_once_its_own_comes(tmp_path):
    """A cpu node booted before each group had its script (it ran the first group's) reports drift on a bundle
    with its own; a gpu node of the first group, whose script is unchanged, does not."""
    for name in ("gpu-000", "cpu-000"):
        config, sha = node(tmp_path, name, scripts=GROUPS)
        agent = restarted(config, state.AgentRecord(boot_digest=digest(GROUPS["gpu"])))
        expected = None if name == "gpu-000" else f"boot steps changed in {sha[:12]}: replace when idle"
        assert agent.record.drifted == expected
        assert state.read_record(config.path("agent.json")).drifted == expected


def test_a_drift_an_older_agent_said_of_a_manifest_it_could_not_read_is_said_again_by_the_new_one(tmp_path):
    config, sha = node(tmp_path, "gpu-000", scripts=GROUPS)
    old_note = f"boot steps changed in {sha[:12]}: replace when idle"  # a format-1 reader found no digest
    agent = restarted(config, state.AgentRecord(boot_digest=digest(GROUPS["gpu"]), drifted=old_note))
    assert agent.record.drifted is None and state.read_record(config.path("agent.json")).drifted is None


def test_a_format_1_bundle_is_read_by_role(tmp_path):
    """What a node rolled back to a bundle from before per-group scripts runs: its one compute script."""
    config, sha = node(tmp_path, "gpu-000", scripts=GROUPS)
    directory = Path(upgrade.bundle_dir(sha, config.opt))
    (directory / "roles" / "compute.sh").write_text(GROUPS["gpu"])
    doc = json.loads((directory / "manifest.json").read_text())
    doc.update(format=1, roles={"compute": {"script": "roles/compute.sh", "bootDigest": digest(GROUPS["gpu"])}})
    (directory / "manifest.json").write_text(json.dumps(doc))
    assert upgrade.boot_script(str(directory), "compute", "gpu-000") == str(directory / "roles" / "compute.sh")
    assert upgrade.boot_digest(str(directory), "compute", "cpu-000") == digest(GROUPS["gpu"])


def test_the_self_check_finds_this_nodes_own_groups_script_or_refuses_the_bundle(tmp_path):
    config, sha = node(tmp_path, "cpu-000", scripts=GROUPS)
    env = {
        "HPCC_ROLE": "compute",
        **{f"HPCC_{k.upper()}": v for k, v in CONFIG.items()},
        "HPCC_STATUS_KEY": config.status_key,
        "HPCC_ETC": config.etc,
        "PATH": "/usr/bin:/bin",
    }
    upgrade.self_check(upgrade.bundle_dir(sha, config.opt), env=env)  # passes: roles/cpu.sh is there
    packed, without = bundles.build({"head": GROUPS["head"], "gpu": GROUPS["gpu"]})  # a bundle with no cpu group
    bundles.install(tmp_path / "other", packed, without)
    with pytest.raises(upgrade.BundleError, match="names no script for 'cpu'"):
        upgrade.self_check(upgrade.bundle_dir(without, str(tmp_path / "other")), env=env)
