"""Instance facts built from DescribeInstanceTypes: every entry parses, and the loader asks EC2 once per type."""

import boto3
import pytest

from infra.facts.instance_types import COMPUTE_FIELD, HEAD_FIELD, InstanceFacts, UnknownInstanceType, from_description
from tests.facts.instance_data import REGION, all_descriptions


def test_every_type_in_the_data_parses_into_consistent_facts():
    bad = []
    for name, d in all_descriptions().items():
        it = from_description(d)
        cards = d["NetworkInfo"]["NetworkCards"]
        ok = (
            it.name == name
            and it.vcpus == d["VCpuInfo"]["DefaultVCpus"]
            and it.cores >= 1
            and it.slots >= 1
            and it.memory_gib * 1024 == d["MemoryInfo"]["SizeInMiB"]
            and it.arch in d["ProcessorInfo"]["SupportedArchitectures"]
            and len(it.cards) == len(cards) == it.network_cards
            and it.cards[0].index == 0
            and it.efa_supported == bool(d["NetworkInfo"].get("EfaSupported"))
            and it.usage_classes == tuple(d["SupportedUsageClasses"])
            and it.hourly_usd is None
        )
        if not ok:
            bad.append(name)
    assert bad == []


def test_fields_ec2_publishes_beyond_the_old_catalog():
    d = all_descriptions()
    hpc7a = from_description(d["hpc7a.96xlarge"])
    assert (hpc7a.spot_supported, hpc7a.usage_classes, hpc7a.threads_per_core) == (False, ("on-demand",), 1)
    assert from_description(d["p5.4xlarge"]).usage_classes == ("capacity-block", "on-demand", "spot")
    vt1 = from_description(d["vt1.24xlarge"])  # EFA, yet no cluster placement group
    assert vt1.efa_supported and not vt1.cluster_placement_supported
    b300 = from_description(d["p6-b300.48xlarge"])
    assert (
        b300.cards[0].interface_types == ("interface",)
        and b300.cards[1].supports("efa-only")
        and b300.cards[16].index == 16
    )
    inf2 = from_description(d["inf2.48xlarge"])
    assert (inf2.accelerator, inf2.neuron_model, inf2.neuron_cores) == ("neuron", "Inferentia2", 24)
    assert from_description(d["i7ie.48xlarge"]).accelerator == "none"


@pytest.fixture
def ec2_with_call_count():
    from infra.plan.embedded_aws import embedded_aws

    with embedded_aws(REGION):
        ec2 = boto3.client("ec2", region_name=REGION)
        calls = []
        ec2.meta.events.register(
            "before-call.ec2.DescribeInstanceTypes", lambda params, **_: calls.append(params["body"])
        )
        yield ec2, calls


def test_the_loader_asks_ec2_once_per_type(ec2_with_call_count):
    ec2, calls = ec2_with_call_count
    facts = InstanceFacts(ec2)
    first = facts.get("p6-b300.48xlarge")
    assert facts.get("p6-b300.48xlarge") is first and facts.get("p6-b300.48xlarge", HEAD_FIELD) is first
    facts.get("c6i.xlarge", HEAD_FIELD)
    assert len(calls) == 2 and "p6-b300.48xlarge" in str(calls[0]) and "c6i.xlarge" in str(calls[1])


def test_the_loader_prices_from_the_snapshot_or_the_injected_source(ec2_with_call_count):
    ec2, _ = ec2_with_call_count
    assert InstanceFacts(ec2).get("p5.48xlarge").hourly_usd == 98.32
    assert InstanceFacts(ec2).get("p6-b300.48xlarge").hourly_usd is None  # unknown, never a guess
    assert InstanceFacts(ec2, price_of=lambda name: 1.5).get("p6-b300.48xlarge").hourly_usd == 1.5


@pytest.mark.parametrize("field", [COMPUTE_FIELD, HEAD_FIELD])
def test_a_type_ec2_does_not_list_names_the_field(field, ec2_with_call_count):
    ec2, _ = ec2_with_call_count
    with pytest.raises(UnknownInstanceType) as e:
        InstanceFacts(ec2).get("p9.nonexistent", field)
    assert e.value.field == field
    assert str(e.value).startswith(f"{field}: EC2 in {REGION} has no instance type 'p9.nonexistent'")
