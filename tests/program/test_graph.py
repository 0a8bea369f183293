"""The resource graph of every example, asserted on the recorded registrations and on moto's state."""

import json

import pytest

from hpcc_contract import names
from hpcc_contract.names import TAG_CLUSTER
from infra.facts.efa import efa_device_count, interface_layout
from policy import iam_rules
from tests.facts.instance_data import facts_for as lookup

LT = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
UNTAGGABLE = {
    "aws:ec2/route:Route",
    "aws:ec2/routeTableAssociation:RouteTableAssociation",
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
    "aws:iam/rolePolicy:RolePolicy",
    # a bucket's settings: sub-resources of the (tagged) bucket, with no tags of their own in S3
    "aws:s3/bucketPolicy:BucketPolicy",
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
    "aws:s3/bucketVersioning:BucketVersioning",
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
}


def _sg(env, name):
    return env.client("ec2").describe_security_groups(Filters=[{"Name": "tag:Name", "Values": [name]}])[
        "SecurityGroups"
    ][0]


def test_efa_group_allows_all_traffic_to_and_from_itself(planned):
    result, env = planned
    c = result.config.cluster.name
    sg = _sg(env, f"{c}-nodes-sg")
    self_in = [
        p
        for p in sg["IpPermissions"]
        if p["IpProtocol"] == "-1" and [g["GroupId"] for g in p["UserIdGroupPairs"]] == [sg["GroupId"]]
    ]
    self_out = [
        p
        for p in sg["IpPermissionsEgress"]
        if p["IpProtocol"] == "-1" and [g["GroupId"] for g in p["UserIdGroupPairs"]] == [sg["GroupId"]]
    ]
    internet_out = [
        p
        for p in sg["IpPermissionsEgress"]
        if p["IpProtocol"] == "-1" and {r["CidrIp"] for r in p.get("IpRanges", [])} == {"0.0.0.0/0"}
    ]
    assert self_in and self_out and internet_out
    assert not any(r.get("CidrIp") == "0.0.0.0/0" for p in sg["IpPermissions"] for r in p.get("IpRanges", []))


def test_lustre_ports_open_between_nodes_and_file_system_before_it_exists(planned):
    result, env = planned
    c = result.config.cluster.name
    nodes, lustre = _sg(env, f"{c}-nodes-sg"), _sg(env, f"{c}-lustre-sg")
    for port in (988, 1018, 1021, 1023):
        for src in (nodes["GroupId"], lustre["GroupId"]):
            assert any(
                p["IpProtocol"] == "tcp"
                and p["FromPort"] <= port <= p["ToPort"]
                and src in [g["GroupId"] for g in p["UserIdGroupPairs"]]
                for p in lustre["IpPermissions"]
            ), (port, src)
    rules = {r["name"] for r in result.resources if r["name"].startswith(f"{c}-lustre-in-")}
    assert rules and rules <= set(result.named(f"{c}-fsx")["dependsOn"])


def test_nodes_and_file_system_share_one_subnet_and_az(planned):
    """Pulumi launches only the head; each group's nodes go where its parameter entry says (the controller's
    fleet override): the private subnet and the cluster's AZ, as the file system."""
    result, env = planned
    cluster = result.config.cluster
    ec2 = env.client("ec2")
    reservations = ec2.describe_instances(Filters=[{"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster.name]}])[
        "Reservations"
    ]
    instances = {
        next(t["Value"] for t in i["Tags"] if t["Key"] == "hpcc:node"): i for r in reservations for i in r["Instances"]
    }
    assert list(instances) == ["head"]
    private = ec2.describe_subnets(Filters=[{"Name": "tag:Name", "Values": [f"{cluster.name}-private"]}])["Subnets"][0]
    groups = json.loads(env.client("ssm").get_parameter(Name=names.Paths(cluster.name).groups)["Parameter"]["Value"])
    assert {(g["subnet_id"], g["availability_zone"]) for g in groups["groups"]} == {
        (private["SubnetId"], result.outputs["availabilityZone"])
    }
    assert instances["head"]["Placement"]["AvailabilityZone"] == result.outputs["availabilityZone"]
    head_subnet = instances["head"]["SubnetId"]
    assert (head_subnet != private["SubnetId"]) == bool(cluster.ssh.allowed_cidrs)
    fs = env.client("fsx").describe_file_systems()["FileSystems"][0]
    assert fs["SubnetIds"] == [private["SubnetId"]]
    assert {t["Key"]: t["Value"] for t in fs["Tags"]}[TAG_CLUSTER] == cluster.name
    assert all(i["MetadataOptions"]["HttpTokens"] == "required" for i in instances.values())


def test_launch_templates_carry_the_type_s_efa_layout(planned):
    result, _ = planned
    cluster = result.config.cluster
    templates = [(g.name, g.instance_type, g.efa is not False) for g in cluster.node_groups]
    for what, type_name, efa_wanted in templates + [("head", cluster.head_node.instance_type, True)]:
        itype = lookup(type_name)
        nics = result.named(f"{cluster.name}-{what}-lt")["inputs"]["networkInterfaces"]
        layout = [(n["networkCardIndex"], n["deviceIndex"], n["interfaceType"]) for n in nics]
        expected = interface_layout(itype, efa_wanted)
        assert layout == [(s.network_card_index, s.device_index, s.interface_type) for s in expected]
        efa = sum(1 for n in nics if n["interfaceType"] in ("efa", "efa-only"))
        assert (
            efa
            == efa_device_count(expected)
            == (min(itype.network_cards, itype.efa_max_interfaces) if efa_wanted and itype.efa_supported else 0)
        )
        if len(nics) > 1:
            assert all(n.get("associatePublicIpAddress") in (None, "false") for n in nics)
        # The head's template names its subnet (Pulumi launches it); a group's none (the fleet's override does).
        assert [n.get("subnetId") is not None for n in nics] == [what == "head"] * len(nics)


def test_p5_gets_every_efa_interface_it_supports(planned):
    result, _ = planned
    if result.config.cluster.node_groups[0].instance_type != "p5.48xlarge":
        pytest.skip("this example's compute nodes are not p5.48xlarge (the p5 example checks it)")
    nics = result.named(f"{result.config.cluster.name}-compute-lt")["inputs"]["networkInterfaces"]
    assert len(nics) == 33 and sum(n["interfaceType"] == "efa-only" for n in nics) == 32
    assert (nics[0]["networkCardIndex"], nics[0]["deviceIndex"], nics[0]["interfaceType"]) == (0, 0, "interface")
    assert sorted(n["networkCardIndex"] for n in nics if n["interfaceType"] == "efa-only") == [0] + list(range(1, 32))


def test_launch_templates_require_imdsv2_encrypt_root_and_use_the_placement_group(planned):
    result, _ = planned
    c = result.config.cluster.name
    group = result.named(f"{c}-placement")["inputs"]
    assert group["strategy"] == "cluster"
    compute = result.config.cluster.node_groups[0]
    for lt in result.of_type(LT):
        i = lt["inputs"]
        assert i["metadataOptions"]["httpTokens"] == "required"
        assert all(b["ebs"]["encrypted"] == "true" for b in i["blockDeviceMappings"])
        # Nodes launched into a reservation go into its own group or none (infra/program/components/compute.py).
        reserved = lt["name"] == f"{c}-compute-lt" and compute.capacity_reservation_id
        assert i["placement"].get("groupName") == (compute.placement_group if reserved else group["name"])
        assert i["placement"]["availabilityZone"] == result.outputs["availabilityZone"]
        assert "vpcSecurityGroupIds" not in i  # with interfaces, groups go on each interface
    market = result.named(f"{c}-compute-lt")["inputs"].get("instanceMarketOptions", {}).get("marketType", "on-demand")
    assert market == compute.market


def _closure(result, name):
    seen, todo = set(), [name]
    while todo:
        for dep in result.named(todo.pop())["dependsOn"]:
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_instances_do_not_wait_for_the_file_system(planned):
    result, _ = planned
    c = result.config.cluster.name
    for inst in result.of_type(INSTANCE):
        assert f"{c}-fsx" not in _closure(result, inst["name"])
    assert f"{c}-fsx" in _closure(result, f"{c}-fsx-param")


def test_every_taggable_resource_is_tagged_with_the_cluster(planned):
    result, _ = planned
    c = result.config.cluster.name
    custom = [r for r in result.resources if r["type"].startswith("aws:") and r["type"] not in UNTAGGABLE]
    assert len(custom) > 30
    for r in custom:
        assert r["inputs"].get("tags", {}).get(TAG_CLUSTER) == c, r["name"]
        for k, v in result.config.cluster.tags.items():
            assert r["inputs"]["tags"][k] == v


def test_node_role_reads_only_the_cluster_s_own_parameters_and_secret(planned):
    result, env = planned
    c = result.config.cluster.name
    doc = env.client("iam").get_role_policy(RoleName=names.role_name(c, "compute"), PolicyName="hpcc-cluster-access")[
        "PolicyDocument"
    ]
    doc = json.loads(doc) if isinstance(doc, str) else doc
    resources = [
        r
        for s in doc["Statement"]
        if s["Effect"] == "Allow" and s.get("Sid") not in ("SessionManager", "EcrToken", "EcrPull")
        for r in s["Resource"]
    ]
    slurm = result.config.cluster.scheduler == "slurm"
    paths = names.Paths(c)
    secrets = (f"secret:{paths.ssh_secret}", f"secret:{paths.user_secret}") + (
        (f"secret:{paths.munge_secret}",) if slurm else ()
    )
    bundles = (
        f"arn:aws:s3:::{names.bundle_bucket(c, env.account)}/{names.BUNDLES_PREFIX}*"  # the bundles only, read-only
    )
    state = f"arn:aws:s3:::{names.state_bucket(c, env.account)}"
    own_status, membership = state + "/status/${ec2:SourceInstanceARN}.json", state + "/membership.json"
    own_keys, certificates = state + "/hostkeys/${ec2:SourceInstanceARN}.json", state + "/certs/*"
    statuses = state + "/status/*"  # read-only: a rollout waits on the canaries' statuses
    deltas = state + "/membership-deltas/*"  # read-only: each generation's change (membership.follow)
    assert all(
        f"parameter{paths.prefix}" in r
        or any(s in r for s in secrets)
        or r in (bundles, own_status, membership, deltas, statuses, own_keys, certificates)
        for r in resources
    ), resources
    assert [s["Action"] for s in doc["Statement"] if bundles in s.get("Resource", [])] == [["s3:GetObject"]]
    for written in (own_status, own_keys):
        assert [s["Action"] for s in doc["Statement"] if written in s.get("Resource", [])] == [["s3:PutObject"]]
    for read in (membership, statuses, certificates):
        assert [s["Action"] for s in doc["Statement"] if read in s.get("Resource", [])] == [["s3:GetObject"]]
    assert not [a for s in doc["Statement"] for a in s["Action"] if a.startswith(("dynamodb:", "ec2:", "iam:"))]
    assert slurm == any("munge-key" in r for r in resources)
    assert not any("host-ca" in r for r in resources)  # the head's alone
    deny = next(s for s in doc["Statement"] if s["Effect"] == "Deny")  # narrows any managed policy's reads
    assert "ssm:GetParameter" in deny["Action"] and all(f"parameter{paths.prefix}" in r for r in deny["NotResource"])
    attached = env.client("iam").list_attached_role_policies(RoleName=names.role_name(c, "compute"))["AttachedPolicies"]
    assert attached == []  # no AmazonSSMManagedInstanceCore: Session Manager's minimal permissions are inline
    session = next(s for s in doc["Statement"] if s.get("Sid") == "SessionManager")
    assert set(session["Action"]) == iam_rules.SESSION_MANAGER and session["Resource"] == "*"
    # With containers (on with Slurm) and ECR (containers.ecr): pulls from the account's repositories in the Region
    # alone; the token's action has no resource to name (ECR's IAM reference: GetAuthorizationToken takes "*").
    ecr = {s["Sid"]: s for s in doc["Statement"] if s.get("Sid") in ("EcrToken", "EcrPull")}
    if result.config.cluster.containers_on and result.config.cluster.containers.ecr:
        assert ecr["EcrToken"]["Action"] == ["ecr:GetAuthorizationToken"]
        assert not {a for a in ecr["EcrPull"]["Action"] if not a.startswith("ecr:")}
        assert ecr["EcrPull"]["Resource"] == [f"arn:aws:ecr:{env.region}:{env.account}:repository/*"]
    else:
        assert ecr == {}


def test_the_heads_controller_acts_only_on_its_own_cluster(planned):
    result, env = planned
    c = result.config.cluster.name
    doc = env.client("iam").get_role_policy(RoleName=names.role_name(c, "head"), PolicyName="hpcc-cluster-access")[
        "PolicyDocument"
    ]
    doc = json.loads(doc) if isinstance(doc, str) else doc
    by_sid = {s["Sid"]: s for s in doc["Statement"]}
    own = {"StringEquals": {"aws:ResourceTag/hpcc:cluster": c}}
    assert by_sid["TerminateClusterInstances"]["Condition"] == own
    assert by_sid["RebootClusterInstances"] == {
        "Sid": "RebootClusterInstances",
        "Effect": "Allow",
        "Action": ["ec2:RebootInstances"],
        "Condition": own,
        "Resource": [f"arn:aws:ec2:{result.config.region}:{env.account}:instance/*"],
    }
    assert by_sid["ModifyClusterInstanceMetadata"] == {  # a rolling update's IMDS options, in place
        "Sid": "ModifyClusterInstanceMetadata",
        "Effect": "Allow",
        "Action": ["ec2:ModifyInstanceMetadataOptions"],
        "Condition": own,
        "Resource": [f"arn:aws:ec2:{result.config.region}:{env.account}:instance/*"],
    }
    assert by_sid["LaunchFromClusterTemplates"]["Condition"] == own
    template = {"ec2:LaunchTemplate": f"arn:aws:ec2:{result.config.region}:{env.account}:launch-template/*"}
    assert by_sid["LaunchTaggedWithCluster"]["Condition"] == {
        "StringEquals": {"aws:RequestTag/hpcc:cluster": c},
        "ArnLike": template,
    }
    assert by_sid["NameClusterInstances"]["Condition"]["ForAllValues:StringEquals"] == {"aws:TagKeys": ["hpcc:node"]}
    assert by_sid["Ledger"]["Resource"] == [
        f"arn:aws:dynamodb:{result.config.region}:{env.account}:table/{names.ledger_table(c)}"
    ]
    assert by_sid["PassComputeRole"]["Resource"] == [f"arn:aws:iam::{env.account}:role/{names.role_name(c, 'compute')}"]
    unconditioned = [
        s
        for s in doc["Statement"]
        if s["Effect"] == "Allow" and "Condition" not in s and any(a.startswith("ec2:") for a in s["Action"])
    ]
    assert {s["Sid"] for s in unconditioned} == {"ControllerReads"}  # every launch input under a condition
    assert all(a.startswith("ec2:Describe") for a in by_sid["ControllerReads"]["Action"])


def test_stack_outputs(planned):
    result, env = planned
    cluster = result.config.cluster
    out = result.outputs
    assert set(out) == {
        "clusterName",
        "region",
        "availabilityZone",
        "headNode",
        "nodeGroups",
        "stateBucket",
        "ledgerTable",
        "fsx",
        "sshCommand",
        "estimatedHourlyCostUsd",
    }
    assert [(g["name"], g["count"], g["nodes"]) for g in out["nodeGroups"]] == [
        (g.name, g.count, f"{g.name}-000..{g.name}-{g.count - 1:03d}") for g in cluster.node_groups
    ]
    itype = lookup(cluster.node_groups[0].instance_type)
    assert out["nodeGroups"][0]["slots"] == itype.slots
    assert out["stateBucket"] == names.state_bucket(cluster.name, env.account)
    assert out["ledgerTable"] == names.ledger_table(cluster.name)
    env.client("dynamodb").describe_table(TableName=out["ledgerTable"])  # created in the embedded AWS
    env.client("s3").head_bucket(Bucket=out["stateBucket"])
    fs = env.client("fsx").describe_file_systems(FileSystemIds=[out["fsx"]["id"]])["FileSystems"][0]
    assert out["fsx"]["dnsName"] == fs["DNSName"] and out["fsx"]["mountName"]
    assert out["fsx"]["mountPoint"] == cluster.fsx.mount_point
    assert (out["headNode"]["publicIp"] is not None) == bool(cluster.ssh.allowed_cidrs)
    assert out["estimatedHourlyCostUsd"] > cluster.node_groups[0].count * itype.hourly_usd


def test_fsx_and_groups_parameters_are_what_the_nodes_and_controller_read(planned):
    result, env = planned
    c = result.config.cluster.name
    ssm = env.client("ssm")
    paths = names.Paths(c)
    fsx = json.loads(ssm.get_parameter(Name=paths.fsx)["Parameter"]["Value"])
    assert fsx == {"dnsName": result.outputs["fsx"]["dnsName"], "mountName": result.outputs["fsx"]["mountName"]}
    groups = json.loads(ssm.get_parameter(Name=paths.groups)["Parameter"]["Value"])
    assert [(g["name"], g["count"], g["launch_template"]) for g in groups["groups"]] == [
        (g.name, g.count, names.launch_template_name(c, g.name)) for g in result.config.cluster.node_groups
    ]
    # No hosts or status parameters any more: membership and statuses are the state bucket's.
    found = {p["Name"] for p in ssm.get_parameters_by_path(Path=paths.prefix, Recursive=True)["Parameters"]}
    assert paths.hosts not in found and not any(n.startswith(paths.nodes + "/") for n in found)


def test_user_data_is_rendered_per_role_and_holds_no_key(planned):
    result, _ = planned
    c = result.config.cluster.name
    assert set(result.user_data) == {f"{c}-head-lt"} | {f"{c}-{g.name}-lt" for g in result.config.cluster.node_groups}
    for script in result.user_data.values():
        assert script.startswith("#!/bin/bash") and c in script
        assert "PRIVATE KEY" not in script
