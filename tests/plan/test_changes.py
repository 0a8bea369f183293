"""`hpcc plan --previous`: what a second `pulumi up` would do, from two offline plans."""

import copy
import json
import textwrap

import pytest
from typer.testing import CliRunner

from infra.ops.cli import app
from infra.plan import runner
from infra.plan.changes import plan_changes, refused
from infra.plan.guard import guarded
from infra.plan.previous import PreviousPlan, PreviousPlanError
from infra.plan.runner import plan_config

LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
SUBNET = "aws:ec2/subnet:Subnet"
SG = "aws:ec2/securityGroup:SecurityGroup"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
PARAM = "aws:ssm/parameter:Parameter"


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, request):
    """c6i-oneccl (SCRATCH_2, 1200 GiB) planned once, written as a previous plan."""
    from infra.config.stackfile import read_raw

    config = read_raw(request.config.rootpath / "examples" / "c6i-oneccl.yaml")
    out = tmp_path_factory.mktemp("baseline")
    result = plan_config(config)
    result.write(out)
    return config, result, out


def test_same_config_planned_twice_changes_nothing(baseline):
    config, first, out = baseline
    second = plan_config(copy.deepcopy(config), previous=PreviousPlan.load(out))
    assert second.changes == []
    # not vacuous: moto generated other ids and addresses the second time
    node = next(r for r in first.resources if r["type"] == INSTANCE)
    assert second.named(node["name"])["id"] != node["id"]
    lt = f"{first.config.cluster.name}-head-lt"  # a group's template names no subnet
    assert (
        second.named(lt)["inputs"]["networkInterfaces"][0]["subnetId"]
        != first.named(lt)["inputs"]["networkInterfaces"][0]["subnetId"]
    )


def test_growing_scratch_2_lustre_updates_it_in_place_and_nothing_else(baseline):
    config, first, out = baseline
    bigger = copy.deepcopy(config)
    bigger["hpcc:cluster"]["fsx"]["storageCapacityGiB"] = 2400
    changes = plan_config(bigger, previous=PreviousPlan.load(out)).changes
    assert [(c.name, c.type, c.action, c.properties) for c in changes] == [
        (f"{first.config.cluster.name}-fsx", LUSTRE, "update", ("storageCapacity",))
    ]


def test_scratch_to_persistent_replaces_the_file_system_which_hpcc_up_guards(baseline):
    config, first, out = baseline
    persistent = copy.deepcopy(config)
    persistent["hpcc:cluster"]["fsx"].update(deploymentType="PERSISTENT_2", perUnitStorageThroughput=250)
    changes = plan_config(persistent, previous=PreviousPlan.load(out)).changes
    fs = next(c for c in changes if c.type == LUSTRE)
    assert fs.action == "replace" and "deploymentType" in fs.properties
    assert fs in guarded(changes)
    # what reads the file system's outputs is unknown at preview: the endpoint parameter is updated
    assert {c.name: c.action for c in changes if c.type == PARAM} == {
        f"{first.config.cluster.name}-fsx-param": "update"
    }


PIN_PROGRAM = textwrap.dedent('''
    import os
    import pulumi
    import pulumi_aws as aws

    pin = aws.ssm.Parameter("pin", name="/t/pin", type="String", value=os.environ["HPCC_TEST_PIN"],
                            opts=pulumi.ResourceOptions(ignore_changes=["value"]))
    aws.ssm.Parameter("reader", name="/t/reader", type="String", value=pin.value.apply(lambda v: "image=" + v))
''')


def test_ignore_changes_keeps_the_previous_value_for_everything_downstream(tmp_path, monkeypatch, example_config):
    program = tmp_path / "pin_program.py"
    program.write_text(PIN_PROGRAM)
    monkeypatch.setattr(runner, "PROGRAM", program)
    monkeypatch.setenv("HPCC_TEST_PIN", "ami-first")
    first = plan_config(example_config("c6i-oneccl"))
    first.write(tmp_path / "first")

    monkeypatch.setenv("HPCC_TEST_PIN", "ami-second")
    second = plan_config(example_config("c6i-oneccl"), previous=PreviousPlan.load(tmp_path / "first"))
    assert second.named("pin")["inputs"]["value"] == "ami-first"
    assert second.named("reader")["inputs"]["value"] == "image=ami-first"
    assert second.changes == []
    # without an earlier plan the new value is what gets created (nothing to keep)
    assert plan_config(example_config("c6i-oneccl")).named("reader")["inputs"]["value"] == "image=ami-second"


# -- synthetic resource lists: propagation, create/delete, options -----------------------------------------


def res(name, token, inputs, deps=None, rid=None, outputs=None, **options):
    return {
        "name": name,
        "type": token,
        "inputs": inputs,
        "custom": True,
        "id": rid or f"id-{name}",
        "outputs": outputs or {},
        "dependsOn": sorted({d for ds in (deps or {}).values() for d in ds}),
        "propertyDependencies": deps or {},
        "options": {"protect": False, "ignoreChanges": [], "replaceOnChanges": [], **options},
    }


def cluster(subnet_az="us-east-1a", sg_description="nodes", lt_user_data="boot", suffix="1", **fs_options):
    """A subnet, a group, a file system in both, a launch template and an instance from its latest version;
    `suffix` stands for the ids and addresses another moto run would generate."""
    sn, sg = f"subnet-{suffix}", f"sg-{suffix}"
    return [
        res("private", SUBNET, {"availabilityZone": subnet_az, "cidrBlock": "10.0.16.0/20"}, rid=sn),
        res("nodes-sg", SG, {"description": sg_description, "name": "nodes"}, rid=sg),
        res(
            "fsx",
            LUSTRE,
            {"subnetIds": sn, "securityGroupIds": [sg], "storageCapacity": 1200, "deploymentType": "SCRATCH_2"},
            {"subnetIds": ["private"], "securityGroupIds": ["nodes-sg"]},
            rid=f"fs-{suffix}",
            outputs={"dnsName": f"fs-{suffix}.fsx.aws"},
            **fs_options,
        ),
        res(
            "lt",
            LT,
            {
                "userData": lt_user_data,
                "networkInterfaces": [{"subnetId": sn, "securityGroups": [sg]}],
                "updateDefaultVersion": True,
            },
            {"networkInterfaces": ["private", "nodes-sg"]},
            rid=f"lt-{suffix}",
            outputs={"latestVersion": 1, "defaultVersion": 1},
        ),
        res(
            "node-0",
            INSTANCE,
            {"launchTemplate": {"id": f"lt-{suffix}", "version": "1"}},
            {"launchTemplate": ["lt"]},
            rid=f"i-{suffix}",
            outputs={"privateIp": f"10.0.16.{suffix}"},
        ),
        res("hosts", PARAM, {"name": "/c/hosts", "value": f"10.0.16.{suffix}\n"}, {"value": ["node-0"]}),
    ]


def actions(changes):
    return {c.name: c.action for c in changes}


def test_synthetic_same_cluster_with_other_generated_values_has_no_changes():
    assert plan_changes(cluster(suffix="1"), cluster(suffix="2")) == []


def test_replaced_subnet_replaces_what_is_placed_in_it():
    changes = plan_changes(cluster(), cluster(subnet_az="us-east-1b", suffix="2"))
    assert actions(changes) == {
        "private": "replace",
        "fsx": "replace",
        "lt": "update",
        "node-0": "replace",
        "hosts": "update",
    }
    assert next(c for c in changes if c.name == "fsx").properties == ("subnetIds",)
    assert next(c for c in changes if c.name == "lt").properties == ("networkInterfaces[0].subnetId",)


def test_replaced_security_group_only_updates_the_launch_template_whose_new_version_replaces_instances():
    changes = plan_changes(cluster(), cluster(sg_description="nodes v2", suffix="2"))
    assert actions(changes)["lt"] == "update"
    assert actions(changes)["node-0"] == "replace"
    assert next(c for c in changes if c.name == "node-0").properties == ("launchTemplate.version",)
    assert actions(changes)["fsx"] == "replace"  # FSx security_group_ids is ForceNew


def test_created_and_deleted_resources():
    old = cluster()
    new = cluster(suffix="2")[:-1] + [res("hosts-v2", PARAM, {"name": "/c/hosts2", "value": "x"})]
    changes = plan_changes(old, new)
    assert [(c.name, c.action, c.properties) for c in changes] == [("hosts", "delete", ()), ("hosts-v2", "create", ())]


def test_components_are_never_listed():
    component = {**res("compute", "hpcc:cluster:Compute", {}), "custom": False}
    assert plan_changes([], [component]) == []


def test_replace_on_changes_replaces_what_the_provider_would_update():
    old, new = cluster(), cluster(suffix="2")
    new[5]["inputs"]["value"] = "10.0.16.9\n"
    assert actions(plan_changes(old, new)) == {"hosts": "update"}
    new[5]["options"]["replaceOnChanges"] = ["value"]
    assert actions(plan_changes(old, new)) == {"hosts": "replace"}


def test_ignored_paths_do_not_count_even_when_a_dependency_is_replaced():
    old, new = cluster(), cluster(subnet_az="us-east-1b", suffix="2")
    new[2]["options"]["ignoreChanges"] = ["subnetIds"]
    assert "fsx" not in actions(plan_changes(old, new))


def test_wildcard_ignore_paths_cover_what_they_name():
    old, new = cluster(), cluster(suffix="2")
    old[5]["inputs"]["tags"] = {"owner": "a"}
    new[5]["inputs"]["tags"] = {"owner": "x"}
    assert actions(plan_changes(old, new)) == {"hosts": "update"}
    new[5]["options"]["ignoreChanges"] = ["tags.*"]
    assert plan_changes(old, new) == []
    new[5]["inputs"]["value"] = "other"
    new[5]["options"]["ignoreChanges"] = ["*"]
    assert plan_changes(old, new) == []
    assert PreviousPlan(old).kept_inputs(PARAM, "hosts", ["tags.*", "*"], []) == {}


def test_protected_file_system_replacement_and_deletion_are_refused():
    old, new = cluster(protect=True), cluster(subnet_az="us-east-1b", suffix="2", protect=True)
    changes = plan_changes(old, new)
    assert [c.name for c in refused(changes, old, new)] == ["fsx"]
    unprotected = cluster(subnet_az="us-east-1b", suffix="2")  # engine: replace refused only if protected in both
    assert refused(plan_changes(old, unprotected), old, unprotected) == []
    gone = [r for r in cluster(suffix="2") if r["name"] != "fsx"]
    assert [(c.name, c.action) for c in refused(plan_changes(old, gone), old, gone)] == [("fsx", "delete")]


# -- the CLI -------------------------------------------------------------------------------------------------


def test_cli_writes_changes_json_and_prints_the_table(baseline, tmp_path):
    config, first, out = baseline
    import yaml

    persistent = copy.deepcopy(config)
    persistent["hpcc:cluster"]["fsx"].update(deploymentType="PERSISTENT_2", perUnitStorageThroughput=250)
    stack = tmp_path / "Pulumi.new.yaml"
    stack.write_text(yaml.safe_dump({"config": persistent}))
    run = CliRunner().invoke(
        app, ["plan", str(stack), "--out", str(tmp_path / "new"), "--previous", str(out)], terminal_width=200
    )
    assert run.exit_code == 0, run.output
    written = json.loads((tmp_path / "new" / "changes.json").read_text())
    assert written == sorted(written, key=lambda c: c["name"])
    assert {
        "name": f"{first.config.cluster.name}-fsx",
        "type": LUSTRE,
        "action": "replace",
        "properties": ["deploymentType", "perUnitStorageThroughput"],
    } in written
    assert "Replaced and deleted" in run.output and "guarded" in run.output
    assert f"{first.config.cluster.name}-fsx" in run.output


@pytest.mark.parametrize(
    "make",
    [
        lambda d: d / "missing",
        lambda d: d,  # a directory without resources.json
        lambda d: (d / "resources.json").write_text("{not json") and d,
        lambda d: (d / "resources.json").write_text('[{"type": "t", "name": "n"}]') and d,
    ],
)
def test_cli_bad_previous_exits_2_with_a_message(tmp_path, make):
    previous = make(tmp_path)
    run = CliRunner().invoke(
        app, ["plan", "examples/c6i-oneccl.yaml", "--out", str(tmp_path / "out"), "--previous", str(previous)]
    )
    assert run.exit_code == 2
    assert "--previous" in run.output and "Traceback" not in run.output
    assert not (tmp_path / "out").exists()  # refused before planning anything
    with pytest.raises(PreviousPlanError):
        PreviousPlan.load(previous)


# -- the pieces ----------------------------------------------------------------------------------------------


def test_generated_values_match_whole_tokens_only():
    from infra.plan.symbols import replace_tokens

    table = {"10.0.1.5": "${node-0.privateIp}", "sg-1": "${sg.id}"}
    assert replace_tokens("10.0.1.55\n10.0.1.5", table) == "10.0.1.55\n${node-0.privateIp}"
    assert replace_tokens({"groups": ["sg-1", "sg-12"], "arn": "arn:aws:ec2:r:a:security-group/sg-1"}, table) == {
        "groups": ["${sg.id}", "sg-12"],
        "arn": "arn:aws:ec2:r:a:security-group/${sg.id}",
    }


def test_kept_inputs_take_old_values_in_the_new_plans_terms_and_drop_what_the_old_lacked():
    from infra.plan.paths import MISSING

    old = [
        res("pin", PARAM, {"value": "subnet-1 in us-east-1a", "tags": {"a": "1"}}),
        res("private", SUBNET, {}, rid="subnet-1"),
    ]
    kept = PreviousPlan(old).kept_inputs(
        PARAM, "pin", ["value", "tags.b", "bad[["], [res("private", SUBNET, {}, rid="subnet-9")]
    )
    assert kept == {"value": "subnet-9 in us-east-1a", "tags.b": MISSING}
    assert PreviousPlan(old).kept_inputs(PARAM, "new-one", ["value"], []) is None


def test_keep_ignored_sets_nested_paths_and_removes_what_the_old_inputs_lacked():
    from google.protobuf import struct_pb2
    from pulumi.runtime import rpc

    from infra.plan.paths import MISSING
    from infra.plan.recorder import keep_ignored, plain

    request_object = struct_pb2.Struct()
    request_object.update(
        {
            "tags": {"a": "1", "b": "2"},
            "gone": "x",
            "value": {rpc._special_sig_key: rpc._special_secret_sig, "value": "new"},
        }
    )
    keep_ignored(request_object, {"tags.b": MISSING, "tags.c": "3", "gone": MISSING, "value": "old"})
    assert plain(rpc.deserialize_properties(request_object)) == {"tags": {"a": "1", "c": "3"}, "value": "old"}
    assert request_object["value"][rpc._special_sig_key] == rpc._special_secret_sig  # still a secret


def test_replace_on_changes_paths_match_however_they_are_written():
    old, new = cluster(), cluster(suffix="2")
    old[4]["inputs"]["tags"] = {"hpcc:interfaces": "1 efa", "owner": "a"}
    new[4]["inputs"]["tags"] = {"hpcc:interfaces": "1 interface", "owner": "a"}
    new[4]["options"]["replaceOnChanges"] = ['tags["hpcc:interfaces"]']  # written as the program writes it
    assert actions(plan_changes(old, new)) == {"node-0": "replace", "hosts": "update"}
    new[4]["options"]["replaceOnChanges"] = ["tags[*]"]
    assert actions(plan_changes(old, new))["node-0"] == "replace"
    new[4]["options"]["replaceOnChanges"] = ['tags["owner"]']
    assert actions(plan_changes(old, new)) == {"node-0": "update"}
