"""The node agent's ticks against an AWS of parameters and objects (tests/node/agent_support.py): one conditional GET
of membership.json and one GetParameters a tick, a newer generation applied once, one status write per change, and
the upgrade path (canaries, waves, halt, rollback, drift, a refused hash)."""

import json
import os

import pytest

from hpcc_contract.names import MEMBERSHIP_KEY, membership_delta_key
from hpcc_node import upgrade
from hpcc_node.controller import membership
from tests.box import bundles
from tests.node.agent_support import (
    ARN,
    CONFIG,
    SCRIPTS,
    SETTINGS,
    STATE,
    FakeAws,
    FakeRun,
    P,
    instance_of,
    make_agent,
    membership_doc,
    node,
    running,
)

FOUR = "10.0.0.4\n10.0.0.5\n10.0.0.6\n10.0.0.7"


def cluster(aws: FakeAws, hosts: str = FOUR, settings: str = SETTINGS) -> None:
    aws.members(hosts)
    aws.put(f"{P}/settings", settings)


def test_a_change_is_applied_once_then_nothing_and_each_change_reported_once(tmp_path):
    aws = FakeAws()
    cluster(aws)
    a, sha = make_agent(tmp_path, aws)
    assert a.tick() is None
    assert [c[0] for c in a.run.calls] == ["bash"] and a.run.calls[0][-1] == "apply-membership"
    st = aws.status("compute-001")
    assert st["hostsVersion"] == 1 and st["bundle"] == sha and st["instance_id"] == instance_of("compute-001")
    assert st["name"] == "compute-001" and st["ok"] is True and st["phase"] == "ready"
    del aws.calls[:]
    a.tick()
    assert len(a.run.calls) == 1  # nothing new: one HeadObject, nothing applied, nothing written
    assert aws.calls == [("s3-head", MEMBERSHIP_KEY), ("get", (f"{P}/settings", f"{P}/bundle"))]
    body = aws.s3.objects[(STATE, a.c.status_key)]
    aws.members(FOUR + "\n10.0.0.8")
    del aws.calls[:]
    a.tick()
    assert len(a.run.calls) == 2 and aws.status("compute-001")["hostsVersion"] == 2
    # the change came as its delta, not the whole object; and the status says so in its metadata, not its body
    assert ("s3-get", MEMBERSHIP_KEY) not in aws.calls and ("s3-get", membership_delta_key(2)) in aws.calls
    assert aws.s3.objects[(STATE, a.c.status_key)] == body  # the same bytes: the same ETag for the controller
    aws.put(f"{P}/settings", SETTINGS.replace("SLOTS=8", "SLOTS=16"))
    a.tick()
    assert len(a.run.calls) == 3 and a.settings["SLOTS"] == "16"
    assert not any(c[0] == "put" for c in aws.calls)  # no status parameter: S3 alone


def test_a_node_taken_out_of_the_hostfiles_keeps_its_files_and_says_why_once_a_generation(tmp_path):
    aws = FakeAws()
    cluster(aws)
    a, _ = make_agent(tmp_path, aws)
    a.tick()
    assert len(a.run.calls) == 1
    doc = membership_doc(FOUR, 2)
    doc["nodes"][1]["out"] = "hpcc: shared_mount: /fsx did not answer within 10 s"  # compute-001, no Slurm
    aws.s3.objects[(STATE, MEMBERSHIP_KEY)] = json.dumps(doc).encode()
    for _ in range(3):
        a.tick()
    log = (tmp_path / "compute-001/log").read_text()
    assert len(a.run.calls) == 1 and a.node.hosts_version == 1  # the files stay as they were
    assert (
        log.count(
            "membership generation 2 takes compute-001 out of the hostfiles (hpcc: shared_mount: /fsx did "
            "not answer within 10 s): not applied"
        )
        == 1
    ), log
    del doc["nodes"][1]["out"]
    doc["generation"] = 3
    aws.s3.objects[(STATE, MEMBERSHIP_KEY)] = json.dumps(doc).encode()
    a.tick()
    assert len(a.run.calls) == 2 and a.node.hosts_version == 3  # listed again: applied


def test_the_hosts_text_applied_is_the_membership_rendered_by_the_one_renderer(tmp_path):
    from hpcc_node import hosts

    aws = FakeAws()
    cluster(aws)
    a, _ = make_agent(tmp_path, aws)
    run, texts = [], []

    def apply(argv, **kw):
        run.append(kw["env"])
        texts.append(open(kw["env"]["HPCC_APPLY_HOSTS_FILE"]).read())  # a file: never one environment string
        return FakeRun(tmp_path / "compute-001/etc")(argv, **kw)

    a.run = apply
    a.tick()
    doc = membership_doc(FOUR, 1)
    assert texts[0] == hosts.hosts_text(doc) and run[0]["HPCC_APPLY_VERSION"] == "1"
    assert texts[0].splitlines()[:2] == ["head 10.0.0.4", "compute-000 10.0.0.5"]
    assert "HPCC_APPLY_HOSTS" not in run[0] and not os.path.exists(run[0]["HPCC_APPLY_HOSTS_FILE"])  # removed after


def test_an_older_generation_or_a_list_without_this_node_or_refused_settings_are_never_applied(tmp_path):
    aws = FakeAws()
    cluster(aws, hosts="10.0.0.4\n10.0.0.5\n10.0.0.9")
    a, _ = make_agent(tmp_path, aws, version=0)
    a.tick()
    assert a.run.calls == [] and a.node.hosts_version == 0
    assert (
        f"does not list compute-001 as {instance_of('compute-001')}" not in (tmp_path / "compute-001/log").read_text()
    )
    assert (
        "lists 10.0.0.9 as compute-001, not this node's 10.0.0.6: not applied"
        in (tmp_path / "compute-001/log").read_text()
    )
    doc = membership_doc(FOUR, 1)
    doc["nodes"][1]["instance"] = "i-0fffffff"  # compute-001's name on another instance (its successor)
    aws.s3.objects[(STATE, MEMBERSHIP_KEY)] = json.dumps(doc).encode()
    a.tick()
    assert (
        a.run.calls == []
        and f"does not list compute-001 as {instance_of('compute-001')}" in (tmp_path / "compute-001/log").read_text()
    )
    b, _ = make_agent(tmp_path / "b", aws, version=5)  # a node that applied generation 5
    aws.s3.objects[(STATE, MEMBERSHIP_KEY)] = json.dumps(membership_doc(FOUR, 4)).encode()
    b.tick()
    assert b.run.calls == [] and b.node.hosts_version == 5
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
            fresh = type(a)(a.c, a.aws, clock=a.clock, run=a.run, s3=a.s3)
            agents[name] = fresh
            fresh.tick()


def test_canaries_move_first_then_the_others_in_waves(tmp_path):
    aws = FakeAws()
    cluster(aws, hosts="10.0.0.4\n10.0.0.5\n10.0.0.6")
    now = [1000.0]
    agents, old = booted(tmp_path, aws)
    for a in agents.values():
        a.clock = lambda: now[0]
    packed, new = bundles.build(
        SCRIPTS, {"hpcc_contract/version.py": 'AGENT_VERSION = "2"\nPROTOCOL = 1\nACCEPTED_PROTOCOLS = (0, 1)\n'}
    )
    aws.publish(packed, new)
    tick_all(agents)
    tick_all(agents)
    assert [running(agents[n].c) for n in ("head", "compute-000", "compute-001")] == [new, new, old]
    head_status = membership.status_key(ARN + instance_of("head"))
    assert ("s3-get", head_status) in aws.calls  # the canaries' statuses, from the state bucket
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
    env = {
        "HPCC_ROLE": "compute",
        **{f"HPCC_{k.upper()}": v for k, v in CONFIG.items()},
        "HPCC_STATUS_KEY": config.status_key,
        "HPCC_ETC": config.etc,
        "PATH": "/usr/bin:/bin",
    }
    upgrade.self_check(upgrade.bundle_dir(sha, config.opt), env=env)  # passes: imports, settings, state, manifest
    packed, bad = bundles.build(SCRIPTS, {"hpcc_node/settings.py": "raise ImportError('broken module')\n"})
    bundles.install(tmp_path / "other", packed, bad)
    with pytest.raises(upgrade.BundleError, match="broken module"):
        upgrade.self_check(upgrade.bundle_dir(bad, str(tmp_path / "other")), env=env)
    (tmp_path / "compute-000/etc/settings").write_text(SETTINGS + "REBOOT=1\n")  # what this node applied, refused
    with pytest.raises(upgrade.BundleError, match="REBOOT"):
        upgrade.self_check(upgrade.bundle_dir(sha, config.opt), env=env)


def test_the_heads_agent_reports_slurms_states_and_writes_no_node_state(tmp_path):
    """The controller is the one writer of Slurm's node states (hpcc_node/controller/act.py)."""
    aws = FakeAws()
    cluster(aws, hosts="10.0.0.4\n10.0.0.5\n10.0.0.6\n10.0.0.7")
    sinfo = {
        "nodes": "compute-000|idle|none\ncompute-001|idle*|Not responding\ncompute-002|drained|hpcc: bootstrap failed "
        "at efa\n",
        "summary": "idle compute-000\ndrained compute-002\n",
    }
    a, _ = make_agent(tmp_path, aws, "head", ip="10.0.0.4")
    a.run.sinfo = sinfo
    a.tick()
    assert [argv for argv in a.run.calls if argv[0] == "scontrol"] == []
    assert aws.status("head")["slurm"] == {"idle": "compute-000", "drained": "compute-002"}
    assert (tmp_path / "head/run/hpcc-slurm.json").read_text() == '"idle": "compute-000", "drained": "compute-002"\n'


def test_with_the_controllers_settings_digest_a_settled_agent_makes_no_ssm_request(tmp_path):
    """The membership carries the bundle pointer and the settings' sha256 (the controller's follow()): SSM is read
    when that changes only. 4,096 settled agents then ask SSM nothing (issue 19: at most 5 requests/s)."""
    from hpcc_node.controller.__main__ import follow

    aws = FakeAws()
    cluster(aws)

    def publish(settings_text: str, pointer: str = "") -> None:
        aws.generation += 1
        doc = membership_doc(FOUR, aws.generation)
        doc["bundle"] = follow(pointer, settings_text)
        aws.s3.objects[(STATE, MEMBERSHIP_KEY)] = json.dumps(doc).encode()

    publish(SETTINGS)
    a, sha = make_agent(tmp_path, aws, "compute-000", ip="10.0.0.5")  # a canary: it moves first
    a.tick()
    del aws.calls[:]
    a.tick()
    a.tick()
    assert [c for c in aws.calls if c[0] == "get"] == []  # no SSM: the digest did not change
    changed = SETTINGS.replace("SLOTS=8", "SLOTS=16")
    aws.put(f"{P}/settings", changed)
    publish(changed)
    a.tick()
    assert [c for c in aws.calls if c[0] == "get"] == [("get", (f"{P}/settings", f"{P}/bundle"))]
    assert a.settings["SLOTS"] == "16"
    packed, new = bundles.build(SCRIPTS, {"hpcc_node/extra.py": "X = 2\n"})
    aws.objects[("hpcc-llm-bundles", f"bundles/{new}.tar.gz")] = packed  # the pointer in the membership only
    publish(changed, json.dumps({"sha256": new, "bucket": "hpcc-llm-bundles", "key": f"bundles/{new}.tar.gz"}))
    del aws.calls[:]
    for _ in range(3):
        a.tick()
    assert ("object", f"bundles/{new}.tar.gz") in aws.calls and not [c for c in aws.calls if c[0] == "get"]
    assert running(a.c) == new


def reported(tmp_path):
    """compute-001's agent after one tick on a fake clock: (agent, its AWS, the clock, its status key, the status
    it wrote, the status writes since, as a function)."""
    aws = FakeAws()
    cluster(aws)
    now = [1000.0]
    a, _ = make_agent(tmp_path, aws, clock=lambda: now[0])
    a.tick()
    key = membership.status_key(ARN + instance_of("compute-001"))
    del aws.calls[:]
    return a, aws, now, key, aws.s3.objects[(STATE, key)], lambda: [c for c in aws.calls if c == ("s3-put", key)]


def test_an_unchanged_status_is_written_again_each_heartbeat_with_the_same_bytes(tmp_path):
    """The controller reads a status object's LastModified from its listing: a heartbeat that rewrote the body
    (a new `at`) would change the ETag and make it fetch every node's status every loop."""
    a, aws, now, key, first, puts = reported(tmp_path)
    now[0] += a.c.heartbeat_seconds - 1
    a.tick()
    assert puts() == []  # unchanged, within the beat: nothing written
    now[0] += 1
    a.tick()
    assert len(puts()) == 1 and aws.s3.objects[(STATE, key)] == first  # the beat: the same bytes again
    a.tick()
    assert len(puts()) == 1


def test_the_heartbeat_override_is_a_bounded_number_of_seconds():
    from hpcc_node import status

    assert status.heartbeat_seconds("10") == 10
    assert [status.heartbeat_seconds(t) for t in ("", "1", "99999", "-5", "ten")] == [status.HEARTBEAT_SECONDS] * 5


def test_the_heartbeat_thread_writes_the_last_status_while_the_tick_is_stuck(tmp_path):
    """A tick that takes minutes (apply-membership waiting on a restarting slurmctld) writes no status; the
    heartbeat thread does, the same bytes each beat, so the controller does not take the node for dead."""
    from hpcc_node.agent import heartbeat

    a, aws, now, key, first, puts = reported(tmp_path)
    slept = []

    def sleep(seconds):  # the tick meanwhile is stuck: no tick() below
        if len(slept) == 4:
            raise StopIteration
        slept.append(seconds)
        now[0] += seconds

    with pytest.raises(StopIteration):
        heartbeat(a, sleep)
    assert slept == [a.c.heartbeat_seconds / 2] * 4
    assert len(puts()) == 2  # at one beat and at two, not between
    assert aws.s3.objects[(STATE, key)] == first
