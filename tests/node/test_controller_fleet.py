"""EC2 Fleet instant launches: the request (all-or-nothing, one type in one subnet, the ClientToken, the group's
tags, the market) against moto's CreateFleet, and the answer's errors in the failure taxonomy."""

from __future__ import annotations

from dataclasses import replace

import boto3
import pytest
from moto import mock_aws

from hpcc_contract.names import TAG_CLUSTER, TAG_GROUP, TAG_LAUNCH
from hpcc_node.controller import fleet
from hpcc_node.controller.model import Group
from tests.node.controller_fakes import moto_launch_template

GPU = Group("gpu", "p5.48xlarge", 4, launch_template="hpcc-c-compute", subnet_id="subnet-1")


def test_the_request_is_all_or_nothing_for_one_type_in_one_subnet():
    req = fleet.request(GPU, 4, "gpu-1-0", "c")
    assert req["Type"] == "instant" and req["ClientToken"] == "gpu-1-0"
    assert req["OnDemandOptions"] == {
        "SingleInstanceType": True,
        "SingleAvailabilityZone": True,
        "MinTargetCapacity": 4,
    }
    assert req["TargetCapacitySpecification"] == {"TotalTargetCapacity": 4, "DefaultTargetCapacityType": "on-demand"}
    assert fleet.request(GPU, 4, "gpu-1-0", "c", minimum=1)["OnDemandOptions"]["MinTargetCapacity"] == 1  # replacements
    (config,) = req["LaunchTemplateConfigs"]
    assert config["LaunchTemplateSpecification"] == {"LaunchTemplateName": "hpcc-c-compute", "Version": "$Latest"}
    assert config["Overrides"] == [{"InstanceType": "p5.48xlarge", "SubnetId": "subnet-1"}]
    tags = {t["Key"]: t["Value"] for t in req["TagSpecifications"][0]["Tags"]}
    assert tags[TAG_CLUSTER] == "c" and tags[TAG_GROUP] == "gpu"
    assert tags[TAG_LAUNCH] == "gpu-1-0"  # the launch's own token: a restart finds its instances by it
    assert req["TagSpecifications"][0]["ResourceType"] == "instance"  # at creation, never after


@pytest.mark.parametrize(
    "market,capacity_type,options",
    [("capacity-block", "capacity-block", "OnDemandOptions"), ("spot", "spot", "SpotOptions")],
)
def test_capacity_blocks_and_spot_use_their_target_capacity_type(market, capacity_type, options):
    req = fleet.request(replace(GPU, market=market, capacity_reservation_id="cr-1"), 2, "t", "c")
    assert req["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == capacity_type
    assert req[options]["MinTargetCapacity"] == 2
    if market == "capacity-block":
        assert req[options]["CapacityReservationOptions"] == {"UsageStrategy": "use-capacity-reservations-first"}


def test_a_launch_against_moto_returns_tagged_instances_in_the_groups_subnet():
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        subnet = moto_launch_template(ec2, "hpcc-c-compute", {"InstanceType": "p5.48xlarge"})["subnet"]
        out = fleet.launch(ec2, fleet.request(replace(GPU, subnet_id=subnet), 3, "gpu-1-0", "c"))
        assert len(out.instance_ids) == 3 and not out.failure
        found = ec2.describe_instances(InstanceIds=list(out.instance_ids))["Reservations"]
        insts = [i for r in found for i in r["Instances"]]
        assert {i["SubnetId"] for i in insts} == {subnet}
        assert all({"Key": TAG_GROUP, "Value": "gpu"} in i["Tags"] for i in insts)
        assert all({"Key": TAG_LAUNCH, "Value": "gpu-1-0"} in i["Tags"] for i in insts)


def test_insufficient_capacity_is_the_launch_class_and_the_real_cause_is_kept():
    answer = {
        "Instances": [],
        "Errors": [
            {"ErrorCode": fleet.UNFULFILLED[0], "ErrorMessage": fleet.UNFULFILLED[1]},
            {"ErrorCode": "InsufficientInstanceCapacity", "ErrorMessage": "no p5 in use1-az4"},
        ],
    }
    out = fleet.parse(answer)
    assert out.failure == "launch" and out.code == "InsufficientInstanceCapacity" and out.transient
    assert out.evidence.startswith("insufficient capacity")
    throttled = fleet.parse({"Errors": answer["Errors"] + [{"ErrorCode": "RequestLimitExceeded"}]})
    assert throttled.code == "RequestLimitExceeded"
    assert fleet.parse({"Errors": [{"ErrorCode": "VcpuLimitExceeded"}]}).evidence.startswith("quota")
    bad = fleet.parse({"Errors": [{"ErrorCode": "InvalidLaunchTemplateName.NotFoundException"}]})
    assert bad.failure == "launch" and not bad.transient  # alerted: no retry fixes it


def test_an_api_error_is_an_outcome_not_an_exception():
    class Refused(Exception):
        response = {"Error": {"Code": "RequestLimitExceeded", "Message": "slow down"}}

    class EC2:
        def create_fleet(self, **_):
            raise Refused()

    out = fleet.launch(EC2(), fleet.request(GPU, 1, "t", "c"))
    assert out.instance_ids == () and out.code == "RequestLimitExceeded" and out.transient
