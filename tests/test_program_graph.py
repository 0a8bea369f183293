"""The resource graph of every example, asserted on the recorded registrations and on moto's state."""

import json

from policy import iam_rules

import pytest

from tests.instance_data import facts_for as lookup
from infra.efa import efa_device_count, interface_layout
from infra.naming import TAG_CLUSTER

LT = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
UNTAGGABLE = {"aws:ec2/route:Route", "aws:ec2/routeTableAssociation:RouteTableAssociation",
              "aws:iam/rolePolicyAttachment:RolePolicyAttachment", "aws:iam/rolePolicy:RolePolicy",
              # a bucket's settings: sub-resources of the (tagged) bucket, with no tags of their own in S3
              "aws:s3/bucketPolicy:BucketPolicy", "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
              "aws:s3/bucketVersioning:BucketVersioning",
              "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"}


def _sg(env, name):
    return env.client("ec2").describe_security_groups(Filters=[{"Name": "tag:Name", "Values": [name]}])["SecurityGroups"][0]


def test_efa_group_allows_all_traffic_to_and_from_itself(planned):
    result, env = planned
    c = result.config.cluster.name
    sg = _sg(env, f"{c}-nodes-sg")
    self_in = [p for p in sg["IpPermissions"] if p["IpProtocol"] == "-1"
               and [g["GroupId"] for g in p["UserIdGroupPairs"]] == [sg["GroupId"]]]
    self_out = [p for p in sg["IpPermissionsEgress"] if p["IpProtocol"] == "-1"
                and [g["GroupId"] for g in p["UserIdGroupPairs"]] == [sg["GroupId"]]]
    internet_out = [p for p in sg["IpPermissionsEgress"] if p["IpProtocol"] == "-1"
                    and {r["CidrIp"] for r in p.get("IpRanges", [])} == {"0.0.0.0/0"}]
    assert self_in and self_out and internet_out
    assert not any(r.get("CidrIp") == "0.0.0.0/0" for p in sg["IpPermissions"] for r in p.get("IpRanges", []))


def test_lustre_ports_open_between_nodes_and_file_system_before_it_exists(planned):
    result, env = planned
    c = result.config.cluster.name
    nodes, lustre = _sg(env, f"{c}-nodes-sg"), _sg(env, f"{c}-lustre-sg")
    for port in (988, 1018, 1021, 1023):
        for src in (nodes["GroupId"], lustre["GroupId"]):
            assert any(p["IpProtocol"] == "tcp" and p["FromPort"] <= port <= p["ToPort"]
                       and src in [g["GroupId"] for g in p["UserIdGroupPairs"]] for p in lustre["IpPermissions"]), (port, src)
    rules = {r["name"] for r in result.resources if r["name"].startswith(f"{c}-lustre-in-")}
    assert rules and rules <= set(result.named(f"{c}-fsx")["dependsOn"])


def test_nodes_and_file_system_share_one_subnet_and_az(planned):
    result, env = planned
    cluster = result.config.cluster
    ec2 = env.client("ec2")
    reservations = ec2.describe_instances(Filters=[{"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster.name]}])["Reservations"]
    instances = {next(t["Value"] for t in i["Tags"] if t["Key"] == "hpcc:node"): i
                 for r in reservations for i in r["Instances"]}
    assert len(instances) == cluster.compute.count + 1
    private = ec2.describe_subnets(Filters=[{"Name": "tag:Name", "Values": [f"{cluster.name}-private"]}])["Subnets"][0]
    compute = [i for n, i in instances.items() if n != "head"]
    assert {i["SubnetId"] for i in compute} == {private["SubnetId"]}
    assert {i["Placement"]["AvailabilityZone"] for i in instances.values()} == {result.outputs["availabilityZone"]}
    head_subnet = instances["head"]["SubnetId"]
    assert (head_subnet != private["SubnetId"]) == bool(cluster.ssh.allowed_cidrs)
    fs = env.client("fsx").describe_file_systems()["FileSystems"][0]
    assert fs["SubnetIds"] == [private["SubnetId"]]
    assert {t["Key"]: t["Value"] for t in fs["Tags"]}[TAG_CLUSTER] == cluster.name
    assert all(i["MetadataOptions"]["HttpTokens"] == "required" for i in instances.values())


def test_launch_templates_carry_the_type_s_efa_layout(planned):
    result, _ = planned
    cluster = result.config.cluster
    for role, type_name, efa_wanted in (("compute", cluster.compute.instance_type, cluster.compute.efa is not False),
                                        ("head", cluster.head_node.instance_type, True)):
        itype = lookup(type_name)
        nics = result.named(f"{cluster.name}-{role}-lt")["inputs"]["networkInterfaces"]
        layout = [(n["networkCardIndex"], n["deviceIndex"], n["interfaceType"]) for n in nics]
        expected = interface_layout(itype, efa_wanted)
        assert layout == [(s.network_card_index, s.device_index, s.interface_type) for s in expected]
        efa = sum(1 for n in nics if n["interfaceType"] in ("efa", "efa-only"))
        assert efa == efa_device_count(expected) == (min(itype.network_cards, itype.efa_max_interfaces) if efa_wanted and itype.efa_supported else 0)
        if len(nics) > 1:
            assert all(n.get("associatePublicIpAddress") in (None, "false") for n in nics)
        assert len({n["subnetId"] for n in nics}) == 1


def test_p5_gets_every_efa_interface_it_supports(planned):
    result, _ = planned
    if result.config.cluster.compute.instance_type != "p5.48xlarge":
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
    compute = result.config.cluster.compute
    for lt in result.of_type(LT):
        i = lt["inputs"]
        assert i["metadataOptions"]["httpTokens"] == "required"
        assert all(b["ebs"]["encrypted"] == "true" for b in i["blockDeviceMappings"])
        # Nodes launched into a reservation go into its own group or none (infra/components/compute.py).
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
    doc = env.client("iam").get_role_policy(RoleName=f"hpcc-{c}-node", PolicyName="hpcc-cluster-access")["PolicyDocument"]
    doc = json.loads(doc) if isinstance(doc, str) else doc
    resources = [r for s in doc["Statement"] if s["Effect"] == "Allow" and s.get("Sid") != "SessionManager"
                 for r in s["Resource"]]
    slurm = result.config.cluster.scheduler == "slurm"
    secrets = (f"secret:hpcc/{c}/ssh-key", f"secret:hpcc/{c}/user-key") + ((f"secret:hpcc/{c}/munge-key",) if slurm else ())
    bundles = f"arn:aws:s3:::hpcc-{c}-bundles-{env.account}/bundles/*"  # the bundles only, read-only
    assert all(f"parameter/hpcc/{c}" in r or any(s in r for s in secrets) or r == bundles for r in resources), resources
    assert [s["Action"] for s in doc["Statement"] if bundles in s.get("Resource", [])] == [["s3:GetObject"]]
    assert slurm == any("munge-key" in r for r in resources)
    assert not any("host-ca" in r for r in resources)  # the head's alone
    deny = next(s for s in doc["Statement"] if s["Effect"] == "Deny")  # narrows any managed policy's reads
    assert "ssm:GetParameter" in deny["Action"] and all(f"parameter/hpcc/{c}" in r for r in deny["NotResource"])
    attached = env.client("iam").list_attached_role_policies(RoleName=f"hpcc-{c}-node")["AttachedPolicies"]
    assert attached == []  # no AmazonSSMManagedInstanceCore: Session Manager's minimal permissions are inline
    session = next(s for s in doc["Statement"] if s.get("Sid") == "SessionManager")
    assert set(session["Action"]) == iam_rules.SESSION_MANAGER and session["Resource"] == "*"


def test_stack_outputs(planned):
    result, env = planned
    cluster = result.config.cluster
    out = result.outputs
    assert set(out) == {"clusterName", "region", "availabilityZone", "headNode", "computeNodes", "hostfile", "fsx",
                        "sshCommand", "estimatedHourlyCostUsd"}
    names = [n["name"] for n in out["computeNodes"]]
    assert names == sorted(names) == [f"compute-{i:03d}" for i in range(cluster.compute.count)]
    itype = lookup(cluster.compute.instance_type)
    slots = itype.gpus or itype.cores
    assert out["hostfile"].splitlines() == [f"{n['privateIp']} slots={slots}" for n in out["computeNodes"]]
    ec2 = env.client("ec2")
    for node in out["computeNodes"]:
        inst = ec2.describe_instances(InstanceIds=[node["instanceId"]])["Reservations"][0]["Instances"][0]
        assert inst["PrivateIpAddress"] == node["privateIp"] and inst["InstanceType"] == itype.name
    fs = env.client("fsx").describe_file_systems(FileSystemIds=[out["fsx"]["id"]])["FileSystems"][0]
    assert out["fsx"]["dnsName"] == fs["DNSName"] and out["fsx"]["mountName"]
    assert out["fsx"]["mountPoint"] == cluster.fsx.mount_point
    assert (out["headNode"]["publicIp"] is not None) == bool(cluster.ssh.allowed_cidrs)
    assert out["estimatedHourlyCostUsd"] > cluster.compute.count * itype.hourly_usd


def test_fsx_parameter_and_hosts_parameter_are_what_the_bootstrap_waits_for(planned):
    result, env = planned
    c = result.config.cluster.name
    ssm = env.client("ssm")
    fsx = json.loads(ssm.get_parameter(Name=f"/hpcc/{c}/fsx")["Parameter"]["Value"])
    assert fsx == {"dnsName": result.outputs["fsx"]["dnsName"], "mountName": result.outputs["fsx"]["mountName"]}
    hosts = ssm.get_parameter(Name=f"/hpcc/{c}/hosts")["Parameter"]["Value"].splitlines()
    assert hosts == [result.outputs["headNode"]["privateIp"]] + [n["privateIp"] for n in result.outputs["computeNodes"]]
    status = ssm.get_parameters_by_path(Path=f"/hpcc/{c}/nodes")["Parameters"]
    assert len(status) == min(10, result.config.cluster.compute.count + 1)


def test_user_data_is_rendered_per_role_and_holds_no_key(planned):
    result, _ = planned
    c = result.config.cluster.name
    assert set(result.user_data) == {f"{c}-head-lt", f"{c}-compute-lt"}
    for script in result.user_data.values():
        assert script.startswith("#!/bin/bash") and c in script
        assert "PRIVATE KEY" not in script
