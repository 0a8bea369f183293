"""What the embedded AWS refuses: the plan fails with AWS's reason, as `pulumi up` would, never a traceback."""

import pulumi
import pytest

from infra.plan.aws_rules import AwsRejected, check_instance_launch, lustre_ports_missing
from infra.plan.runner import PlanError, plan_config


def test_type_not_offered_in_the_chosen_az_is_refused_naming_the_field(example_config):
    config = example_config("p3dn-bert")
    config["hpcc:cluster"]["availabilityZone"] = "us-east-1a"  # p3dn.24xlarge: us-east-1c/1d only
    with pytest.raises(
        PlanError,
        match=r"cluster.compute.instanceType: p3dn.24xlarge is not offered in us-east-1a "
        r"\(cluster.availabilityZone; offered in: us-east-1c, us-east-1d\)",
    ):
        plan_config(config)


def test_the_embedded_aws_refuses_a_launch_in_an_az_without_the_type_on_its_own():
    """aws_rules checks the program independently: a launch the program lets through is still refused."""
    lt = {"instanceType": "p3dn.24xlarge", "placement": {"groupName": "g", "availabilityZone": "us-east-1a"}}
    with pytest.raises(AwsRejected, match="Unsupported: p3dn.24xlarge is not offered in us-east-1a"):
        check_instance_launch("n", {}, lt, {"g": "cluster"}, "us-east-1a", {"us-east-1c", "us-east-1d"})


def test_without_an_az_the_plan_picks_one_that_offers_every_type(example_config):
    result = plan_config(example_config("p3dn-bert"))
    assert result.outputs["availabilityZone"] == "us-east-1c"


def test_pinned_ami_that_does_not_exist_is_refused(example_config):
    config = example_config("c6i-oneccl")
    config["hpcc:cluster"]["image"] = {"amiId": "ami-0123456789abcdef0"}
    with pytest.raises(PlanError, match="cluster.image"):
        plan_config(config)


def test_lustre_group_without_port_988_is_refused():
    ingress = [{"IpProtocol": "tcp", "FromPort": 1018, "ToPort": 1023, "UserIdGroupPairs": [{"GroupId": "sg-l"}]}]
    assert lustre_ports_missing(ingress, {"sg-l"}) == [988]
    ingress.append({"IpProtocol": "tcp", "FromPort": 988, "ToPort": 988, "UserIdGroupPairs": [{"GroupId": "sg-l"}]})
    assert lustre_ports_missing(ingress, {"sg-l"}) == []


def test_file_system_created_without_lustre_rules_is_refused(example_config, monkeypatch):
    from infra.program.components import security

    monkeypatch.setattr(security, "LUSTRE_PORTS", ((1018, 1023),))
    with pytest.raises(PlanError, match="Lustre LNET network traffic on port\\(s\\) 988"):
        plan_config(example_config("c6i-oneccl"))


def test_data_repository_on_scratch_1_is_refused_by_config_before_aws(example_config):
    from infra.config.parse import ConfigError

    config = example_config("c6i-oneccl")
    config["hpcc:cluster"]["fsx"].update(deploymentType="SCRATCH_1", dataRepositoryPath="s3://bucket/data")
    with pytest.raises(ConfigError) as e:
        plan_config(config)
    assert e.value.problems[0][0] == "cluster.fsx.dataRepositoryPath"


@pytest.fixture
def unit_mocks():
    import boto3

    from infra.plan.embedded_aws import embedded_aws
    from infra.plan.internals import fresh_stack
    from infra.plan.mocks import MotoMocks

    with embedded_aws("us-east-1"):
        fresh_stack()
        pulumi.runtime.set_mocks(MotoMocks("us-east-1"), project="hpcc", stack="unit", preview=False)
        yield boto3.client("ec2", region_name="us-east-1").create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]


@pulumi.runtime.test
def test_security_component_wires_lustre_rules_to_its_groups(unit_mocks):
    """Asserts inside Outputs, so it runs under @pulumi.runtime.test with the moto-backed mocks."""
    from infra.program.components.security import Security, SecurityArgs

    sec = Security("security", SecurityArgs("unit", unit_mocks, ["198.51.100.0/24"]))

    def check(ids):
        nodes, lustre, head = ids
        assert all(i.startswith("sg-") for i in ids) and len(set(ids)) == 3
        # 2 port ranges x (ingress, egress) x (from nodes, from itself), plus the nodes admitting both ranges back
        assert len(sec.lustre_rules) == 10

    return pulumi.Output.all(sec.nodes_sg_id, sec.lustre_sg_id, sec.head_ssh_sg_id).apply(check)


def test_an_instance_moto_refuses_names_the_node_and_ec2_s_reason(example_config, monkeypatch):
    # Instances are created straight in moto's EC2 backend (not through boto3): its refusals still become
    # AWS's answer for the named resource, not a traceback.
    from infra.program.components import compute

    real = compute.aws.ec2.InstanceLaunchTemplateArgs
    monkeypatch.setattr(compute.aws.ec2, "InstanceLaunchTemplateArgs", lambda id, version: real(id=id, version="7"))
    with pytest.raises(PlanError, match=r"cpu-oneccl-(head|compute-\d{3}): .*7"):
        plan_config(example_config("c6i-oneccl"))


def test_a_request_boto3_gets_refused_names_the_resource_and_the_error_code(example_config, monkeypatch):
    from infra.program.components import compute

    # SSM reserves names under /aws/: PutParameter there is refused (a ClientError from boto3).
    class ReservedGroups(compute.Paths):
        def __init__(self, cluster):
            super().__init__(cluster)
            self.groups = "/aws/hpcc-groups"

    monkeypatch.setattr(compute, "Paths", ReservedGroups)
    with pytest.raises(PlanError, match=r"cpu-oneccl-groups-param: \w+: .*/aws/hpcc-groups"):
        plan_config(example_config("c6i-oneccl"))


def test_a_kept_az_that_does_not_offer_a_new_type_is_an_error_naming_both():
    from infra.config.parse import parse
    from infra.program.lookups import LookupFailed, check_kept_az, first_az

    cluster = parse("us-east-1", {"name": "kept", "compute": {"instanceType": "p3dn.24xlarge", "count": 2}}).cluster
    offered = {"m6i.2xlarge": {"us-east-1a", "us-east-1c"}, "p3dn.24xlarge": {"us-east-1c", "us-east-1d"}}
    assert first_az(offered, ["m6i.2xlarge", "p3dn.24xlarge"]) == "us-east-1c"
    assert check_kept_az("us-east-1c", offered, cluster) == "us-east-1c"
    with pytest.raises(
        LookupFailed,
        match=r"cluster.compute.instanceType: p3dn.24xlarge is not offered in us-east-1a, "
        r"the availability zone this cluster has used since its first `pulumi up` "
        r"\(offered in: us-east-1c, us-east-1d\)",
    ):
        check_kept_az("us-east-1a", offered, cluster)
