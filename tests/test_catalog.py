"""The catalog against moto's copy of EC2's DescribeInstanceTypes, and each type's EFA layout against EC2's rules."""

import boto3
import pytest

from infra.catalog import CATALOG
from infra.efa import interface_layout
from infra.plan import aws_rules
from infra.plan.aws_rules import AwsRejected


@pytest.fixture(scope="module")
def described():
    from infra.plan.embedded_aws import embedded_aws

    with embedded_aws("us-east-1"):
        ec2 = boto3.client("ec2", region_name="us-east-1")
        yield {t["InstanceType"]: t for t in ec2.describe_instance_types(InstanceTypes=sorted(CATALOG))["InstanceTypes"]}


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_catalog_matches_describe_instance_types(name, described):
    it, d = CATALOG[name], described[name]
    net = d["NetworkInfo"]
    assert it.vcpus == d["VCpuInfo"]["DefaultVCpus"] and it.cores == d["VCpuInfo"]["DefaultCores"]
    assert it.memory_gib * 1024 == d["MemoryInfo"]["SizeInMiB"]
    assert it.arch in d["ProcessorInfo"]["SupportedArchitectures"]
    assert it.gpus == sum(g["Count"] for g in d.get("GpuInfo", {}).get("Gpus", []))
    assert it.efa_supported == bool(net.get("EfaSupported"))
    assert it.efa_max_interfaces == (net.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0)
    assert it.network_cards == net["MaximumNetworkCards"]
    assert it.interfaces_per_card == net["NetworkCards"][0]["MaximumNetworkInterfaces"]
    assert "cluster" in d["PlacementGroupInfo"]["SupportedStrategies"]


@pytest.mark.parametrize("name", sorted(CATALOG))
@pytest.mark.parametrize("efa", [True, False])
def test_every_catalog_layout_is_accepted_by_ec2_rules(name, efa, described):
    nics = [{"networkCardIndex": s.network_card_index, "deviceIndex": s.device_index, "interfaceType": s.interface_type,
             "subnetId": "subnet-1"} for s in interface_layout(CATALOG[name], efa)]
    aws_rules.check_launch_template("lt", {"networkInterfaces": nics}, described[name])


def _nic(card, dev, kind, **extra):
    return {"networkCardIndex": card, "deviceIndex": dev, "interfaceType": kind, "subnetId": "subnet-1", **extra}


@pytest.mark.parametrize("type_name,nics,code,text", [
    ("p5.48xlarge", [_nic(0, 0, "efa-only")], "InvalidParameterValue", "cannot be the primary"),
    ("c6i.16xlarge", [_nic(0, 0, "efa")], "InvalidParameterValue", "not supported on this card"),
    ("p4d.24xlarge", [_nic(0, 0, "interface")] + [_nic(c, 1, "efa") for c in range(1, 5)], "InvalidParameterValue", "network card"),
    ("p4d.24xlarge", [_nic(0, 0, "efa"), _nic(0, 1, "efa"), _nic(1, 0, "efa"), _nic(2, 0, "efa"), _nic(3, 0, "efa")],
     "InvalidParameterValue", "EFA interfaces requested"),
    ("p4d.24xlarge", [_nic(0, 0, "efa", associatePublicIpAddress="true"), _nic(1, 0, "efa")],
     "InvalidParameterCombination", "multiple network interfaces"),
    ("p5.48xlarge", [_nic(0, 0, "interface"), _nic(0, 0, "efa-only")], "InvalidParameterValue", "same card and device"),
    ("p5.48xlarge", [_nic(1, 0, "efa-only")], "InvalidParameterValue", "no primary interface"),
])
def test_layout_mistakes_are_rejected_as_ec2_would(type_name, nics, code, text, described):
    with pytest.raises(AwsRejected) as e:
        aws_rules.check_launch_template("lt", {"networkInterfaces": nics}, described[type_name])
    assert e.value.code == code and text in e.value.message


def test_interfaces_and_instance_level_security_groups_conflict(described):
    with pytest.raises(AwsRejected, match="InvalidParameterCombination"):
        aws_rules.check_launch_template("lt", {"networkInterfaces": [_nic(0, 0, "efa")], "vpcSecurityGroupIds": ["sg-1"]},
                                        described["c5n.18xlarge"])


CATALOG_FIELDS = ("name", "vcpus", "cores", "memory_gib", "arch", "gpus", "gpu_model", "efa_max_interfaces", "network_cards",
                  "interfaces_per_card", "gpudirect_rdma", "hourly_usd", "efa_supported", "family")


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_facts_from_ec2_data_equal_the_catalog_rows(name, described):
    """The lead can swap the catalog for the loader: same facts, same layout, same environment, prices from the snapshot."""
    from infra.fabric import fabric_env
    from infra.instance_facts import from_description
    from infra.prices import snapshot_price

    row, facts = CATALOG[name], from_description(described[name], snapshot_price(name))
    assert {f: getattr(facts, f) for f in CATALOG_FIELDS} == {f: getattr(row, f) for f in CATALOG_FIELDS}
    for efa in (True, False):
        assert interface_layout(facts, efa) == interface_layout(row, efa)
    if name == "trn1.32xlarge":  # the one deliberate change: Trainium runs a rank per NeuronCore, with Neuron's env
        assert (row.slots, facts.slots) == (64, 32)
        assert dict(fabric_env(facts, True)) == {"FI_PROVIDER": "efa", "FI_EFA_FORK_SAFE": "1", "FI_EFA_USE_DEVICE_RDMA": "1"}
    else:
        assert facts.slots == row.slots
        assert all(fabric_env(facts, efa) == fabric_env(row, efa) for efa in (True, False))
