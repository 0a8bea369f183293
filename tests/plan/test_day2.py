"""Day 2 on the real program: plan a cluster, edit its config, plan again against the first plan (as a second
`pulumi up` would run: generated ids kept apart, `ignore_changes` keeping the pins, the provider's replacement
rules) and check what the update would do to each resource. examples/p3dn-bert.yaml: 8 p3dn nodes in the group
`compute:` means, no AZ set (the first up picks us-east-1c), a DLAMI family. Pulumi launches only the head; the
controller launches the groups' nodes, so a count is a parameter value and a launch setting a template version."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from hpcc_contract.names import image_pin
from infra.config.stackfile import read_raw
from infra.facts.images import IMAGE_FAMILIES
from infra.plan.embedded_aws import embedded_aws, publish_dlami
from infra.plan.guard import guarded
from infra.plan.previous import PreviousPlan
from infra.plan.runner import PlanError, plan_config

ROOT = Path(__file__).resolve().parents[2]
FAMILY = "base-oss-nvidia-driver-gpu-ubuntu-22.04"
BASE = read_raw(ROOT / "examples" / "p3dn-bert.yaml")
BASE["hpcc:cluster"]["image"] = {"family": FAMILY}  # a family, so the tests can publish newer DLAMIs of it
INSTANCE, SUBNET = "aws:ec2/instance:Instance", "aws:ec2/subnet:Subnet"
PARAMETER, LT = "aws:ssm/parameter:Parameter", "aws:ec2/launchTemplate:LaunchTemplate"
FSX, PLACEMENT = "aws:fsx/lustreFileSystem:LustreFileSystem", "aws:ec2/placementGroup:PlacementGroup"


@pytest.fixture(scope="module")
def first_up(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("first-up")
    plan_config(BASE).write(out)
    return out


def second_up(first: Path, edit=None, aws=None, replace=()):
    config = copy.deepcopy(BASE)
    if edit:
        edit(config["hpcc:cluster"])
    previous = PreviousPlan.load(first)
    if replace:
        previous = previous.replacing(list(replace))
    return plan_config(config, aws=aws, previous=previous)


def actions(result, token: str) -> dict[str, str]:
    return {c.name: c.action for c in result.changes if c.type == token}


def replaced(result) -> list[str]:
    return sorted(c.name for c in result.changes if c.action == "replace")


def test_the_same_config_again_changes_nothing(first_up):
    assert second_up(first_up).changes == []


def test_growing_by_one_node_updates_the_groups_parameter_in_place_and_nothing_else(first_up):
    result = second_up(first_up, lambda c: c["compute"].update(count=9))
    # The settings carry the count and its pacing for the nodes (infra/render/node_settings.py): a value, in place too.
    assert {(c.name, c.action) for c in result.changes} == {
        ("bert-groups-param", "update"),
        ("bert-settings-param", "update"),
    }
    assert guarded(result.changes) == []  # `hpcc up` goes ahead without --allow-replace


def test_shrinking_is_a_parameter_value_too_and_the_controller_chooses_the_nodes(first_up):
    result = second_up(first_up, lambda c: c["compute"].update(count=6))
    assert {(c.name, c.action) for c in result.changes} == {
        ("bert-groups-param", "update"),
        ("bert-settings-param", "update"),
    }
    assert guarded(result.changes) == [] and not actions(result, INSTANCE)


def test_moving_compute_to_node_groups_changes_nothing(first_up):
    def moved(c):
        c["nodeGroups"] = [{"name": "compute", **c.pop("compute")}]

    assert second_up(first_up, moved).changes == []


def test_adding_a_group_creates_its_template_and_resource_and_touches_no_instance(first_up):
    def grown(c):
        c["nodeGroups"] = [
            {"name": "compute", **c.pop("compute")},
            {"name": "cpu", "instanceType": "c5n.18xlarge", "count": 2},
        ]

    result = second_up(first_up, grown)
    bundle = "aws:s3/bucketObjectv2:BucketObjectv2"
    assert {(c.name, c.action) for c in result.changes if c.action != "update" and c.type != bundle} == {
        ("bert-cpu-lt", "create"),
        ("bert-group-cpu", "create"),
    }
    # the new group's nodes boot from a script of their own (roles/cpu.sh): a new bundle (content-addressed, the
    # old one left for the nodes that run it: retain_on_delete), the compute group's script in it unchanged, so
    # its running nodes move to it without drifting
    assert {c.action for c in result.changes if c.type == bundle} == {"create", "delete"}
    assert result.bundle_files["roles/compute.sh"] == (first_up / "bundle" / "roles" / "compute.sh").read_bytes()
    assert "c5n.18xlarge" in result.bundle_files["roles/cpu.sh"].decode().splitlines()[1]
    # the head now depends on the new group, and its controller may launch the new group's type (issue 33: the
    # head's policy names the groups' instance types), both updated in place; the pointer names the new bundle
    assert {c.name for c in result.changes if c.action == "update"} <= {
        "bert-groups-param",
        "bert-settings-param",
        "bert-bundle-param",
        "bert-head",
        "bert-head-policy",
    }
    assert replaced(result) == [] and guarded(result.changes) == []


def test_plans_of_per_node_instances_move_to_groups_with_their_nodes_deleted_and_guarded(first_up, tmp_path):
    """A cluster planned before node groups had an instance per node, the hosts parameter and a status parameter
    per node: the move deletes them (the controller launches the group's nodes afresh), and `hpcc up` stops."""
    records = json.loads((first_up / "resources.json").read_text())
    head = next(r for r in records if r["name"] == "bert-head")
    settings = next(r for r in records if r["name"] == "bert-settings-param")
    old = [r for r in records if r["type"] != "pulumi-python:dynamic:Resource"]
    for i in range(2):
        node = copy.deepcopy(head)
        node.update(name=f"bert-compute-{i:03d}", id=f"i-0000000000000000{i}", dependsOn=["bert-compute-lt"])
        node["inputs"]["tags"] = {**node["inputs"]["tags"], "hpcc:node": f"compute-{i:03d}", "hpcc:role": "compute"}
        old.append(node)
    for name in ("bert-hosts-param", "bert-status-head"):
        param = copy.deepcopy(settings)
        param.update(name=name, id=f"/hpcc/bert/{name}")
        old.append(param)
    (tmp_path / "resources.json").write_text(json.dumps(old))
    result = second_up(tmp_path)
    assert {(c.name, c.action) for c in result.changes if c.action != "update"} == {
        ("bert-compute-000", "delete"),
        ("bert-compute-001", "delete"),
        ("bert-hosts-param", "delete"),
        ("bert-status-head", "delete"),
        ("bert-group-compute", "create"),
    }
    assert sorted(c.name for c in guarded(result.changes)) == ["bert-compute-000", "bert-compute-001"]


def test_a_tag_edit_updates_in_place_and_replaces_nothing(first_up):
    result = second_up(first_up, lambda c: c["tags"].update(costCenter="ml-research"))
    assert replaced(result) == [] and {c.action for c in result.changes} == {"update"}
    head = [c for c in result.changes if c.type == INSTANCE]
    assert [c.name for c in head] == ["bert-head"] and head[0].properties == ("tags.costCenter",)
    assert {c.name for c in result.changes if c.type == LT} == {"bert-head-lt", "bert-compute-lt"}


def test_a_newer_dlami_of_the_family_replaces_nothing_unless_asked(first_up):
    with embedded_aws("us-east-1") as aws:
        newer = publish_dlami("us-east-1", FAMILY, "20261201")
        kept = second_up(first_up, aws=aws)
    assert kept.changes == []  # the image resolved at the first up is kept
    first_ami = {
        r["name"]: r["inputs"]["imageId"]
        for r in json.loads((first_up / "resources.json").read_text())
        if r["type"] == LT
    }
    assert {r["name"]: r["inputs"]["imageId"] for r in kept.of_type(LT)} == first_ami != {}
    assert newer not in first_ami.values()

    with embedded_aws("us-east-1") as aws:
        newer = publish_dlami("us-east-1", FAMILY, "20261201")
        moved = second_up(first_up, aws=aws, replace=[image_pin("bert")])  # hpcc up --update-image
    assert {r["inputs"]["imageId"] for r in moved.of_type(LT)} == {newer}
    assert actions(moved, INSTANCE) == {"bert-head": "replace"}  # the head; the groups' nodes follow their template
    assert actions(moved, LT) == {"bert-head-lt": "update", "bert-compute-lt": "update"}
    assert [c.name for c in guarded(moved.changes)] == ["bert-head"]  # and `hpcc up` stops until --allow-replace


def test_a_new_image_family_in_the_config_moves_the_image(first_up):
    other = "base-oss-nvidia-driver-gpu-ubuntu-24.04"
    assert other in IMAGE_FAMILIES
    result = second_up(first_up, lambda c: c["image"].update(family=other))
    assert actions(result, PARAMETER)[image_pin("bert")] == "replace"
    assert actions(result, INSTANCE) == {"bert-head": "replace"}


def test_a_head_type_change_replaces_only_the_head(first_up):
    result = second_up(first_up, lambda c: c["headNode"].update(instanceType="c5n.9xlarge"))
    assert replaced(result) == ["bert-head"]
    assert [c.name for c in guarded(result.changes)] == ["bert-head"]


def test_a_compute_type_change_is_a_new_template_version_and_the_cluster_stays_in_its_az(first_up):
    # Unpinned, p4d.24xlarge with the c5n head would pick us-east-1a and move the subnets and the file system.
    result = second_up(first_up, lambda c: c["compute"].update(instanceType="p4d.24xlarge"))
    assert replaced(result) == [] and actions(result, LT) == {"bert-compute-lt": "update"}
    assert actions(result, PARAMETER)["bert-groups-param"] == "update"
    assert result.outputs["availabilityZone"] == "us-east-1c"
    assert not [c for c in result.changes if c.type in (SUBNET, FSX, PLACEMENT, INSTANCE)]


def test_a_compute_type_the_kept_az_does_not_offer_is_refused_naming_both(first_up, tmp_path):
    # The cluster was created in us-east-1e (say, when it ran other types): p3dn.24xlarge is not offered there.
    records = json.loads((first_up / "resources.json").read_text())
    for r in records:
        if r["name"] == "bert-az-pin":
            r["inputs"]["insecureValue"] = "us-east-1e"
    (tmp_path / "resources.json").write_text(json.dumps(records))
    with pytest.raises(
        PlanError,
        match=r"cluster.compute.instanceType: p3dn.24xlarge is not offered in us-east-1e, "
        r"the availability zone this cluster has used since its first `pulumi up`",
    ):
        second_up(tmp_path)


def test_growing_the_file_system_updates_it_in_place(first_up):
    result = second_up(first_up, lambda c: c["fsx"].update(storageCapacityGiB=2400))
    assert [(c.name, c.action, c.properties) for c in result.changes if c.type == FSX] == [
        ("bert-fsx", "update", ("storageCapacity",))
    ]
    assert replaced(result) == []


def test_a_deployment_type_change_would_replace_the_file_system_and_is_stopped(first_up):
    result = second_up(first_up, lambda c: c["fsx"].update(deploymentType="PERSISTENT_2", perUnitStorageThroughput=250))
    assert actions(result, FSX) == {"bert-fsx": "replace"}
    assert [c.name for c in guarded(result.changes)] == ["bert-fsx"]  # hpcc up stops
    assert [c.name for c in result.refused] == ["bert-fsx"]  # and Pulumi refuses: the file system is protected
    assert not [c for c in result.changes if c.type in (INSTANCE, SUBNET)]


def test_plan_update_image_needs_an_earlier_plan_and_replaces_only_the_pin(first_up, tmp_path):
    from typer.testing import CliRunner

    from infra.ops.cli import app

    config = tmp_path / "Pulumi.bert.yaml"  # the config first_up planned (an image family, not the example's filter)
    config.write_text(yaml.safe_dump({"config": BASE}))
    run = CliRunner().invoke(app, ["plan", str(config), "--out", str(tmp_path / "a"), "--update-image"])
    assert run.exit_code == 2 and "give --previous DIR too" in run.output
    run = CliRunner().invoke(
        app, ["plan", str(config), "--out", str(tmp_path / "b"), "--previous", str(first_up), "--update-image"]
    )
    assert run.exit_code == 0, run.output
    # Nothing newer was published: the image is resolved first, found the same, and nothing is replaced.
    assert json.loads((tmp_path / "b" / "changes.json").read_text()) == []
    assert "--update-image: no newer image" in " ".join(run.output.split())


def test_update_image_with_a_newer_dlami_replaces_the_pin_and_the_head(first_up):
    from infra.plan.runner import plan_update_image

    with embedded_aws("us-east-1") as aws:
        newer = publish_dlami("us-east-1", FAMILY, "20261201")
        result = plan_update_image(copy.deepcopy(BASE), PreviousPlan.load(first_up), image_pin("bert"), aws=aws)
    assert {r["inputs"]["ami"] for r in result.of_type(INSTANCE)} == {newer}
    assert actions(result, INSTANCE) == {"bert-head": "replace"}
    assert {r["inputs"]["imageId"] for r in result.of_type(LT)} == {newer}


def test_turning_efa_off_is_a_new_template_version_for_the_group(first_up):
    result = second_up(first_up, lambda c: c["compute"].update(efa=False))
    assert replaced(result) == [] and actions(result, LT) == {"bert-compute-lt": "update"}
    assert all(p.startswith("networkInterfaces") for c in result.changes if c.type == LT for p in c.properties)
    # The controller's fleet asks for no EFA (groups), the nodes launch over TCP (settings, a new bundle).
    assert actions(result, PARAMETER) == {
        "bert-groups-param": "update",
        "bert-settings-param": "update",
        "bert-bundle-param": "update",
    }
    assert not actions(result, INSTANCE)


@pytest.fixture(scope="module")
def first_up_with_ssh(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("first-up-ssh")
    config = copy.deepcopy(BASE)
    config["hpcc:cluster"]["ssh"] = {"allowedCidrs": ["203.0.113.5/32"]}
    plan_config(config).write(out)
    return out


def test_opening_ssh_replaces_the_head_into_the_public_subnet(first_up):
    result = second_up(first_up, lambda c: c.update(ssh={"allowedCidrs": ["203.0.113.5/32"]}))
    assert replaced(result) == ["bert-head"]
    assert {c.name: c.action for c in result.changes if c.action != "update"} == {
        "bert-head": "replace",
        "bert-head-ssh-sg": "create",
        "bert-head-ssh-in-0": "create",
    }


def test_closing_ssh_replaces_the_head_before_its_ssh_group_goes(first_up_with_ssh):
    config = copy.deepcopy(BASE)
    result = plan_config(config, previous=PreviousPlan.load(first_up_with_ssh))
    assert replaced(result) == ["bert-head"]
    assert {c.name: c.action for c in result.changes if c.action == "delete"} == {
        "bert-head-ssh-sg": "delete",
        "bert-head-ssh-in-0": "delete",
    }
    order = [(s.op, s.name) for s in result.steps]
    assert order.index(("delete", "bert-head")) < order.index(("delete", "bert-head-ssh-sg"))
    assert result.aws_refusals == []
    # As the plan had it (the head updated in place): its SSH group deleted while the head still uses it.
    from infra.plan.order import refusals, update_steps

    old, kept = PreviousPlan.load(first_up_with_ssh).resources, [c for c in result.changes if c.name != "bert-head"]
    assert refusals(update_steps(kept, old, result.resources), kept, old, result.resources) == [
        "delete bert-head-ssh-sg: DependencyViolation, in use by bert-head (old)"
    ]


def test_a_throughput_change_updates_the_file_system_in_place_and_keeps_its_s3_link(tmp_path):
    # examples/p5-llm.yaml: PERSISTENT_2 at 250 MB/s/TiB with an S3 link (hashicorp/terraform-provider-aws#34932)
    llm = read_raw(ROOT / "examples" / "p5-llm.yaml")
    plan_config(llm).write(tmp_path / "first")
    faster = copy.deepcopy(llm)
    faster["hpcc:cluster"]["fsx"]["perUnitStorageThroughput"] = 500
    result = plan_config(faster, previous=PreviousPlan.load(tmp_path / "first"))
    assert [(c.type, c.action, c.properties) for c in result.changes] == [
        (FSX, "update", ("perUnitStorageThroughput",))
    ]
    assert result.refused == [] and guarded(result.changes) == []


def test_moving_the_az_replaces_all_that_lives_in_the_subnets_in_an_order_aws_accepts(first_up):
    from infra.plan.order import refusals, update_steps

    result = second_up(first_up, lambda c: c.update(availabilityZone="us-east-1d"))
    nodes = ["bert-head"]
    assert set(replaced(result)) == {
        *nodes,
        "bert-private",
        "bert-public",
        "bert-fsx",
        "bert-nat",
        "bert-private-rta",
        "bert-public-rta",
        "bert-group-compute",
    }
    assert all(c.properties == ("availabilityZone",) for c in result.changes if c.type == INSTANCE)
    assert [c.name for c in result.refused] == ["bert-fsx"]  # protected: Pulumi refuses until it is lifted
    assert result.aws_refusals == []  # no CIDR conflict, no subnet deleted while anything is in it
    order = [(s.op, s.name) for s in result.steps]
    for node in nodes:  # the old node goes before its subnet, the new one comes after the new subnet
        assert (
            order.index(("delete", node))
            < order.index(("delete", "bert-private"))
            < order.index(("create", "bert-private"))
            < order.index(("create", node))
        )
    assert (
        order.index(("delete", "bert-nat"))
        < order.index(("delete", "bert-public"))
        < order.index(("create", "bert-public"))
        < order.index(("create", "bert-nat"))
    )

    # The check itself. Created before deleted (no deleteBeforeReplace): the subnets collide, and the new nodes
    # join a placement group whose old nodes are in the old AZ. Nodes kept (as before this fix): the old
    # subnet is deleted with the nodes still in it.
    old = PreviousPlan.load(first_up).resources
    records = copy.deepcopy(result.resources)
    for r in records:
        r["options"]["deleteBeforeReplace"] = False
    found = refusals(update_steps(result.changes, old, records), result.changes, old, records)
    assert "create bert-private: InvalidSubnet.Conflict, 10.0.16.0/20 overlaps bert-private (old)" in found
    assert "create bert-head: the cluster placement group hpcc-bert has nodes in us-east-1c, not us-east-1d" in found
    kept = [c for c in result.changes if c.type != INSTANCE]
    found = refusals(update_steps(kept, old, result.resources), kept, old, result.resources)
    assert any(p.startswith("delete bert-private: DependencyViolation, bert-head (old)") for p in found)
    # The groups' nodes live in the subnet too: their resources are replaced (terminating them) before it goes.
    assert actions(result, "pulumi-python:dynamic:Resource") == {"bert-group-compute": "replace"}


def test_a_plan_from_before_nodes_named_their_az_still_shows_no_change(first_up, tmp_path):
    # availabilityZone is Optional+Computed: an input newly set to what the provider computed is no diff.
    records = json.loads((first_up / "resources.json").read_text())
    for r in records:
        if r["type"] == INSTANCE:
            r["inputs"].pop("availabilityZone")
            r["propertyDependencies"].pop("availabilityZone", None)
    (tmp_path / "resources.json").write_text(json.dumps(records))
    assert second_up(tmp_path).changes == []


def test_a_new_region_with_its_az_is_shown_as_a_new_cluster(first_up):
    def west(c):
        c.update(availabilityZone="us-west-2b")

    config = copy.deepcopy(BASE)
    west(config["hpcc:cluster"])
    config["aws:region"] = "us-west-2"
    result = plan_config(config, previous=PreviousPlan.load(first_up))
    # The bundle is content-addressed (a resource per hash): the region is in its scripts, so a new one is created
    # and the old one left for the nodes that run it (retain_on_delete).
    bundles = {c.action for c in result.changes if c.type == "aws:s3/bucketObjectv2:BucketObjectv2"}
    assert bundles == {"create", "delete"}
    kept = {
        c.name for c in result.changes if c.action != "replace" and c.type != "aws:s3/bucketObjectv2:BucketObjectv2"
    }
    assert kept == {"bert-head-policy", "bert-node-policy"}  # IAM is global: the inline policies name new ARNs
    custom = {
        r["name"] for r in result.resources if r["custom"] and r["type"] != "aws:s3/bucketObjectv2:BucketObjectv2"
    }
    iam = {r["name"] for r in result.resources if r["type"].startswith("aws:iam/")}
    assert set(replaced(result)) == custom - iam  # the VPC, groups, parameters, nodes: every regional resource
    assert all("region" in c.properties for c in result.changes if c.action == "replace")
    assert [c.name for c in result.refused] == ["bert-fsx"]
    assert len(result.notes) == 1 and "from us-east-1 to us-west-2: this is a new cluster" in result.notes[0]


def test_a_new_region_without_an_az_is_refused_naming_the_region(first_up):
    config = copy.deepcopy(BASE)
    config["aws:region"] = "us-west-2"
    with pytest.raises(
        PlanError,
        match=r"^aws:region: this cluster was created in us-east-1 \(its availability zone "
        r"us-east-1c is kept .*cannot move to us-west-2: a region change is a new cluster",
    ):
        plan_config(config, previous=PreviousPlan.load(first_up))


def test_an_earlier_plan_without_regions_is_refused_with_the_fix(first_up, tmp_path):
    from infra.plan.previous import PreviousPlanError

    records = json.loads((first_up / "resources.json").read_text())
    for r in records:
        r["inputs"].pop("region", None)
    (tmp_path / "resources.json").write_text(json.dumps(records))
    with pytest.raises(PreviousPlanError, match="has no region .*plan the old config again with this hpcc"):
        PreviousPlan.load(tmp_path)


def test_launch_settings_reach_new_nodes_only_and_the_plan_says_how_to_apply_them(first_up, tmp_path):
    manual = {"updateStrategy": "manual"}  # today's behaviour: the controller leaves running nodes be
    for edit, what in (
        (lambda c: c["compute"].update(placementGroup="reserved-pg", **manual), "placement"),
        (lambda c: c["compute"].update(market="spot", **manual), "instanceMarketOptions"),
        (lambda c: c["compute"].update(rootVolumeGiB=400, **manual), "blockDeviceMappings"),
    ):
        result = second_up(first_up, edit)
        assert [(c.name, c.action) for c in result.changes if c.type == LT] == [("bert-compute-lt", "update")]
        # the fleet's market; the head's policy names the groups' placement groups (issue 33), updated in place
        assert {c.name for c in result.changes} <= {"bert-compute-lt", "bert-groups-param", "bert-head-policy"}
        assert [c.action for c in result.changes if c.name == "bert-head-policy"] in ([], ["update"])
        assert len(result.notes) == 1 and f"bert-compute-lt: a new launch-template version ({what})" in result.notes[0]
        assert "group compute's running nodes" in result.notes[0] and "`hpcc replace NODE`" in result.notes[0]
    assert second_up(first_up, lambda c: c["compute"].update(count=9)).notes == []  # no template changed

    import yaml
    from typer.testing import CliRunner

    from infra.ops.cli import app

    config = copy.deepcopy(BASE)
    config["hpcc:cluster"]["compute"].update(placementGroup="reserved-pg", **manual)
    stack = tmp_path / "Pulumi.bert.yaml"
    stack.write_text(yaml.safe_dump({"config": config}))
    run = CliRunner().invoke(
        app, ["plan", str(stack), "--out", str(tmp_path / "out"), "--previous", str(first_up)], terminal_width=200
    )
    assert run.exit_code == 0, run.output
    assert "keep the old setting until replaced: `hpcc replace NODE` for each" in " ".join(run.output.split())


def test_a_rolling_group_is_replaced_by_the_controller_and_the_plan_says_how_in_the_users_terms(first_up):
    """updateStrategy rolling (the default) or terminate: the controller replaces the group's nodes, maxUnavailable at
    a time (hpcc_node/controller/decide_rolling.py); an IMDS-only change is applied in place."""
    result = second_up(first_up, lambda c: c["compute"].update(instanceType="p4d.24xlarge", maxUnavailable=2))
    assert (
        "compute: 8 nodes replaced by the controller, 2 at a time, after their jobs (p3dn.24xlarge -> p4d.24xlarge)"
        in result.notes[0]
    )
    now = second_up(first_up, lambda c: c["compute"].update(rootVolumeGiB=400, updateStrategy="terminate"))
    assert "compute: 8 nodes replaced by the controller, 1 at a time, at once" in now.notes[0]
    assert "(blockDeviceMappings)" in now.notes[0]
    imds = second_up(first_up, lambda c: c.update(security={"imdsForContainers": True}))
    assert "compute: the IMDS options are applied to the running instances in place; no node is replaced" in imds.notes
