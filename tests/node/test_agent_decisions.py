"""The node agent's decisions, as pure functions: which membership to apply, pacing, when a node may move to a new
bundle (canary, wave, halt, rollback), drift, Slurm's states and the status it writes."""

import json

import pytest

from hpcc_node import agent, hosts, rollout, slurm, status
from hpcc_node.aws import pace_wait_ms
from hpcc_node.settings import pacing, parse
from hpcc_node.state import StateError, parse_hosts, parse_state
from tests.node.agent_support import SETTINGS

A, B = "a" * 64, "b" * 64
PTR = rollout.Pointer(B, "bkt", f"bundles/{B}.tar.gz")


def test_membership_is_applied_only_for_a_newer_generation_or_changed_settings():
    doc = {"generation": 3, "nodes": []}
    assert not agent.membership_due(3, SETTINGS, doc, SETTINGS.rstrip("\n"))  # the file keeps a newline
    assert agent.membership_due(3, SETTINGS, {**doc, "generation": 4}, SETTINGS)
    assert not agent.membership_due(5, SETTINGS, {**doc, "generation": 4}, SETTINGS)  # an older one: never
    assert agent.membership_due(3, SETTINGS, doc, SETTINGS.replace("SLOTS=8", "SLOTS=16"))
    assert not agent.membership_due(3, SETTINGS, None, SETTINGS.replace("SLOTS=8", "SLOTS=16"))  # none read yet


def test_a_hosts_text_is_applied_only_with_this_node_at_its_own_address():
    pairs = parse_hosts("head 10.0.0.4\ncompute-000 10.0.0.5\ncompute-001 10.0.0.6\n", "10.0.0.0/16")
    assert hosts.line_holds(pairs, "compute-001", "10.0.0.6") is None
    assert hosts.line_holds(pairs, "compute-001", "10.0.0.7") == "10.0.0.6"
    assert hosts.line_holds(pairs, "compute-002", "10.0.0.7") == "nothing"
    # The bootstrap's rules (hpcc_contract/hosts.py): names and addresses of the VPC only, none twice.
    for bad in (
        "head 10.0.0.4\ncompute-000 $(reboot)\n",
        "head 10.0.0.4\ncompute-000 169.254.169.254\n",
        "head 10.0.0.4\ncompute-000 10.0.0.4\n",
        "head 10.0.0.4\ncompute-000 10.0.0.256\n",
        "head 10.0.0.4\n$(reboot) 10.0.0.5\n",
    ):
        with pytest.raises(StateError, match="hosts: line 2"):
            parse_hosts(bad, "10.0.0.0/16")


def test_the_state_file_is_read_back_checked_never_trusted():
    good = "HPCC_NODE=compute-001\nHPCC_INSTANCE_ID=i-0abc\nHPCC_IP=10.0.0.6\nHOSTS_VERSION=2\n"
    assert parse_state(good).hosts_version == 2
    assert parse_state(good.replace("compute-001", "gpu-1000")).node == "gpu-1000"
    for bad in (
        good.replace("2\n", "x\n"),
        good + "EVIL=1\n",
        good.replace("compute-001", "../etc"),
        good.replace("i-0abc", "i-0abc;x"),
    ):
        with pytest.raises(StateError):
            parse_state(bad)


def test_pacing_comes_from_the_settings_and_paces_like_the_bootstrap():
    p = pacing(parse(SETTINGS))
    assert p.sync_seconds >= 10 and p.attempts >= 1
    assert pace_wait_ms(0, 5000, 400, 0.5) == 200  # first call: a random point of one interval
    assert pace_wait_ms(5000, 5100, 400, 0.0) == 300  # at least one interval after the last
    assert pace_wait_ms(5000, 5100, 400, 1.0) == 400  # plus up to a quarter of jitter
    assert pace_wait_ms(99_000, 5000, 400, 0.0) == 400  # a clock step never waits longer than an interval
    assert 10 <= agent.tick_seconds(10, 0.0) < agent.tick_seconds(10, 0.99) <= 12.5


def test_the_pointer_is_refused_unless_it_names_a_content_addressed_key():
    assert rollout.parse_pointer(json.dumps(PTR._asdict())) == PTR
    for bad in (
        {**PTR._asdict(), "sha256": "B" * 64},
        {**PTR._asdict(), "key": "bundles/latest.tar.gz"},
        {**PTR._asdict(), "bucket": "../x"},
    ):
        with pytest.raises(ValueError):
            rollout.parse_pointer(json.dumps(bad))


def test_waves_are_deterministic_and_spread_over_the_window():
    delays = [rollout.wave_delay(f"compute-{i:03d}", B) for i in range(200)]
    assert delays == [rollout.wave_delay(f"compute-{i:03d}", B) for i in range(200)]
    assert all(0 <= d < rollout.WAVE_SECONDS for d in delays) and max(delays) - min(delays) > 50
    assert delays != [rollout.wave_delay(f"compute-{i:03d}", A) for i in range(200)]


def test_the_waves_window_follows_the_membership_size_up_to_its_most():
    assert rollout.wave_window(rollout.WAVE_FULL_AT) == rollout.wave_window(4096) == rollout.WAVE_SECONDS
    assert rollout.wave_window(256) == rollout.WAVE_SECONDS / 2 and rollout.wave_window(0) == 0
    for members in (5, 64, 300):
        window = rollout.wave_window(members)
        delays = [rollout.wave_delay(f"compute-{i:03d}", B, window) for i in range(members)]
        assert all(0 <= d < max(window, 0.001) for d in delays)
    assert rollout.wave_delay("compute-001", B, 0) == 0  # no window: at once


def st(bundle=B, phase="ready", ok=True, refused=None):
    return {"bundle": bundle, "phase": phase, "ok": ok, "refused": refused}


def test_the_canaries_verdict():
    assert rollout.canary_verdict(B, {"head": st(), "compute-000": st()}).state == "done"
    assert rollout.canary_verdict(B, {"head": st(), "compute-000": st(A)}).state == "wait"
    assert rollout.canary_verdict(B, {"head": st(), "compute-000": None}).state == "wait"
    assert rollout.canary_verdict(B, {"head": st(), "compute-000": st(phase="failed", ok=False)}).state == "wait"
    halt = rollout.canary_verdict(B, {"head": st(), "compute-000": st(A, refused={"sha256": B, "reason": "x"})})
    assert halt.state == "halt" and "compute-000" in halt.reason
    # a refusal of an older bundle does not halt this one
    assert rollout.canary_verdict(B, {"head": st(), "compute-000": st(refused={"sha256": A})}).state == "done"


def test_when_a_node_moves():
    done, wait = rollout.Verdict("done"), rollout.Verdict("wait", "w")
    halt = rollout.Verdict("halt", "refused on canary compute-000")
    move = rollout.next_move
    assert move("compute-005", B, PTR, {}, done, 0, 999).action == "stay"  # runs it already
    assert move("compute-005", A, None, {}, None, None, 0).action == "stay"  # no pointer yet
    assert move("head", A, PTR, {}, None, None, 0).action == "switch"  # canaries go first, unasked
    assert move("compute-000", A, PTR, {}, wait, None, 0).action == "switch"
    assert move("compute-005", A, PTR, {}, None, None, 0).action == "wait"  # statuses not read yet
    assert move("compute-005", A, PTR, {}, wait, None, 0).action == "wait"
    delay = rollout.wave_delay("compute-005", B)
    assert move("compute-005", A, PTR, {}, done, 100, 100 + delay - 0.01).action == "wait"
    assert move("compute-005", A, PTR, {}, done, 100, 100 + delay).action == "switch"
    assert move("compute-005", A, PTR, {}, halt, 100, 1e9).action == "halted"  # never fetched
    # a small cluster's waves are as short as its size allows: 5 members spread over under a second
    small = rollout.wave_delay("compute-005", B, rollout.wave_window(5))
    assert small < rollout.wave_window(5) < 1 and small <= delay
    assert move("compute-005", A, PTR, {}, done, 100, 100 + small, members=5).action == "switch"
    assert move("compute-000", A, PTR, {B: "self-check failed"}, wait, None, 0).action == "halted"  # not retried
    # a canary that moved rolls back when the other canary refused it; without a previous bundle it stays
    assert move("head", B, PTR, {}, halt, None, 0, previous=A) == rollout.Move("rollback", halt.reason)
    assert move("head", B, PTR, {}, halt, None, 0, previous="").action == "stay"


def test_drift_is_a_change_of_the_boot_steps_the_node_booted_with():
    assert rollout.drift("d1", "d1", B) is None
    assert rollout.drift("d1", "d2", B) == f"boot steps changed in {B[:12]}: replace when idle"
    assert rollout.drift("", "d2", B) is None  # nothing known of the boot: no claim


def test_the_heads_slurm_states_file_is_what_its_status_reads():
    assert slurm.states_file_text(slurm.summary("idle compute-[000-001]\n")) == '"idle": "compute-[000-001]"\n'


IDENTITY = {"node": "compute-001", "ip": "10.0.0.6", "instanceId": "i-0abc", "hostsVersion": 2}


def test_the_status_carries_the_bundle_version_and_drift_within_4000_bytes():
    doc = json.loads(
        status.status(
            IDENTITY,
            "ready",
            True,
            "m",
            bundle=B,
            log_tail=['x"' * 150] * 40,
            now=0,
            extra={"drifted": "boot steps changed"},
        )
    )
    assert (doc["bundle"], doc["agentVersion"], doc["protocol"], doc["drifted"]) == (B, "1", 1, "boot steps changed")
    assert doc["updated"] == "1970-01-01T00:00:00Z" and doc["step"] == "sync" and doc["phase"] == "ready"
    assert len(json.dumps(doc)) <= 4000 and 0 < len(doc["logTail"]) < 15 and len(doc["logTail"][0]) == 200


def test_the_agent_reads_its_own_protocol_and_the_one_before_only():
    assert status.read(json.dumps({"phase": "ready"})) is not None  # the bash agent's (protocol 0)
    assert status.read(json.dumps({"phase": "ready", "protocol": 1})) is not None
    assert status.read(json.dumps({"phase": "ready", "protocol": 2})) is None
    assert status.read("not json") is None


def test_the_canaries_are_the_head_and_the_memberships_first_compute_node_whatever_the_groups():
    assert rollout.canaries_of(["gpu-000", "compute-001", "compute-000"]) == ("head", "compute-000")
    assert rollout.canaries_of(["gpu-1000", "gpu-002", "gpu-999"]) == ("head", "gpu-002")  # a hole; number order
    assert rollout.canaries_of([]) == ("head",)
    assert rollout.next_move("gpu-002", A, PTR, {}, None, None, 0, canaries=("head", "gpu-002")).action == "switch"
    assert rollout.next_move("compute-000", A, PTR, {}, None, None, 0, canaries=("head", "gpu-002")).action == "wait"
