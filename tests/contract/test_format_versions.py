"""Every shared format carries its version (hpcc_contract/formats.py), and an old reader meeting a newer writer's
document says so by name and keeps what it had: the node groups (controller, head's Slurm step), membership (agent,
bootstrap's reader), status (controller, `hpcc status`), ledger items (controller, operator commands) and the
settings text (agent in Python, bootstrap in bash)."""

from __future__ import annotations

import io
import json
import logging
import re
import shlex

import boto3
import pytest
from moto import mock_aws

from hpcc_contract import formats, groups
from hpcc_contract.ledger import KEY, table_definition
from hpcc_contract.names import MEMBERSHIP_KEY
from hpcc_contract.settings import NewerSettings, parse_text
from hpcc_node import hosts, slurm, status
from hpcc_node.controller import membership, observe
from hpcc_node.controller.__main__ import ConfigError, parse_groups
from hpcc_node.controller.ledger import Ledger, read_slot
from hpcc_node.controller.model import Slot
from infra.ops.status.cluster import NodeStatus, apply_status
from tests.node.agent_support import SETTINGS, STATE, FakeAws, P, make_agent, membership_doc
from tests.render.bootstrap_shell import context, run

NEWER = "format 2 is newer than this hpcc reads (1)"
NEWER_RE = re.escape(NEWER)
FOUR_HOSTS = "10.0.0.4\n10.0.0.5\n10.0.0.6\n10.0.0.7"


def test_each_format_has_a_version_and_every_writer_stamps_it():
    assert formats.VERSIONS == {
        "node groups": 1,
        "membership": 1,
        "membership delta": 1,
        "status": 1,
        "ledger item": 1,
        "settings": 1,
        "bundle manifest": 2,  # 2: a script for each node group (hpcc_contract/formats.py); the agent reads 1 and 2
        "dcgm counters": 1,
        "image cache entry": 1,
        "image usage record": 1,
        "image request": 1,
        "image answer": 1,
        "prewarm": 1,
        "image listing": 1,
    }  # what running clusters carry: bump one only with a reader of the new one
    assert json.loads(groups.dumps([]))[formats.FORMAT_KEY] == formats.NODE_GROUPS
    assert json.loads(membership.encode({}, 3))[formats.FORMAT_KEY] == formats.MEMBERSHIP
    assert membership.delta({}, {"nodes": []}, 3)[formats.FORMAT_KEY] == formats.MEMBERSHIP_DELTA
    body = status.status(
        {"node": "n", "ip": "10.0.0.5", "instanceId": "i-1", "hostsVersion": 1},
        "ready",
        True,
        "",
        bundle="",
        log_tail=[],
    )
    assert json.loads(body)[formats.FORMAT_KEY] == formats.STATUS
    assert json.loads(membership.status_body("n", "i-1", True))[formats.FORMAT_KEY] == formats.STATUS
    assert "FORMAT=" not in SETTINGS  # version 1 of the settings is the text without the line (older nodes read it)


@pytest.mark.parametrize("found,version", [(None, 1), (1, 1), ("1", 1), (3, 3), ("12", 12)])
def test_a_stamp_is_a_positive_version_and_none_is_one(found, version):
    assert formats.version_of(found) == version


@pytest.mark.parametrize("found", [0, -1, True, "01", "x", 1.5, [1]])
def test_anything_else_is_no_version(found):
    with pytest.raises(formats.BadFormat):
        formats.version_of(found)


def applied_agent(tmp_path):
    """A compute node's agent that applied generation 1 of a four-node cluster, and its AWS."""
    aws = FakeAws()
    aws.members(FOUR_HOSTS)
    aws.put(f"{P}/settings", SETTINGS)
    agent, _ = make_agent(tmp_path, aws)
    agent.tick()
    return aws, agent


def newer(doc: dict) -> dict:
    return {**doc, formats.FORMAT_KEY: 2}


def test_node_groups_of_a_newer_format_are_refused_by_each_reader_naming_the_version():
    text = json.dumps(newer(json.loads(groups.dumps([{"name": "gpu", "count": 1}]))))
    with pytest.raises(groups.NewerGroups, match=f"node groups {NEWER_RE}"):
        groups.loads(text)
    with pytest.raises(ConfigError, match=f"/hpcc/c/groups: node groups {NEWER_RE}"):
        parse_groups(text, "/hpcc/c/groups")
    with pytest.raises(slurm.GroupsError, match="newer"):
        slurm.parse_groups(text)


def test_a_newer_membership_is_refused_by_the_agent_which_says_so_in_its_status_until_a_known_one_comes(tmp_path):
    aws, agent = applied_agent(tmp_path)
    assert agent.node.hosts_version == 1
    aws.s3.objects[(STATE, MEMBERSHIP_KEY)] = json.dumps(newer(membership_doc(FOUR_HOSTS + "\n10.0.0.8", 2))).encode()
    agent.tick()
    agent.tick()
    assert agent.node.hosts_version == 1  # the applied membership stays
    said = aws.status("compute-001")["newer"]
    assert len(said) == 1 and f"membership {NEWER}" in said[0]
    assert (tmp_path / "compute-001/log").read_text().count(f"membership {NEWER}") == 1  # once, not every tick
    row = apply_status(
        NodeStatus("compute-001", instance_id=aws.status("compute-001")["instance_id"]), aws.status("compute-001")
    )
    assert f"refused: membership.json: membership {NEWER}" in row.message  # hpcc status shows it
    aws.members(FOUR_HOSTS + "\n10.0.0.8")  # generation 2 again, of this format
    agent.tick()
    assert agent.node.hosts_version == 2 and "newer" not in aws.status("compute-001")


def test_the_bootstraps_membership_reader_refuses_a_newer_one_by_name(tmp_path):
    path = tmp_path / "membership.json"
    path.write_text(json.dumps(newer(membership_doc(FOUR_HOSTS, 1))))
    out, err = io.StringIO(), io.StringIO()
    assert hosts.main([str(path), "compute-001", "i-1"], out, err) == 2
    assert f"membership {NEWER}" in err.getvalue() and out.getvalue() == ""


def test_a_newer_status_is_no_verdict_for_the_controller_which_logs_it_and_hpcc_status_names_it(caplog):
    arn = "arn:aws:ec2:us-east-1:123456789012:instance/i-0abc"
    body = json.dumps(newer(json.loads(membership.status_body("gpu-000", "i-0abc", False, "xid", "Xid 79"))))
    with caplog.at_level(logging.WARNING, logger="hpcc.controller"):
        assert observe.verdict(body.encode(), membership.status_key(arn)) is None  # never a failure read wrongly
    assert f"status {NEWER}" in caplog.text
    assert observe.verdict(
        membership.status_body("gpu-000", "i-0abc", False, "xid", "Xid 79"), membership.status_key(arn)
    )
    row = apply_status(NodeStatus("gpu-000", instance_id="i-0abc"), json.loads(body))
    assert row.phase == "unknown" and f"status {NEWER}" in row.message
    assert status.read(body) is None  # another node's agent: no verdict either


@pytest.fixture
def ddb():
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(**table_definition("t"))
        yield client


def test_a_newer_ledger_item_stops_the_controller_and_the_operator_commands_by_name(ddb):
    ledger = Ledger(ddb, "t", "head", lambda: 1000.0)
    ledger.acquire()
    ledger.put_slot(Slot("gpu-000", "gpu", 0), state="ready")
    item = ddb.get_item(TableName="t", Key={KEY: {"S": "slot#gpu-000"}})["Item"]
    assert json.loads(item["doc"]["S"])[formats.FORMAT_KEY] == formats.LEDGER_ITEM
    assert ledger.load().slots["gpu-000"].state == "ready"
    item["doc"] = {"S": json.dumps(newer(json.loads(item["doc"]["S"])))}
    ddb.put_item(TableName="t", Item=item)
    with pytest.raises(formats.NewerFormat, match=f"ledger item slot#gpu-000 {NEWER_RE}"):
        ledger.load()
    with pytest.raises(formats.NewerFormat, match="slot#gpu-000"):
        read_slot(ddb, "t", "gpu-000")  # hpcc replace reads it first: nothing is written


def test_the_operator_commands_turn_a_newer_format_into_a_message_and_exit_1():
    import typer

    from infra.ops.cli_support import ops as _ops

    def load():
        raise formats.NewerFormat(f"ledger item slot#gpu-000 {NEWER}")

    with pytest.raises(typer.Exit) as exit_info:
        _ops(load)
    assert exit_info.value.exit_code == 1


def test_a_newer_settings_text_is_refused_as_such_by_python_and_bash_before_its_unknown_keys(tmp_path):
    text = "FORMAT=2\n" + SETTINGS + "A_KEY_FROM_LATER=1\n"
    with pytest.raises(NewerSettings, match=f"settings {NEWER_RE}"):
        parse_text(text)
    assert parse_text("FORMAT=1\n" + SETTINGS)["FORMAT"] == ["1"]  # this version, spelled out: read
    out = run(["settings"], f"apply_settings {shlex.quote(text)} || echo refused", context())
    assert out.stdout.split() == ["refused"] and f"settings {NEWER}" in out.stderr, out.stderr
    ok = run(["settings"], f"apply_settings {shlex.quote('FORMAT=1' + chr(10) + SETTINGS)} && echo ok", context())
    assert ok.stdout.split() == ["ok"], ok.stderr


def test_the_agent_keeps_its_settings_and_says_why_when_they_are_of_a_newer_format(tmp_path):
    aws, agent = applied_agent(tmp_path)
    aws.put(f"{P}/settings", "FORMAT=2\n" + SETTINGS.replace("SLOTS=8", "SLOTS=16"))
    agent.tick()
    assert agent.settings["SLOTS"] == "8"
    assert any(f"settings {NEWER}" in why for why in aws.status("compute-001")["newer"])


def test_a_bundle_manifest_of_a_newer_format_is_refused_by_the_agent_reading_it(tmp_path):
    from hpcc_node import upgrade

    (tmp_path / "manifest.json").write_text(json.dumps({"format": 3, "roles": {}}))
    with pytest.raises(
        formats.NewerFormat, match=re.escape("bundle manifest format 3 is newer than this hpcc reads (2)")
    ):
        upgrade.manifest(str(tmp_path))
    assert upgrade.boot_digest(str(tmp_path), "compute", "compute-000") == ""  # no digest of a manifest it cannot read
