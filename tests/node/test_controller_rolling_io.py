"""A rolling replacement's AWS side in moto: the launch names the published template version and tags each instance
with it and the launch spec, observe reads them back with the IMDS hop limit, and the executor applies a hop limit
in place (ModifyInstanceMetadataOptions). The groups document carries the new fields to the controller's Group."""

from __future__ import annotations

from dataclasses import replace

import boto3

from hpcc_contract.names import TAG_LAUNCH_SPEC, TAG_TEMPLATE_VERSION
from hpcc_node.controller import fleet, observe
from hpcc_node.controller.act import Executor
from hpcc_node.controller.ledger import Ledger
from hpcc_node.controller.model import METADATA, READY, Action, Group, Slot, Snapshot, Why
from tests.node.conftest import LEDGER_TABLE, STATE_BUCKET
from tests.node.controller_fakes import moto_launch_template

GPU = Group(
    "gpu",
    "p5.48xlarge",
    2,
    launch_template="hpcc-c-gpu",
    lt_version=2,
    spec="spec-2",
    update_strategy="rolling",
)


def tags(req):
    return {t["Key"]: t["Value"] for t in req["TagSpecifications"][0]["Tags"]}


def test_the_launch_names_the_published_version_and_tags_it_and_the_spec():
    req = fleet.request(GPU, 2, "gpu-1-0", "c")
    assert req["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["Version"] == "2"  # not $Latest
    assert tags(req)[TAG_TEMPLATE_VERSION] == "2" and tags(req)[TAG_LAUNCH_SPEC] == "spec-2"
    unsaid = replace(GPU, lt_version=0, spec="")  # a program before versions: as before
    old = fleet.request(unsaid, 2, "gpu-1-0", "c")
    assert old["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["Version"] == "$Latest"
    assert TAG_TEMPLATE_VERSION not in tags(old) and TAG_LAUNCH_SPEC not in tags(old)


def test_observe_reads_each_instances_version_spec_and_hop_limit_and_the_executor_applies_a_hop_limit(ddb):
    ec2 = boto3.client("ec2", region_name="us-east-1")
    made = moto_launch_template(ec2, "hpcc-c-gpu", {"InstanceType": "p5.48xlarge"})
    subnet = made["subnet"]
    data = {"ImageId": made["image"], "InstanceType": "p5.48xlarge", "EbsOptimized": True}  # moto copies nothing
    ec2.create_launch_template_version(LaunchTemplateName="hpcc-c-gpu", LaunchTemplateData=data)
    out = fleet.launch(ec2, fleet.request(replace(GPU, subnet_id=subnet), 2, "gpu-1-0", "c"))
    assert len(out.instance_ids) == 2, out
    seen = observe.instances(ec2, "c")
    assert {(i.template_version, i.launch_spec) for i in seen.values()} == {(2, "spec-2")}
    assert {i.hop_limit for i in seen.values()} == {1}  # EC2's default, as DescribeInstances says it

    clock = lambda: 1_000_000.0  # noqa: E731
    ledger = Ledger(ddb, LEDGER_TABLE, "head-1", clock)
    assert ledger.acquire()
    first = out.instance_ids[0]
    slot = Slot("gpu-000", "gpu", 0, first, READY, 0.0)
    executor = Executor(ec2, ledger, None, STATE_BUCKET, "c", [GPU], clock)
    act = Action(METADATA, "gpu", "gpu-000", first, Why("", "IMDS hop limit 1 -> 2"), {"hop_limit": 2})
    executor.run([act], Snapshot(now=clock(), slots={"gpu-000": slot}))
    after = observe.instances(ec2, "c")
    assert after[first].hop_limit == 2 and after[out.instance_ids[1]].hop_limit == 1  # that instance only
    [inst] = [i for r in ec2.describe_instances(InstanceIds=[first])["Reservations"] for i in r["Instances"]]
    assert inst["MetadataOptions"]["HttpTokens"] == "required"  # IMDSv2 stays required
    events = [(e.kind, e.phase) for e in ledger.load().events]
    assert events == [(METADATA, "start"), (METADATA, "done")]  # for hpcc events


def test_the_groups_document_carries_the_roll_to_the_controllers_group():
    from hpcc_contract import groups as groups_format
    from hpcc_node.controller.__main__ import parse_groups

    entry = {
        "name": "gpu",
        "instance_type": "p5.48xlarge",
        "count": 4,
        "lt_version": 7,
        "spec": "abc",
        "metadata_hop_limit": 2,
        "update_strategy": "terminate",
        "max_unavailable": 3,
    }
    [group] = parse_groups(groups_format.dumps([entry]), "/hpcc/c/groups")
    assert (group.lt_version, group.spec, group.metadata_hop_limit) == (7, "abc", 2)
    assert (group.update_strategy, group.max_unavailable) == ("terminate", 3)
    [before] = parse_groups(groups_format.dumps([{"name": "gpu", "instance_type": "p5.48xlarge", "count": 4}]), "p")
    assert before.spec == "" and (before.max_unavailable, before.metadata_hop_limit) == (1, 1)  # nothing rolls


def test_a_field_at_its_default_is_left_out_and_read_back_as_the_same_default():
    """The parameter holds 8 KB for 16 groups at their longest: defaults are not written, and the controller's Group
    has the same ones (hpcc_contract/groups.py DEFAULTS)."""
    import dataclasses

    from hpcc_contract import groups as groups_format
    from hpcc_node.controller.__main__ import parse_groups

    defaults = {f.name: f.default for f in dataclasses.fields(Group)}
    assert {k: defaults[k] for k in groups_format.DEFAULTS} == groups_format.DEFAULTS
    entry = {"name": "gpu", "instance_type": "p5.48xlarge", "count": 2, **groups_format.DEFAULTS}
    text = groups_format.dumps([entry])
    assert not any(f'"{k}"' in text for k in groups_format.DEFAULTS)
    assert parse_groups(text, "p") == [Group("gpu", "p5.48xlarge", 2)]
    assert '"update_strategy":"manual"' in groups_format.dumps([{**entry, "update_strategy": "manual"}])
