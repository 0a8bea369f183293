"""Any instance type EC2 lists plans (the issue's types), from DescribeInstanceTypes, with no hand-typed catalog;
what EC2's data rules out is refused naming the field; a Capacity Block's launch template; prices unknown shown so."""

import copy

import pytest
from rich.console import Console
from typer.testing import CliRunner

from infra.config.parse import parse
from infra.config.validators.check import check_config
from infra.facts.efa import efa_device_count
from infra.ops.cli import app
from infra.ops.plan_summary import cost_line
from infra.plan import aws_rules
from infra.plan.runner import PlanError, plan_config
from infra.render.node_settings import node_settings
from infra.render.roles import resolve_role
from tests.facts.instance_data import MOTO_ACCOUNT, all_descriptions, as_launch_template, offline_facts

LT = "aws:ec2/launchTemplate:LaunchTemplate"


def config_map(compute_type: str, count: int = 2, region: str = "us-east-1", **compute) -> dict:
    return {
        "aws:region": region,
        "hpcc:cluster": {
            "name": "types",
            "headNode": {"instanceType": "c5n.9xlarge"},
            "compute": {"instanceType": compute_type, "count": count, **compute},
        },
    }


def cluster_of(m: dict):
    return parse(m["aws:region"], m["hpcc:cluster"]).cluster


@pytest.fixture(scope="module")
def p6_b300():
    return plan_config(config_map("p6-b300.48xlarge"))


def test_p6_b300_plans_with_16_efa_devices_none_on_card_0(p6_b300):
    nics = p6_b300.named("types-compute-lt")["inputs"]["networkInterfaces"]
    efa = [n for n in nics if n["interfaceType"] in ("efa", "efa-only")]
    assert len(efa) == 16 and all(n["networkCardIndex"] != 0 for n in efa)
    assert [n["interfaceType"] for n in nics if n["networkCardIndex"] == 0] == ["interface"]
    assert [g["slots"] for g in p6_b300.outputs["nodeGroups"]] == [8]


def test_a_type_without_a_known_price_has_no_estimate_and_says_so(p6_b300):
    assert p6_b300.outputs["estimatedHourlyCostUsd"] is None
    console = Console(record=True, width=300)
    console.print(cost_line(p6_b300))
    assert "price unknown (p6-b300.48xlarge not in the price snapshot" in console.export_text()


def test_trn2_plans_with_neuroncores_as_slots_and_neuron_env():
    result = plan_config(config_map("trn2.48xlarge", region="us-east-2"))  # moto offers it there, not in us-east-1
    assert [g["slots"] for g in result.outputs["nodeGroups"]] == [128]  # 16 devices x 8 NeuronCores
    settings = node_settings(result.config.cluster, "us-east-1", offline_facts(), MOTO_ACCOUNT)
    fabric = dict(settings.fabric)
    assert fabric["FI_EFA_USE_DEVICE_RDMA"] == "1" and "NCCL_DEBUG" not in fabric and "CCL_ATL_TRANSPORT" not in fabric


@pytest.mark.parametrize(
    "name", ["p6-b200.48xlarge", "p6-b300.48xlarge", "trn2.48xlarge", "hpc7a.96xlarge", "p5.4xlarge", "g6.48xlarge"]
)
def test_the_issue_s_types_pass_the_rules_and_ec2_takes_their_layout(name):
    cluster = cluster_of(config_map(name))
    assert not [
        f for f in check_config(parse("us-east-1", config_map(name)["hpcc:cluster"]), offline_facts()) if f.is_error
    ]
    spec = resolve_role(cluster, "us-east-1", "compute", offline_facts())
    aws_rules.check_launch_template("lt", as_launch_template(spec.layout), all_descriptions()[name])
    assert spec.efa_devices == efa_device_count(list(spec.layout)) >= 1
    assert node_settings(cluster, "us-east-1", offline_facts(), MOTO_ACCOUNT).slots == spec.itype.slots


@pytest.mark.parametrize(
    "compute,field,words",
    [
        ({"instanceType": "p9.huge"}, "cluster.compute.instanceType", "DescribeInstanceTypes does not list it"),
        ({"instanceType": "hpc7a.96xlarge", "market": "spot"}, "cluster.compute.market", "on-demand only"),
        ({"instanceType": "vt1.24xlarge"}, "cluster.compute.instanceType", "cannot join a cluster placement group"),
    ],
)
def test_the_plan_refuses_what_ec2_s_data_rules_out_naming_the_field(tmp_path, compute, field, words):
    import yaml

    m = config_map(**{"compute_type": compute.pop("instanceType")}, **compute)
    path = tmp_path / "Pulumi.types.yaml"
    path.write_text(yaml.safe_dump({"config": m}))
    out = CliRunner().invoke(app, ["plan", str(path), "--out", str(tmp_path / "plan")])
    text = " ".join(out.output.split())
    assert out.exit_code == 2 and f"{field}: " in text and words in text and "Traceback" not in text, out.output


def test_hdd_on_scratch_is_refused_before_any_plan():
    m = config_map("c6i.16xlarge")
    m["hpcc:cluster"]["fsx"] = {"storageType": "HDD"}
    with pytest.raises(Exception) as e:
        plan_config(m)
    assert (
        "cluster.fsx.storageType",
        "FSx for Lustre takes HDD storage with PERSISTENT_1 only, not SCRATCH_2; use SSD, "
        "or deploymentType: PERSISTENT_1",
    ) in e.value.problems


# -- Capacity Blocks -----------------------------------------------------------------------------------------

BLOCK = "cr-0123456789abcdef0"


@pytest.fixture(scope="module")
def block_plan():
    return plan_config(config_map("p5.4xlarge", market="capacity-block", capacityReservationId=BLOCK))


def test_capacity_block_launch_template_targets_the_block_outside_any_placement_group(block_plan):
    compute = block_plan.named("types-compute-lt")["inputs"]
    assert compute["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert compute["capacityReservationSpecification"]["capacityReservationTarget"]["capacityReservationId"] == BLOCK
    assert not compute["placement"].get("groupName")
    head = block_plan.named("types-head-lt")["inputs"]
    assert head["placement"]["groupName"] == "hpcc-types" and not head.get("instanceMarketOptions")


def test_a_reservation_made_in_a_placement_group_launches_into_that_group():
    result = plan_config(config_map("p5.48xlarge", capacityReservationId=BLOCK, placementGroup="reserved-pg"))
    assert result.named("types-compute-lt")["inputs"]["placement"]["groupName"] == "reserved-pg"
    assert result.named("types-head-lt")["inputs"]["placement"]["groupName"] == "hpcc-types"


def test_ec2_rules_refuse_a_capacity_block_market_without_its_reservation(block_plan):
    inputs = copy.deepcopy(block_plan.named("types-compute-lt")["inputs"])
    del inputs["capacityReservationSpecification"]
    with pytest.raises(aws_rules.AwsRejected, match="needs a capacity reservation target"):
        aws_rules.check_market("lt", inputs, all_descriptions()["p5.4xlarge"])
    with pytest.raises(aws_rules.AwsRejected, match="not offered as spot"):
        aws_rules.check_market(
            "lt", {"instanceMarketOptions": {"marketType": "spot"}}, all_descriptions()["hpc7a.96xlarge"]
        )


def test_plan_error_is_a_message(tmp_path):
    with pytest.raises(PlanError, match="cluster.compute.market: hpc7a.96xlarge is not sold as spot"):
        plan_config(config_map("hpc7a.96xlarge", market="spot"))


# -- arm64 (Graviton): a cluster of one architecture, with the family's arm64 image ------------------------------


@pytest.mark.parametrize("head,compute", [("c7g.2xlarge", "hpc7g.16xlarge"), ("c7g.2xlarge", "g5g.16xlarge")])
def test_an_arm64_cluster_plans_with_the_familys_arm64_image(head, compute):
    from infra.plan.embedded_aws import stable_ami_id

    config = {
        "aws:region": "us-east-1",
        "hpcc:cluster": {
            "name": "grav",
            "headNode": {"instanceType": head},
            "compute": {"instanceType": compute, "count": 2},
        },
    }
    result = plan_config(config)
    arm64_ami = stable_ami_id("base-oss-nvidia-driver-gpu-ubuntu-22.04-arm64")
    assert {r["inputs"]["ami"] for r in result.of_type("aws:ec2/instance:Instance")} == {arm64_ami}
    assert {r["inputs"]["imageId"] for r in result.of_type("aws:ec2/launchTemplate:LaunchTemplate")} == {arm64_ami}
    pin = next(r for r in result.of_type("aws:ssm/parameter:Parameter") if r["name"] == "grav-image-pin")
    assert "(arm64)" in pin["inputs"]["description"] and '"architecture": "arm64"' in pin["inputs"]["insecureValue"]
