"""The provider's replacement rules (infra/plan/replacement_rules.py): spot checks of the facts the day-2
plan depends on, and an entry for every type the examples register."""

import pytest

from infra.plan.replacement_rules import RULES, forcing_paths, recomputed_outputs, rule_for

SUBNET = "aws:ec2/subnet:Subnet"
LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
SG = "aws:ec2/securityGroup:SecurityGroup"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
PARAM = "aws:ssm/parameter:Parameter"


def forces(token, path, old=None, new=None):
    return forcing_paths(token, [path], old or {}, new or {}) == [path]


def test_every_type_the_examples_register_has_a_rule_with_a_source(planned):
    result, _ = planned
    custom = {r["type"] for r in result.resources if r["custom"]}
    assert custom and custom <= set(RULES)
    assert all(RULES[t].source for t in custom)


def test_unknown_type_names_the_table_to_extend():
    with pytest.raises(KeyError, match="replacement_rules.py"):
        rule_for("aws:ec2/volume:Volume")


@pytest.mark.parametrize("path", ["availabilityZone", "cidrBlock", "vpcId"])
def test_subnet_placement_forces_a_new_subnet(path):
    assert forces(SUBNET, path)


def test_subnet_tags_update_in_place():
    assert not forces(SUBNET, "tags.Name")


def test_subnet_ipv6_block_replaces_only_when_it_assigned_addresses_on_creation():
    assert forces(SUBNET, "ipv6CidrBlock", {"assignIpv6AddressOnCreation": True}, {})
    assert not forces(SUBNET, "ipv6CidrBlock", {"assignIpv6AddressOnCreation": False}, {})


@pytest.mark.parametrize("path", ["subnetIds", "deploymentType", "storageType", "securityGroupIds[0]"])
def test_lustre_placement_and_kind_force_a_new_file_system(path):
    assert forces(LUSTRE, path)


def test_lustre_capacity_grows_in_place_but_shrinking_or_scratch_1_replaces():
    grow = (
        {"storageCapacity": 1200, "deploymentType": "SCRATCH_2"},
        {"storageCapacity": 2400, "deploymentType": "SCRATCH_2"},
    )
    assert not forces(LUSTRE, "storageCapacity", *grow)
    assert forces(
        LUSTRE,
        "storageCapacity",
        {"storageCapacity": 4800, "deploymentType": "PERSISTENT_2"},
        {"storageCapacity": 2400, "deploymentType": "PERSISTENT_2"},
    )
    assert forces(
        LUSTRE,
        "storageCapacity",
        {"storageCapacity": 1200, "deploymentType": "SCRATCH_1"},
        {"storageCapacity": 2400, "deploymentType": "SCRATCH_1"},
    )


def test_lustre_version_upgrades_in_place_and_downgrade_replaces():
    assert not forces(
        LUSTRE, "fileSystemTypeVersion", {"fileSystemTypeVersion": "2.12"}, {"fileSystemTypeVersion": "2.15"}
    )
    assert forces(LUSTRE, "fileSystemTypeVersion", {"fileSystemTypeVersion": "2.15"}, {"fileSystemTypeVersion": "2.12"})


@pytest.mark.parametrize(
    "path",
    ["userData", "imageId", "networkInterfaces[0].securityGroups[0]", "instanceType", "tagSpecifications[0].tags.Name"],
)
def test_launch_template_edits_are_new_versions_in_place(path):
    assert not forces(LT, path)


def test_launch_template_edit_recomputes_its_versions_but_a_description_does_not():
    assert recomputed_outputs(LT, ["userData"], {"updateDefaultVersion": True}) == ("latestVersion", "defaultVersion")
    assert recomputed_outputs(LT, ["networkInterfaces[0].subnetId"], {}) == ("latestVersion",)
    assert recomputed_outputs(LT, ["description"], {"updateDefaultVersion": True}) == ()


@pytest.mark.parametrize("path", ["ami", "launchTemplate.id", "launchTemplate.name", "subnetId", "availabilityZone"])
def test_instance_force_new_fields(path):
    assert forces(INSTANCE, path)


def test_instance_user_data_replaces_only_with_replace_on_change():
    assert not forces(INSTANCE, "userData", {}, {"userData": "x"})
    assert forces(INSTANCE, "userData", {}, {"userData": "x", "userDataReplaceOnChange": True})
    assert forces(INSTANCE, "userDataBase64", {}, {"userDataBase64": "eA==", "userDataReplaceOnChange": True})


def test_instance_launch_template_version_change_replaces_unless_it_names_latest_or_default():
    assert forces(
        INSTANCE, "launchTemplate.version", {"launchTemplate": {"version": "1"}}, {"launchTemplate": {"version": "2"}}
    )
    assert not forces(
        INSTANCE,
        "launchTemplate.version",
        {"launchTemplate": {"version": "1"}},
        {"launchTemplate": {"version": "$Latest"}},
    )
    assert forces(INSTANCE, "launchTemplate", {}, {})  # a whole unknown block covers launchTemplate.id
    assert not forces(INSTANCE, "tags.Name")


def test_security_group_rule_source_kind_change_replaces_but_a_new_cidr_does_not():
    old = {"securityGroupId": "sg-1", "cidrIpv4": "10.0.0.0/16"}
    assert not forces(INGRESS, "cidrIpv4", old, {**old, "cidrIpv4": "10.1.0.0/16"})
    assert forces(INGRESS, "cidrIpv4", old, {"securityGroupId": "sg-1", "referencedSecurityGroupId": "sg-2"})
    assert forces(INGRESS, "securityGroupId")
    assert forces(SG, "description") and not forces(SG, "tags.Name")


def test_parameter_value_updates_in_place_and_bumps_its_version():
    assert not forces(PARAM, "value")
    assert forces(PARAM, "name")
    assert forces(PARAM, "tier", {"tier": "Advanced"}, {"tier": "Standard"})
    assert recomputed_outputs(PARAM, ["value"], {}) == ("version",)
    assert recomputed_outputs(PARAM, ["tags.Name"], {}) == ()


def test_lustre_throughput_changes_in_place_and_every_force_new_field_names_its_source():
    from infra.plan.replacement_rules import LUSTRE_FORCE_NEW

    assert not forces(
        LUSTRE,
        "perUnitStorageThroughput",
        {"perUnitStorageThroughput": 250},
        {"perUnitStorageThroughput": 500, "deploymentType": "PERSISTENT_2"},
    )
    assert forces(LUSTRE, "efaEnabled")
    assert set(RULES[LUSTRE].force_new) == set(LUSTRE_FORCE_NEW) and all(LUSTRE_FORCE_NEW.values())
