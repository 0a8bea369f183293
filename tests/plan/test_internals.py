"""The private moto and Pulumi names the offline plan uses (infra/plan/internals.py) still exist and behave as
used there. When an upgrade changes one, the failure names the packages' versions and the internal, not a
plan that went wrong somewhere."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import UTC

import boto3
import pulumi
import pytest

from infra.plan import internals
from infra.plan.embedded_aws import ACCOUNT, embedded_aws

REGION = "us-east-1"


class Echo(pulumi.runtime.Mocks):
    def new_resource(self, args):
        return f"{args.name}-id", args.inputs

    def call(self, args):
        return {}


@contextmanager
def internal(what: str):
    try:
        yield
    except (AttributeError, ImportError, KeyError, TypeError, ValueError) as e:
        pytest.fail(
            f"{internals.versions()}: {what} is not what infra/plan/internals.py uses any more "
            f"({type(e).__name__}: {e}); adapt the wrapper there",
            pytrace=False,
        )


def test_pulumi_secret_envelope_keys_are_those_an_output_secret_is_sent_with():
    with internal("pulumi.runtime.rpc._special_sig_key/_special_secret_sig"):
        key, sig = internals.secret_signature()
        from pulumi.runtime import rpc

        wire = rpc.wrap_rpc_secret("x")
    assert wire == {key: sig, "value": "x"}


def test_pulumi_mock_monitor_has_what_the_recorder_extends():
    with internal("pulumi.runtime.mocks.MockMonitor"):
        monitor = internals.mock_monitor()(Echo())
        assert callable(monitor.RegisterResource)
        assert monitor.mocks is not None and isinstance(monitor.resources, dict)
        assert monitor.make_urn("", "t:m:R", "n").endswith("::t:m:R::n")


def test_a_program_runs_on_a_fresh_stack_and_its_exports_are_the_root_resources_outputs():
    seen: dict = {}

    def program(name: str):
        async def run():
            pulumi.export(name, 42)
            seen.update(await pulumi.Output.from_input(internals.root_resource().outputs).future() or {})

        return run

    with internal("Pulumi's stack reset, event loop and synchronous program run"):
        for name in ("first", "second"):  # two programs in one process, as plans and tests run
            internals.event_loop()
            internals.fresh_stack()
            pulumi.runtime.set_mocks(Echo(), project="hpcc", stack="internals", preview=False)
            internals.run_program(program(name))
            assert seen == {name: 42}  # the second stack does not carry the first one's exports
            seen.clear()


@pytest.fixture
def moto_region():
    with internal("moto's stores as the embedded AWS seeds them"), embedded_aws(REGION):
        yield


def test_moto_takes_a_public_image_and_parameter_seeded_into_its_stores(moto_region):
    from datetime import datetime

    with internal("moto's EC2 backend (amis) and Ami model"):
        ec2 = internals.ec2_backend(ACCOUNT, REGION)
        ec2.amis["ami-0internals000001"] = internals.ami(
            ec2,
            ami_id="ami-0internals000001",
            name="probe",
            description="probe",
            owner_id="898082745236",
            owner_alias="amazon",
            public=True,
            virtualization_type="hvm",
            architecture="x86_64",
            state="available",
            image_type="machine",
            hypervisor="xen",
            root_device_name="/dev/sda1",
            root_device_type="ebs",
            sriov="simple",
            creation_date=datetime(2026, 1, 1, tzinfo=UTC),
        )
    image = boto3.client("ec2", region_name=REGION).describe_images(ImageIds=["ami-0internals000001"])["Images"][0]
    assert (image["OwnerId"], image["Public"]) == ("898082745236", True)

    name = "/aws/service/internals/probe"
    with internal("moto's SSM parameter store (_parameters) and Parameter model"):
        assert internals.seed_public_parameter(ACCOUNT, REGION, name, "one", "text") == 1
        assert internals.seed_public_parameter(ACCOUNT, REGION, name, "two", "text") == 2
    got = boto3.client("ssm", region_name=REGION).get_parameter(Name=name)["Parameter"]
    assert (got["Value"], got["Version"]) == ("two", 2)


def test_moto_takes_a_managed_policy_added_by_name(moto_region):
    with internal("moto's IAM backend, AWSManagedPolicy and its managed policy data"):
        doc = internals.managed_policy_documents()["AmazonSSMManagedInstanceCore"]
        internals.add_managed_policies(ACCOUNT, {"AmazonSSMManagedInstanceCore": doc})
    arn = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
    assert (
        boto3.client("iam", region_name=REGION).get_policy(PolicyArn=arn)["Policy"]["PolicyName"]
        == "AmazonSSMManagedInstanceCore"
    )


def test_moto_run_instances_with_its_private_signature_makes_the_instance_boto3_reads_back(moto_region):
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24", AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
    image = ec2.register_image(Name="probe", RootDeviceName="/dev/sda1")["ImageId"]
    lt = ec2.create_launch_template(LaunchTemplateName="probe", LaunchTemplateData={"ImageId": image})
    lt_id = lt["LaunchTemplate"]["LaunchTemplateId"]
    with internal("moto's EC2Backend.run_instances arguments"):
        inst = internals.run_instance(
            ACCOUNT,
            REGION,
            image_id=image,
            instance_type="c6i.large",
            nic={"DeviceIndex": 0, "SubnetId": subnet, "Groups": []},
            tags={"Name": "probe"},
            launch_template={"LaunchTemplateId": lt_id, "Version": "1"},
            http_tokens="required",
            client_token="probe",
        )
    found = ec2.describe_instances(InstanceIds=[inst.id])["Reservations"][0]["Instances"][0]
    assert (found["InstanceType"], found["SubnetId"], found["MetadataOptions"]["HttpTokens"]) == (
        "c6i.large",
        subnet,
        "required",
    )
    assert {"Key": "Name", "Value": "probe"} in found["Tags"]
    assert found["PrivateIpAddress"] == inst.private_ip

    with internal("moto's error types (moto.core.exceptions)"):
        with pytest.raises(internals.moto_errors()) as refused:
            internals.run_instance(
                ACCOUNT,
                REGION,
                image_id=image,
                instance_type="x9.nonesuch",
                nic={"DeviceIndex": 0, "SubnetId": subnet, "Groups": []},
                tags={},
                launch_template={"LaunchTemplateId": lt_id, "Version": "1"},
                http_tokens="required",
                client_token="probe-2",
            )
        code, message = internals.moto_error(refused.value)
    assert code.startswith("InvalidInstanceType") and "x9.nonesuch" in message
