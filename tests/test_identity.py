"""The nodes' IAM, as planned: a role per node role, the SSH key written only by the head, and each status
parameter writable only by the instance it names. (No IAM evaluator runs offline: these check the documents
and the tags the conditions depend on; AWS evaluates `${ec2:SourceInstanceARN}` and `aws:ResourceTag`.)"""

import json

import pytest

from infra.naming import TAG_INSTANCE, Paths, role_name
from infra.plan.runner import plan_config
from infra.stackfile import read_raw
from tests.ops_support import EXAMPLES

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
    assert not {a for a in every_action if a.startswith("secretsmanager:") and not a.startswith(("secretsmanager:Get",
                                                                                              "secretsmanager:Describe"))}


@pytest.mark.parametrize("role", ["head", "compute"])
def test_a_node_writes_only_its_own_status_and_host_keys_and_the_head_the_certificates(planned, role):
    stmts = statements(planned, role)
    writes = {s["Sid"]: s for s in stmts.values() if s["Effect"] == "Allow" and "ssm:PutParameter" in s["Action"]}
    assert set(writes) == {"ReportOwnStatus", "PublishOwnHostKeys"} | ({"WriteHostCertificates"} if role == "head" else set())
    paths = Paths("cpu-oneccl")
    for sid, path in (("ReportOwnStatus", paths.nodes), ("PublishOwnHostKeys", paths.hostkeys)):
        assert [r.rsplit(":parameter", 1)[1] for r in writes[sid]["Resource"]] == [f"{path}/*"]
        # A parameter with no such tag (a new one) or another instance's tag does not match: no creation, no forgery.
        assert writes[sid]["Condition"] == {"StringEquals": {f"aws:ResourceTag/{TAG_INSTANCE}": "${ec2:SourceInstanceARN}"}}
    if role == "head":
        assert [r.rsplit(":parameter", 1)[1] for r in writes["WriteHostCertificates"]["Resource"]] == [f"{paths.certs}/*"]


def test_only_the_head_reads_the_host_ca(planned):
    [ca] = [r for r in planned.of_type("aws:secretsmanager/secret:Secret") if r["inputs"]["name"] == "hpcc/cpu-oneccl/host-ca"]
    reads = {role: [s["Sid"] for s in statements(planned, role).values()
                    if s["Effect"] == "Allow" and ca["outputs"]["arn"] in s.get("Resource", [])] for role in ("head", "compute")}
    assert reads == {"head": ["HostCa"], "compute": []}


def test_every_status_parameter_names_its_own_instance(planned):
    arns = {r["name"].removeprefix("cpu-oneccl-"): r["outputs"]["arn"] for r in planned.of_type("aws:ec2/instance:Instance")}
    for path in (Paths("cpu-oneccl").nodes, Paths("cpu-oneccl").hostkeys):
        tagged = {r["inputs"]["name"].rsplit("/", 1)[1]: r["inputs"]["tags"][TAG_INSTANCE]
                  for r in planned.of_type("aws:ssm/parameter:Parameter") if r["inputs"]["name"].startswith(path + "/")}
        assert tagged == arns and len(set(arns.values())) == 5


def test_each_role_launches_with_its_own_profile(planned):
    profiles = {r["inputs"]["name"]: r["outputs"]["arn"] for r in planned.of_type(PROFILE)}
    lts = {r["inputs"]["name"]: r["inputs"]["iamInstanceProfile"]["arn"] for r in planned.of_type("aws:ec2/launchTemplate:LaunchTemplate")}
    assert lts == {"hpcc-cpu-oneccl-head": profiles[role_name("cpu-oneccl", "head")],
                   "hpcc-cpu-oneccl-compute": profiles[role_name("cpu-oneccl", "compute")]}
