"""Running nodes upgrade in place (issue 18): a new bundle published as `pulumi up` would (uploaded to the bucket,
the pointer /hpcc/box/bundle updated) reaches every node within 3 minutes, canaries first, while a job started
before runs on and finishes; a bundle failing its self-check stops at the canaries and is rolled back; a bundle
that changes a boot step marks the running nodes drifted and re-runs nothing. On the shared fleet box
(tests/box/shared.py): each test publishes its bundle from the planned one, and the planned one is published again
after it (every node follows it back: the baseline)."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from hpcc_contract.names import bundle_key
from hpcc_contract.version import AGENT_VERSION
from tests.box import bundles
from tests.box.cloud import FleetBox
from tests.box.node import node_env

pytestmark = [pytest.mark.box, pytest.mark.long]

VERSION = 'AGENT_VERSION = "{v}"\nPROTOCOL = 1\nACCEPTED_PROTOCOLS = (PROTOCOL - 1, PROTOCOL)\n'
FAILING_SELF_CHECK = (
    '    node = state.parse_state(state.read_text(config.path("node")) or "")\n',
    "    raise RuntimeError('this bundle cannot run here')\n",
)  # first line of agent.self_check


def publish(box: FleetBox, packed: bytes, sha: str) -> float:
    """What `pulumi up` does (the harness's publish_bundle): the archive at its content-addressed key, the pointer."""
    pointer = json.dumps({"sha256": sha, "bucket": box.plan()["bundleBucket"], "key": bundle_key(sha)})
    box.undo("the planned bundle published again", box.publish_bundle, key="bundle")
    box.publish_bundle(archive=packed, pointer=pointer)
    return time.time()


def role_scripts(box: FleetBox) -> dict[str, str]:
    return box.plan()["roleScripts"]


def wait_for(box: FleetBox, what: str, check, timeout: float) -> dict[str, float]:
    """Poll every node's status until check(status) holds for all; the time each first did."""
    first: dict[str, float] = {}
    deadline = time.time() + timeout
    while len(first) < len(box.nodes):
        now = time.time()  # one time a round: nodes first seen in the same round are tied, whatever the list order
        for n in box.nodes:
            if n.name not in first and check(box.status(n.name)):
                first[n.name] = now
        if time.time() > deadline:
            pytest.fail(
                f"{what}: only {sorted(first)} after {timeout} s\n"
                + "\n".join(
                    json.dumps({k: v for k, v in box.status(n.name).items() if k != 'logTail'}) for n in box.nodes
                )
                + "\n"
                + box.diagnose()
            )
        time.sleep(1)
    return first


def wait_for_ranks(box: FleetBox, job: subprocess.Popen, nodes: list, command: str, timeout: float = 60) -> None:
    """Until the job's rank runs `command` on every node (pgrep), or fail naming the nodes without one."""
    deadline = time.time() + timeout
    while missing := [n.name for n in nodes if n.run("pgrep", "-f", command).returncode != 0]:
        if job.poll() is not None or time.time() > deadline:
            raise AssertionError(f"no rank running {command!r} on {missing}: {job.poll()=}\n{box.diagnose()}")
        time.sleep(0.5)


@pytest.fixture
def box(fleet):
    return fleet


def test_a_new_bundle_reaches_every_node_canaries_first_while_a_job_runs_on(box, record_property):
    before = {n.name: box.status(n.name) for n in box.nodes}
    old = before["head"]["bundle"]
    hosts_before = {n.name: n.file("/etc/hpcc/hosts").read_text() for n in box.nodes}
    assert old == box.plan()["bundleSha256"] and all(s["bundle"] == old for s in before.values()), before
    c0, c1 = box.node("a-000"), box.node("a-001")
    finish = box.workdir / "upgrade-job-finish"  # the job runs until the rollout is over (at most 15 minutes)
    finish.unlink(missing_ok=True)
    job = subprocess.Popen(
        box.head.enter(
            "mpirun",
            "--allow-run-as-root",
            "-H",
            f"{c0.ip}:1,{c1.ip}:1",
            "bash",
            "-c",
            f'while [ ! -e {finish} ] && [ $SECONDS -lt 900 ]; do sleep 1; done; echo "finished $(hostname)"',
        ),
        env=node_env(box.head),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    box.undo("the job stopped", lambda: (finish.touch(), job.kill()))
    wait_for_ranks(box, job, [c0, c1], str(finish))
    packed, new = bundles.build(role_scripts(box), {"hpcc_contract/version.py": VERSION.format(v="2")})
    published = publish(box, packed, new)
    reached = wait_for(
        box, "agent 2 everywhere", lambda s: s.get("bundle") == new and s.get("agentVersion") == "2", timeout=420
    )
    seconds = max(reached.values()) - published
    record_property("upgrade_seconds", round(seconds, 1))
    print(
        f"\nbundle {new[:12]} on every node {seconds:.1f} s after publishing; "
        + ", ".join(f"{k} {v - published:.1f} s" for k, v in sorted(reached.items(), key=lambda kv: kv[1]))
    )
    canaries = max(reached["head"], reached["a-000"])  # the head and the first compute node by name
    assert all(canaries <= t for name, t in reached.items() if name not in ("head", "a-000")), reached
    assert job.poll() is None  # the job runs on through the switch
    finish.touch()
    out, err = job.communicate(timeout=60)
    assert job.returncode == 0 and out.count("finished") == 2, err[-2000:]
    # the membership carrying the pointer applied everywhere (a node may switch before it reads that generation)
    wait_for(box, "the pointer's membership", lambda s: s["hostsVersion"] > before[s["node"]]["hostsVersion"], 120)
    for n in box.nodes:
        assert n.file("/opt/hpcc/current").resolve().name == new
        # the membership carries the bundle pointer, so its generation moved on; the hosts did not
        assert (
            box.status(n.name)["drifted"] is None
            and box.status(n.name)["hostsVersion"] > before[n.name]["hostsVersion"]
        )
        assert n.file("/etc/hpcc/hosts").read_text() == hosts_before[n.name]


def test_a_bundle_failing_its_self_check_stops_at_the_canaries_and_is_rolled_back(box):
    good = box.status("a-001")["bundle"]
    agent_py = (bundles.ROOT / "hpcc_node/agent.py").read_text().replace(*FAILING_SELF_CHECK)
    assert "this bundle cannot run here" in agent_py
    packed, bad = bundles.build(
        role_scripts(box), {"hpcc_contract/version.py": VERSION.format(v="3"), "hpcc_node/agent.py": agent_py}
    )
    publish(box, packed, bad)
    wait_for(
        box,
        "the head reporting the halt",
        lambda s: (
            s["node"] != "head" or s.get("rollout", "").startswith(f"halted: bundle {bad[:12]} refused on canary")
        ),
        120,
    )
    refusals = [box.status(n)["refused"] for n in ("head", "a-000") if box.status(n).get("refused")]
    assert refusals and all(r["sha256"] == bad and "this bundle cannot run here" in r["reason"] for r in refusals)
    assert "this bundle cannot run here" in box.status("head")["rollout"]
    # longer than the waves (rollout.wave_window: under a second at this size) and two agent ticks (at most 12.5 s
    # each): nobody else moves
    time.sleep(30)
    for n in box.nodes:
        st = box.status(n.name)
        assert st["bundle"] == good and st["agentVersion"] == AGENT_VERSION and st["phase"] == "ready", st
        assert n.file("/opt/hpcc/current").resolve().name == good
    assert not box.node("a-001").file(f"/opt/hpcc/bundles/{bad}").exists()  # never fetched
    assert "rollout" not in box.status("a-001")  # reported once, by the head


def test_a_bundle_changing_a_boot_step_marks_nodes_drifted_and_reruns_nothing(box):
    logs = {n.name: box.log(n).count("] start") for n in box.nodes}
    scripts = role_scripts(box)  # the head's and each node group's (roles/<group>.sh)
    changed = {
        key: script if key == "head" else script.replace("# --- ssh", "# --- ssh\nHPCC_NEW_BOOT_STEP=1", 1)
        for key, script in scripts.items()
    }
    assert all(changed[key] != scripts[key] for key in scripts if key != "head") and set(scripts) > {"head"}
    packed, new = bundles.build(changed, {"hpcc_contract/version.py": VERSION.format(v="4")})
    publish(box, packed, new)
    wait_for(box, "bundle 4 everywhere", lambda s: s.get("bundle") == new, 420)
    for n in box.nodes:
        st = box.status(n.name)
        if n.name == "head":
            assert st["drifted"] is None
        else:
            assert st["drifted"] == f"boot steps changed in {new[:12]}: replace when idle", st
        assert box.log(n).count("] start") == logs[n.name]  # no boot step ran again
    ran = box.head.run("hpcc-mpirun", "--map-by", "ppr:1:node", "hostname", timeout=120)
    assert ran.returncode == 0 and len(ran.stdout.split()) == len(box.compute), ran.stderr
