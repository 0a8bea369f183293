"""The nodes' IAM, as planned: a role per node role, the SSH key written only by the head, and each node's status
object in the state bucket writable only by the instance it names. (No IAM evaluator runs offline: these check the
documents and the tags the conditions depend on; AWS evaluates `${ec2:SourceInstanceARN}` and `aws:ResourceTag`.)"""

import copy
import json

import pytest

from hpcc_contract.names import role_name
from infra.config.stackfile import read_raw
from infra.plan.runner import plan_config
from tests.ops.support import EXAMPLES

ROLE_POLICY, PROFILE = "aws:iam/rolePolicy:RolePolicy", "aws:iam/instanceProfile:InstanceProfile"


@pytest.fixture(scope="module")
def planned():
    return plan_config(read_raw(EXAMPLES / "c6i-oneccl.yaml"))


def statements(result, role: str) -> dict[str, dict]:
    [policy] = [r for r in result.of_type(ROLE_POLICY) if r["inputs"]["role"] == role_name("cpu-oneccl", role)]
    return {s["Sid"]: s for s in json.loads(policy["inputs"]["policy"])["Statement"]}


def test_only_the_head_can_write_the_ssh_key(planned):
    head, compute = statements(planned, "head"), statements(planned, "compute")
    assert "secretsmanager:PutSecretValue" in head["ClusterSshKey"]["Action"]
    assert compute["ClusterSshKey"]["Action"] == ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"]
    every_action = {a for s in compute.values() if s["Effect"] == "Allow" for a in s["Action"]}
    assert not {
        a
        for a in every_action
        if a.startswith("secretsmanager:") and not a.startswith(("secretsmanager:Get", "secretsmanager:Describe"))
    }


def test_a_compute_node_writes_only_its_own_status_object_and_no_parameter(planned):
    stmts = statements(planned, "compute")
    allowed = [s for s in stmts.values() if s["Effect"] == "Allow"]
    assert not [s for s in allowed if "ssm:PutParameter" in s["Action"]]
    writes = [s for s in allowed if any(a.startswith("s3:Put") for a in s["Action"])]
    # The policy variable is the caller's own instance ARN: another node's key, or any other, does not match.
    assert writes == [stmts["ReportOwnStatus"], stmts["PublishOwnHostKeys"]]
    assert [(w["Action"], w["Resource"]) for w in writes] == [
        (["s3:PutObject"], [f"arn:aws:s3:::hpcc-cpu-oneccl-state-123456789012/{what}/${{ec2:SourceInstanceARN}}.json"])
        for what in ("status", "hostkeys")
    ]
    # The certificates the head signed: read, never written (a node's root must not certify itself).
    assert stmts["ReadHostCertificates"]["Action"] == ["s3:GetObject"]
    assert stmts["ReadHostCertificates"]["Resource"] == ["arn:aws:s3:::hpcc-cpu-oneccl-state-123456789012/certs/*"]


def test_the_head_writes_the_state_bucket_and_the_ledger_only(planned):
    stmts = statements(planned, "head")
    assert not [s for s in stmts.values() if s["Effect"] == "Allow" and "ssm:PutParameter" in s["Action"]]
    assert stmts["StateObjects"]["Resource"] == ["arn:aws:s3:::hpcc-cpu-oneccl-state-123456789012/*"]
    assert stmts["Ledger"]["Resource"] == ["arn:aws:dynamodb:us-east-1:123456789012:table/hpcc-cpu-oneccl-ledger"]


def test_only_the_head_reads_the_host_ca(planned):
    [ca] = [
        r
        for r in planned.of_type("aws:secretsmanager/secret:Secret")
        if r["inputs"]["name"] == "hpcc/cpu-oneccl/host-ca"
    ]
    reads = {
        role: [
            s["Sid"]
            for s in statements(planned, role).values()
            if s["Effect"] == "Allow" and ca["outputs"]["arn"] in s.get("Resource", [])
        ]
        for role in ("head", "compute")
    }
    assert reads == {"head": ["HostCa"], "compute": []}


def test_each_role_launches_with_its_own_profile(planned):
    profiles = {r["inputs"]["name"]: r["outputs"]["arn"] for r in planned.of_type(PROFILE)}
    lts = {
        r["inputs"]["name"]: r["inputs"]["iamInstanceProfile"]["arn"]
        for r in planned.of_type("aws:ec2/launchTemplate:LaunchTemplate")
    }
    assert lts == {
        "hpcc-cpu-oneccl-head": profiles[role_name("cpu-oneccl", "head")],
        "hpcc-cpu-oneccl-compute": profiles[role_name("cpu-oneccl", "compute")],
    }


LAUNCHES = ("ec2:RunInstances", "ec2:CreateFleet")


def launch_statements(result, cluster: str) -> list[dict]:
    [policy] = [r for r in result.of_type(ROLE_POLICY) if r["inputs"]["role"] == role_name(cluster, "head")]
    return [
        s
        for s in json.loads(policy["inputs"]["policy"])["Statement"]
        if s["Effect"] == "Allow" and set(s["Action"]) & set(LAUNCHES)
    ]


@pytest.mark.parametrize(
    "example, types, reservations",
    [
        ("c6i-oneccl.yaml", ["c6i.16xlarge"], []),
        ("p5-capacity-block.yaml", ["p5.48xlarge"], ["cr-0123456789abcdef0"]),
    ],
)
def test_the_controller_launches_only_from_the_clusters_templates(example, types, reservations):
    """Issue 33, finding 5: whoever holds the head's credentials launches only what the cluster's launch templates
    say (their image and security groups), of the groups' types, with IMDSv2, into the cluster's subnets,
    placement groups and the groups' reservations, never another image, type, reservation of the account."""
    from hpcc_contract.names import placement_group_name
    from policy import iam_rules

    raw = read_raw(EXAMPLES / example)
    cluster = raw["hpcc:cluster"]["name"]
    stmts = launch_statements(plan_config(raw), cluster)
    ec2 = "arn:aws:ec2:us-east-1:123456789012"
    by_kind: dict[str, dict] = {}
    for s in stmts:
        assert iam_rules.launch_problems(s, cluster) == [], s
        for r in s["Resource"]:
            kind = r.split(":", 5)[5].split("/")[0]
            by_kind.setdefault(kind, s)
            if kind not in ("launch-template", "fleet"):
                assert s["Condition"]["ArnLike"] == {"ec2:LaunchTemplate": f"{ec2}:launch-template/*"}, s
    assert by_kind["launch-template"]["Condition"] == {"StringEquals": {"aws:ResourceTag/hpcc:cluster": cluster}}
    assert by_kind["image"]["Condition"]["Bool"] == {"ec2:IsLaunchTemplateResource": "true"}
    instance = by_kind["instance"]["Condition"]["StringEquals"]
    assert instance["ec2:InstanceType"] == types
    assert instance["ec2:MetadataHttpTokens"] == "required"
    granted = [r for s in stmts for r in s["Resource"]]
    assert [r for r in granted if ":capacity-reservation/" in r] == [
        f"{ec2}:capacity-reservation/{r}" for r in reservations
    ]
    assert f"{ec2}:placement-group/{placement_group_name(cluster)}" in granted
    assert not [r for r in granted if r.endswith(("placement-group/*", "capacity-reservation/*"))]


def test_the_controller_tags_its_instances_at_launch_with_every_tag_its_fleet_request_gives(planned):
    """CreateFleet's TagSpecifications are authorized as ec2:CreateTags with ec2:CreateAction (EC2 User Guide,
    "Grant permission to tag Amazon EC2 resources during creation"): the launch's tags, hpcc:launch among them
    (a restart finds a launch's instances by it), are allowed at creation; after it, only hpcc:node."""
    from hpcc_contract.names import TAG_LAUNCH_SPEC, TAG_NODE, TAG_TEMPLATE_VERSION
    from hpcc_node.controller import fleet
    from hpcc_node.controller.model import Group

    head = statements(planned, "head")
    at_launch = head["TagOnLaunch"]
    assert at_launch["Action"] == ["ec2:CreateTags"]
    assert any(r.endswith(":instance/*") for r in at_launch["Resource"])
    assert "CreateFleet" in at_launch["Condition"]["StringEquals"]["ec2:CreateAction"]
    assert at_launch["Condition"]["StringEquals"]["aws:RequestTag/hpcc:cluster"] == "cpu-oneccl"
    # with the version and spec tags a rolling replacement reads (hpcc_node/controller/decide_rolling.py)
    request = fleet.request(Group("cpu", "c6i.16xlarge", 1, lt_version=3, spec="abc"), 1, "t", "cpu-oneccl")
    keys = [t["Key"] for spec in request["TagSpecifications"] for t in spec["Tags"]]
    assert {TAG_TEMPLATE_VERSION, TAG_LAUNCH_SPEC} <= set(keys)
    for operator, block in at_launch["Condition"].items():  # a tag-key condition, if any, names every key
        assert "aws:TagKeys" not in block or set(keys) <= set(block["aws:TagKeys"]), (operator, keys)
    after = head["NameClusterInstances"]["Condition"]["ForAllValues:StringEquals"]["aws:TagKeys"]
    assert after == [TAG_NODE]  # hpcc:launch is never rewritten after launch by the head's credentials


def test_the_state_bucket_denies_every_other_principal_its_writes(planned):
    """Issue 33, finding 9: whatever another principal's own IAM policies allow, it writes no object of the state
    bucket (the membership, a node's status, a certificate): the bucket policy's Deny spares the two node roles only."""
    from policy import bucket_rules

    [policy] = [r for r in planned.of_type("aws:s3/bucketPolicy:BucketPolicy") if "-state-" in r["inputs"]["bucket"]]
    doc = json.loads(policy["inputs"]["policy"])
    [deny] = [s for s in doc["Statement"] if s["Effect"] == "Deny"]
    bucket = f"arn:aws:s3:::{policy['inputs']['bucket']}"
    roles = [f"arn:aws:iam::123456789012:role/{role_name('cpu-oneccl', r)}" for r in ("head", "compute")]
    assert (deny["Principal"], deny["Resource"], deny["Condition"]) == (
        "*",
        [f"{bucket}/*"],
        {"ArnNotEquals": {"aws:PrincipalArn": roles}},
    )
    assert "s3:PutObject" in deny["Action"]
    assert bucket_rules.state_bucket_policy_resource(bucket_rules.BUCKET_POLICY, policy["inputs"]) == []


WORKSPACE = "arn:aws:aps:us-east-1:123456789012:workspace/ws-b226cc2a-a446-46a9-933a-ac50479a5568"


def _aps(result, role: str) -> list[dict]:
    return [s for s in statements(result, role).values() if any(a.startswith("aps:") for a in s["Action"])]


def test_the_head_writes_to_the_metrics_workspace_named_and_only_when_one_is(planned):
    """observability.remoteWrite (issue 34): aps:RemoteWrite on that workspace, for the head's role alone; without
    it, no aps action at all. The policy pack passes the graph that has it."""
    from policy.rules import check

    assert _aps(planned, "head") == _aps(planned, "compute") == []
    config = copy.deepcopy(read_raw(EXAMPLES / "c6i-oneccl.yaml"))
    config["hpcc:cluster"]["observability"] = {"enabled": True, "remoteWrite": {"workspaceArn": WORKSPACE}}
    written = plan_config(config)
    assert _aps(written, "head") == [
        {"Sid": "MetricsRemoteWrite", "Effect": "Allow", "Action": ["aps:RemoteWrite"], "Resource": [WORKSPACE]}
    ]
    assert _aps(written, "compute") == []
    graph = [{k: r[k] for k in ("type", "name", "inputs", "dependsOn")} for r in written.resources]
    assert check(graph) == {}


def test_compute_nodes_may_pull_from_the_accounts_ecr_and_read_the_named_ngc_secret_alone():
    """Containers on (Slurm): the compute role gets ECR's token and pulls in the Region's repositories, and reads the
    NGC secret named (its name matched with Secrets Manager's suffix); the head, which runs no job, gets neither."""
    config = copy.deepcopy(read_raw(EXAMPLES / "c6i-oneccl.yaml"))
    assert "EcrPull" not in statements(plan_config(config), "compute")  # no Slurm: no containers
    config["hpcc:cluster"]["scheduler"] = "slurm"
    config["hpcc:cluster"]["containers"] = {"ngcSecret": "team/ngc-key"}
    planned = plan_config(config)
    compute, head = statements(planned, "compute"), statements(planned, "head")
    assert compute["EcrToken"]["Action"] == ["ecr:GetAuthorizationToken"]
    region, account = compute["EcrPull"]["Resource"][0].split(":")[3:5]
    assert compute["EcrPull"]["Resource"] == [f"arn:aws:ecr:{region}:{account}:repository/*"]
    assert "ecr:BatchGetImage" in compute["EcrPull"]["Action"] and "ecr:PutImage" not in compute["EcrPull"]["Action"]
    assert compute["NgcKey"] == {
        "Sid": "NgcKey",
        "Effect": "Allow",
        "Action": ["secretsmanager:GetSecretValue"],
        "Resource": [f"arn:aws:secretsmanager:{region}:{account}:secret:team/ngc-key-??????"],
    }
    assert not {"EcrToken", "EcrPull", "NgcKey"} & set(head)
    config["hpcc:cluster"]["containers"] = {"ecr": False}
    assert not {"EcrToken", "EcrPull", "NgcKey"} & set(statements(plan_config(config), "compute"))
