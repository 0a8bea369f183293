"""The node agent's ticks against an AWS of parameters and objects (tests/agent_support.py): one read a tick,
membership applied once, one status write per change, and the upgrade path (canaries, waves, halt, rollback,
drift, a refused hash)."""

import json

import pytest

from hpcc_node import upgrade
from tests.agent_support import CONFIG, P, SCRIPTS, SETTINGS, FakeAws, FakeRun, make_agent, node, running
from tests.box import bundles

FOUR = "10.0.0.4\n10.0.0.5\n10.0.0.6\n10.0.0.7"


def cluster(aws: FakeAws, hosts: str = FOUR, settings: str = SETTINGS) -> None:
    aws.put(f"{P}/hosts", hosts)
    aws.put(f"{P}/settings", settings)


def test_a_change_is_applied_once_then_nothing_and_each_change_reported_once(tmp_path):
    aws = FakeAws()
    cluster(aws)
    a, sha = make_agent(tmp_path, aws)
    assert a.tick() is None
    assert [c[0] for c in a.run.calls] == ["bash"] and a.run.calls[0][-1] == "apply-membership"
    assert aws.status("compute-001")["hostsVersion"] == 1 and aws.status("compute-001")["bundle"] == sha
    a.tick()
    assert len(a.run.calls) == 1 and [c[0] for c in aws.calls] == ["get", "put", "get"]  # nothing new, nothing written
    aws.put(f"{P}/hosts", FOUR + "\n10.0.0.8")
    a.tick()
    assert len(a.run.calls) == 2 and aws.status("compute-001")["hostsVersion"] == 2
    assert aws.status("compute-001")["message"] == "membership of hosts version 2 applied"
    aws.put(f"{P}/settings", SETTINGS.replace("SLOTS=8", "SLOTS=16"))
    a.tick()
    assert len(a.run.calls) == 3 and a.settings["SLOTS"] == "16"
    gets = [c[1] for c in aws.calls if c[0] == "get"]
    assert all(names == (f"{P}/hosts", f"{P}/settings", f"{P}/bundle") for names in gets)  # ONE read a tick


def test_a_list_without_this_node_or_refused_settings_are_never_applied(tmp_path):
    aws = FakeAws()
    cluster(aws, hosts="10.0.0.4\n10.0.0.5\n10.0.0.9")
    a, _ = make_agent(tmp_path, aws, version=0)
    a.tick()
    assert a.run.calls == [] and a.node.hosts_version == 0
    assert "holds 10.0.0.9 at compute-001's line, not this node's 10.0.0.6: not applied" in (tmp_path / "compute-001/log").read_text()
    cluster(aws, settings=SETTINGS + "REBOOT=1\n")
    a.tick()
    assert a.run.calls == [] and "unknown settings key 'REBOOT'" in (tmp_path / "compute-001/log").read_text()
    assert aws.status("compute-001")["phase"] == "ready"  # the agent never fails its node


def booted(tmp_path, aws, names=("head", "compute-000", "compute-001"), scripts=None, fail=()):
    agents = {}
    for i, name in enumerate(names):
        a, sha = make_agent(tmp_path, aws, name, ip=f"10.0.0.{4 + i}", scripts=scripts)
        a.run.fail = set(fail)
        agents[name] = a
    for a in agents.values():
        a.tick()
    return agents, sha


def tick_all(agents):
    for name, a in agents.items():
        directory = a.tick()
        if directory:  # the re-executed agent: a fresh one from the same files
            fresh = type(a)(a.c, a.aws, clock=a.clock, run=a.run)
            agents[name] = fresh
            fresh.tick()


def test_canaries_move_first_then_the_others_in_waves(tmp_path):
    aws = FakeAws()
    cluster(aws, hosts="10.0.0.4\n10.0.0.5\n10.0.0.6")
    now = [1000.0]
    agents, old = booted(tmp_path, aws)
    for a in agents.values():
        a.clock = lambda: now[0]
    packed, new = bundles.build(SCRIPTS, {"hpcc_node/version.py": 'AGENT_VERSION = "2"\nPROTOCOL = 1\nACCEPTED_PROTOCOLS = (0, 1)\n'})
    aws.publish(packed, new)
    tick_all(agents)
    tick_all(agents)
    assert [running(agents[n].c) for n in ("head", "compute-000", "compute-001")] == [new, new, old]
    gets = [c[1] for c in aws.calls if c[0] == "get"]
    assert max(len(g) for g in gets) <= 10 and f"{P}/nodes/head" in gets[-1]  # the canaries read in the one call
    now[0] += 61
    tick_all(agents)
    tick_all(agents)
    assert all(running(a.c) == new for a in agents.values())
    assert all(aws.status(n)["bundle"] == new and aws.status(n)["drifted"] is None for n in agents)
    log = (tmp_path / "compute-001/log").read_text()
    assert f"switched to bundle {new[:12]} from {old[:12]}; boot steps unchanged; nothing restarted" in log
    packed, third = bundles.build(SCRIPTS, {"hpcc_node/extra.py": "X = 3\n"})
    aws.publish(packed, third)
    tick_all(agents)
    assert sorted(p.name for p in (tmp_path / "head/opt/bundles").iterdir()) == sorted([new, third])  # old pruned


def test_a_bundle_failing_its_self_check_on_a_canary_halts_and_is_rolled_back(tmp_path):
    aws = FakeAws()
    cluster(aws, hosts="10.0.0.4\n10.0.0.5\n10.0.0.6")
    packed, bad = bundles.build(SCRIPTS, {"hpcc_node/broken.py": "raise ImportError\n"})
    agents, old = booted(tmp_path, aws)
    agents["compute-000"].run.fail = {bad}
    aws.publish(packed, bad)
    for _ in range(6):
        tick_all(agents)
    assert all(running(a.c) == old for a in agents.values())  # the head moved, then rolled back
    c0 = aws.status("compute-000")
    assert c0["class"] == "bundle" and c0["refused"]["sha256"] == bad and "self-check" in c0["refused"]["reason"]
    assert c0["phase"] == "ready" and c0["ok"] is True  # a bad bundle is not a bad node
    head = aws.status("head")
    assert head["rollout"].startswith(f"halted: bundle {bad[:12]} refused on canary compute-000")
    assert "rollout" not in aws.status("compute-001")  # reported once, by the head
    fetched = [c for c in aws.calls if c[0] == "object"]
    assert len(fetched) == 2  # the two canaries; the others never fetch it
    log = (tmp_path / "head/log").read_text()
    assert f"rolled back to bundle {old[:12]} from {bad[:12]}" in log


def test_a_bundle_that_changes_a_boot_step_marks_the_node_drifted_and_reruns_nothing(tmp_path):
    aws = FakeAws()
    cluster(aws, hosts="10.0.0.4\n10.0.0.5")
    agents, old = booted(tmp_path, aws, names=("head", "compute-000"))
    changed = {**SCRIPTS, "compute": SCRIPTS["compute"] + "apt-get install -y something-new\n"}
    packed, new = bundles.build(changed)
    aws.publish(packed, new)
    tick_all(agents)
    c0 = aws.status("compute-000")
    assert c0["bundle"] == new and c0["drifted"] == f"boot steps changed in {new[:12]}: replace when idle"
    assert aws.status("head")["drifted"] is None  # its own role script did not change
    assert not any(argv[0] == "bash" and argv[-1] != "apply-membership" for argv in agents["compute-000"].run.calls)


def test_a_bundle_whose_hash_does_not_match_is_refused_and_never_unpacked(tmp_path):
    aws = FakeAws()
    cluster(aws, hosts="10.0.0.4\n10.0.0.5")
    agents, old = booted(tmp_path, aws, names=("head", "compute-000"))
    packed, new = bundles.build(SCRIPTS, {"hpcc_node/extra.py": "X = 1\n"})
    aws.publish(packed + b"corrupt", new)
    tick_all(agents)
    st = aws.status("head")
    assert st["class"] == "bundle" and f"expected sha256 {new}, got" in st["refused"]["reason"]
    assert running(agents["head"].c) == old
    assert not (tmp_path / "head/opt/bundles" / new).exists()
    assert [p.name for p in (tmp_path / "head/opt/bundles").iterdir()] == [old]  # no temp file or dir left


def test_the_real_self_check_runs_the_new_bundles_agent_against_this_nodes_state(tmp_path):
    config, sha = node(tmp_path, "compute-000")
    env = {"HPCC_ROLE": "compute", **{f"HPCC_{k.upper()}": v for k, v in CONFIG.items()}, "HPCC_ETC": config.etc,
           "PATH": "/usr/bin:/bin"}
    upgrade.self_check(upgrade.bundle_dir(sha, config.opt), env=env)  # passes: imports, settings, state, manifest
    packed, bad = bundles.build(SCRIPTS, {"hpcc_node/settings.py": "raise ImportError('broken module')\n"})
    bundles.install(tmp_path / "other", packed, bad)
    with pytest.raises(upgrade.BundleError, match="broken module"):
        upgrade.self_check(upgrade.bundle_dir(bad, str(tmp_path / "other")), env=env)
    (tmp_path / "compute-000/etc/settings").write_text(SETTINGS + "REBOOT=1\n")  # what this node applied, refused
    with pytest.raises(upgrade.BundleError, match="REBOOT"):
        upgrade.self_check(upgrade.bundle_dir(sha, config.opt), env=env)


def test_the_heads_agent_drains_and_resumes_by_the_nodes_statuses_and_reports_slurms_states(tmp_path):
    aws = FakeAws()
    cluster(aws, hosts="10.0.0.4\n10.0.0.5\n10.0.0.6\n10.0.0.7")
    aws.put(f"{P}/nodes/compute-001", json.dumps({"node": "compute-001", "phase": "failed", "step": "join"}))
    aws.put(f"{P}/nodes/compute-002", json.dumps({"node": "compute-002", "phase": "ready", "step": "sync"}))
    sinfo = {"nodes": "compute-000|idle|none\ncompute-001|idle*|Not responding\ncompute-002|drained|hpcc: bootstrap failed at efa\n",
             "summary": "idle compute-000\ndrained compute-002\n"}
    a, _ = make_agent(tmp_path, aws, "head", ip="10.0.0.4")
    a.run.sinfo = sinfo
    a.tick()
    assert [argv for argv in a.run.calls if argv[0] == "scontrol"] == [
        ["scontrol", "update", "NodeName=compute-001", "State=DRAIN", "Reason=hpcc: bootstrap failed at join"],
        ["scontrol", "update", "NodeName=compute-002", "State=RESUME"]]
    reads = [c[1] for c in aws.calls if c[0] == "get" and f"{P}/hosts" not in c[1]]
    assert reads == [(f"{P}/nodes/compute-001", f"{P}/nodes/compute-002")]  # only those Slurm cannot use
    assert aws.status("head")["slurm"] == {"idle": "compute-000", "drained": "compute-002"}
    assert (tmp_path / "head/run/hpcc-slurm.json").read_text() == '"idle": "compute-000", "drained": "compute-002"\n'
