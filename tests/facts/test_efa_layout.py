"""Every EFA type's interface layout, built from its own network cards, against EC2's rules
(infra/plan/aws_rules.py)."""

import pytest

from infra.facts.efa import InterfaceSpec, efa_device_count, interface_layout
from infra.facts.fabric import fabric_env
from infra.facts.instance_types import from_description
from infra.plan import aws_rules
from infra.plan.aws_rules import AwsRejected
from tests.facts.instance_data import all_descriptions, as_launch_template, efa_type_names

EFA_TYPES = efa_type_names()


def _facts(name):
    return from_description(all_descriptions()[name])


def _efa_capable_cards(d) -> int:
    return sum(1 for c in d["NetworkInfo"]["NetworkCards"] if {"efa", "efa-only"} & set(c.get("InterfaceTypes", [])))


def _accelerator_slots(d) -> int:
    """Ranks per node read straight from the raw entry: GPUs, else NeuronCores, else physical cores."""
    gpus = sum(g["Count"] for g in d.get("GpuInfo", {}).get("Gpus", []))
    neuron = sum(n["Count"] * n["CoreInfo"]["Count"] for n in d.get("NeuronInfo", {}).get("NeuronDevices", []))
    return gpus or neuron or d["VCpuInfo"]["DefaultCores"]


def test_the_embedded_data_has_every_efa_type():
    assert len(EFA_TYPES) == 303 and len(all_descriptions()) == 1395


@pytest.mark.parametrize("name", EFA_TYPES)
def test_every_efa_type_gets_a_layout_ec2_accepts_with_every_efa_device_it_allows(name):
    d = all_descriptions()[name]
    itype = _facts(name)
    layout = interface_layout(itype, True)
    aws_rules.check_launch_template("lt", as_launch_template(layout), d)
    assert efa_device_count(layout) == min(d["NetworkInfo"]["EfaInfo"]["MaximumEfaInterfaces"], _efa_capable_cards(d))
    assert sum(1 for s in layout if s.interface_type in ("interface", "efa")) == 1  # one subnet IP per node
    per_card = [s.network_card_index for s in layout if s.is_efa]
    assert len(per_card) == len(set(per_card))  # one EFA per card, AWS's recommendation
    assert layout[0].is_primary and layout[0].interface_type != "efa-only"
    assert itype.slots == _accelerator_slots(d)
    aws_rules.check_launch_template("lt", as_launch_template(interface_layout(itype, False)), d)


def _ifaces(*specs):
    return [InterfaceSpec(*s) for s in specs]


@pytest.mark.parametrize(
    "name,expected",
    [
        ("p6-b300.48xlarge", _ifaces((0, 0, "interface"), *[(c, 0, "efa-only") for c in range(1, 17)])),
        (
            "p6-b200.48xlarge",
            _ifaces((0, 0, "interface"), (0, 1, "efa-only"), *[(c, 0, "efa-only") for c in range(1, 8)]),
        ),
        (
            "p5en.48xlarge",
            _ifaces((0, 0, "interface"), (0, 1, "efa-only"), *[(c, 0, "efa-only") for c in range(1, 16)]),
        ),
        (
            "trn2.48xlarge",
            _ifaces((0, 0, "interface"), (0, 1, "efa-only"), *[(c, 0, "efa-only") for c in range(1, 16)]),
        ),
        (
            "g6e.48xlarge",
            _ifaces(
                (0, 0, "interface"), (0, 1, "efa-only"), (1, 0, "efa-only"), (2, 0, "efa-only"), (3, 0, "efa-only")
            ),
        ),
        ("hpc7g.16xlarge", _ifaces((0, 0, "efa"))),
        ("hpc6id.32xlarge", _ifaces((0, 0, "efa"), (1, 0, "efa-only"))),  # card 0 takes one interface only
        ("i7ie.48xlarge", _ifaces((0, 0, "interface"), (0, 1, "efa-only"))),  # 2 cards, 1 EFA
        ("c6i.16xlarge", _ifaces((0, 0, "interface"))),  # no EFA
    ],
)
def test_layouts_by_name(name, expected):
    assert interface_layout(_facts(name), True) == expected


def test_p6_b300_has_sixteen_efa_devices_and_none_on_card_zero():
    layout = interface_layout(_facts("p6-b300.48xlarge"), True)
    assert efa_device_count(layout) == 16 and not any(s.is_efa for s in layout if s.network_card_index == 0)


def test_the_old_p6_b300_layout_is_rejected_as_ec2_did():
    """ParallelCluster #7143: efa-only on card 0 device 1 of a p6-b300, whose card 0 has no EFA."""
    old = _ifaces((0, 0, "interface"), (0, 1, "efa-only"), *[(c, 0, "efa-only") for c in range(1, 16)])
    with pytest.raises(AwsRejected, match="not supported on this card"):
        aws_rules.check_launch_template("lt", as_launch_template(old), all_descriptions()["p6-b300.48xlarge"])


def test_more_interfaces_than_the_type_takes_are_rejected():
    d = all_descriptions()["hpc7g.16xlarge"]  # 1 card, 4 interfaces at most
    many = as_launch_template(_ifaces((0, 0, "efa"), (0, 1, "interface"), (0, 2, "interface"), (0, 3, "interface")))
    aws_rules.check_launch_template("lt", many, d)
    d = {
        **d,
        "NetworkInfo": {
            **d["NetworkInfo"],
            "MaximumNetworkInterfaces": 3,
            "NetworkCards": [{**d["NetworkInfo"]["NetworkCards"][0], "MaximumNetworkInterfaces": 8}],
        },
    }
    with pytest.raises(AwsRejected, match="takes at most 3"):
        aws_rules.check_launch_template("lt", many, d)


def test_trn2_runs_one_rank_per_neuron_core_with_neuron_fabric_settings():
    trn2 = _facts("trn2.48xlarge")
    assert (trn2.accelerator, trn2.neuron_cores, trn2.slots, trn2.gpus) == ("neuron", 128, 128, 0)
    assert dict(fabric_env(trn2, True)) == {
        "FI_PROVIDER": "efa",
        "FI_EFA_FORK_SAFE": "1",
        "FI_EFA_USE_DEVICE_RDMA": "1",
    }
    assert dict(fabric_env(trn2, False)) == {"FI_PROVIDER": "tcp"}


def test_trn1_slots_are_its_neuron_cores_not_its_cpu_cores():
    trn1 = _facts("trn1.32xlarge")
    assert (trn1.cores, trn1.neuron_cores, trn1.slots) == (64, 32, 32)


def test_arm64_cpu_type_and_gpu_type_environments():
    hpc7g = _facts("hpc7g.16xlarge")
    assert (hpc7g.arch, hpc7g.accelerator, hpc7g.slots, hpc7g.gpudirect_rdma) == ("arm64", "none", 64, False)
    assert dict(fabric_env(hpc7g, True))["I_MPI_OFI_PROVIDER"] == "efa"
    b300 = _facts("p6-b300.48xlarge")
    env = dict(fabric_env(b300, True))
    assert (b300.slots, b300.gpu_model, env["FI_EFA_USE_DEVICE_RDMA"], env["NCCL_DEBUG"]) == (8, "B300", "1", "WARN")
    assert "FI_EFA_USE_DEVICE_RDMA" not in dict(fabric_env(_facts("g6e.48xlarge"), True))
