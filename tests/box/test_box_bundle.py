"""Nodes boot from the bundle (infra/bundle.py) served by the box's S3, through the loader in their user data;
a bundle whose hash does not match is refused; user hooks run from the bundle, and a failing one fails only its
node, named (a hook's failure is reported, never replaced: the controller leaves compute-001 failed). Its own box
(cpu, a group of two compute nodes its controller launches, an onNodeStart and an onNodeReady hook); runs by
itself."""

from __future__ import annotations

import hashlib
import json
import os
import re

import pytest

from hpcc_contract.names import boot_key, boot_script
from tests.box.cloud import FleetBox
from tests.box.machine import leftovers

pytestmark = [pytest.mark.box, pytest.mark.long]

START_HOOK = """#!/bin/bash
# what a hook sees: its environment, written where the test reads it
env | sort > /etc/hpcc/hook-start.env
echo "start hook on $HPCC_NODE"
"""
READY_HOOK = """#!/bin/bash
echo "ready hook on $HPCC_NODE ($HPCC_ROLE)"
if [ "$HPCC_NODE" = compute-001 ]; then echo "boom: compute-001 fails its own check" >&2; exit 3; fi
touch /etc/hpcc/hook-ready.done
"""


@pytest.fixture(scope="module")
def booted(tmp_path_factory):
    hooks_dir = tmp_path_factory.mktemp("hooks")
    (hooks_dir / "start-env.sh").write_text(START_HOOK)
    (hooks_dir / "ready-check.sh").write_text(READY_HOOK)
    for f in hooks_dir.iterdir():
        f.chmod(0o644)  # the bundle makes them executable, not the user's files
    box = FleetBox(
        profile="cpu",
        groups=[{"name": "compute", "count": 2}],
        hooks={"onNodeStart": [str(hooks_dir / "start-env.sh")], "onNodeReady": [str(hooks_dir / "ready-check.sh")]},
    )
    box.start()
    try:
        codes = box.boot(timeout=420)  # a loaded CI machine: the head, then the controller's launch and two boots
        print("\n" + box.phases.report("hooks box"))
        yield box, codes
    finally:
        box.stop()
    assert leftovers() == []


def test_nodes_boot_from_the_bundle_the_program_stored(booted):
    box, codes = booted
    sha = box.plan()["bundleSha256"]
    assert codes["head"] == 0 and codes["compute-000"] == 0, f"{codes}\n{box.diagnose()}"
    for name in ("head", "compute-000"):
        node = box.node(name)
        current = os.readlink(node.file("/opt/hpcc/current"))
        assert current == f"/opt/hpcc/bundles/{sha}", current
        # what runs is the bundle's own bytes: the role script as the plan wrote it, the manifest naming its digest
        key = boot_key(name)  # the head's script, or its group's
        script = node.file(f"/opt/hpcc/bundles/{sha}/{boot_script(key)}").read_bytes()
        assert script.decode() == box.plan()["roleScripts"][key]
        manifest = json.loads(node.file(f"/opt/hpcc/bundles/{sha}/manifest.json").read_text())
        assert manifest["roles"][key]["bootDigest"] == hashlib.sha256(script).hexdigest()
        status = box.status(name)
        assert (status["phase"], status["ok"], status["bundle"]) == ("ready", True, sha), status
        log = box.log(node)
        found = re.search(rf"\[loader\] bundle {sha} fetched and checked: (\d+) bytes in (\d+) ms", log)
        assert found, log[:2000]
        print(
            f"[bundle] {name}: pointer read, {found.group(1)} bytes fetched, checked and unpacked in "
            f"{int(found.group(2)) / 1000:.2f} s; loader {len(box.scripts()[node.role])} bytes"
        )
        assert log.index("[loader]") < log.index("[identify]")  # the loader ran first, then the bundle's script


def test_hooks_run_from_the_bundle_with_a_clean_environment(booted):
    box, _ = booted
    for name in ("head", "compute-000"):
        node = box.node(name)
        env = dict(
            line.split("=", 1) for line in node.file("/etc/hpcc/hook-start.env").read_text().splitlines() if "=" in line
        )
        assert (env["HPCC_NODE"], env["HPCC_HOOK"], env["HPCC_CLUSTER"]) == (name, "onNodeStart", "box"), env
        # env -i: nothing of the bootstrap's own environment (the box's AWS endpoint and keys among it)
        assert not {"AWS_ENDPOINT_URL", "AWS_SECRET_ACCESS_KEY", "HPCC_SKIP_STEPS"} & set(env), sorted(env)
        assert node.file("/etc/hpcc/hook-ready.done").exists()
        log = box.log(node)
        assert f"[hook:start-env.sh] start hook on {name}" in log and "[hook:ready-check.sh] ready hook on" in log


def test_a_failing_ready_hook_fails_only_its_node_with_the_hook_named(booted):
    box, codes = booted
    assert codes == {"head": 0, "compute-000": 0, "compute-001": 1}, f"{codes}\n{box.diagnose()}"
    status = box.status("compute-001")
    assert (status["phase"], status["ok"], status["class"], status["step"]) == (
        "failed",
        False,
        "hook",
        "hook:ready-check.sh",
    ), status
    assert "onNodeReady hook ready-check.sh failed (exit 3)" in status["message"], status
    assert any("boom: compute-001 fails its own check" in line for line in status["logTail"]), status["logTail"]
    assert not box.node("compute-001").file("/etc/hpcc/hook-ready.done").exists()
    for name in ("head", "compute-000"):
        assert box.status(name)["phase"] == "ready"


def test_a_bundle_whose_hash_does_not_match_is_refused_and_never_run(booted):
    box, _ = booted
    node = box.node("compute-000")
    good = box.plan()["bundleSha256"]
    tampered = b"#!/bin/bash\ntouch /etc/hpcc/tampered-ran\n"
    claimed = hashlib.sha256(b"what the pointer says").hexdigest()
    pointer = json.dumps({"sha256": claimed, "bucket": box.plan()["bundleBucket"], "key": f"bundles/{claimed}.tar.gz"})
    # the node's running agent would see the new pointer too and write its own status (its refusal of a bad
    # pointer is tests/test_agent_tick.py's): it is held still while the loader's verdict is read
    agent = node.file("/run/hpcc-sync.pid").read_text().strip()
    node.run("kill", "-STOP", agent, check=True)
    box.publish_bundle(archive=tampered, pointer=pointer)
    try:
        assert box.rerun(node) == 1
        status = box.status(node.name)
        assert (status["phase"], status["ok"], status["class"], status["step"]) == ("failed", False, "bundle", "bundle")
        assert (
            f"bundles/{claimed}.tar.gz refused: expected sha256 {claimed}, got "
            f"{hashlib.sha256(tampered).hexdigest()}" in status["message"]
        ), status
        assert not node.file(f"/opt/hpcc/bundles/{claimed}").exists()
        assert os.readlink(node.file("/opt/hpcc/current")) == f"/opt/hpcc/bundles/{good}"  # still the good one
        assert not node.file("/etc/hpcc/tampered-ran").exists()
        assert not [p for p in node.file("/opt/hpcc/bundles").iterdir() if p.name.startswith(".new")]
    finally:
        box.publish_bundle()  # the program's pointer again
        node.run("kill", "-CONT", agent)
