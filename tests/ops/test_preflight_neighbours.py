"""Preflight warns when other hpcc clusters in the account and Region share Parameter Store's throughput."""

from __future__ import annotations

import boto3
import pytest

from hpcc_contract.names import HEAD, TAG_CLUSTER, Paths, compute_node_name
from infra.config.stackfile import load
from infra.config.validators.findings import WARNING
from infra.ops.aws import Aws, Backoff
from infra.ops.preflight.neighbours import boot_rate, other_clusters, steady_rate
from infra.ops.preflight.rules import preflight
from infra.plan.embedded_aws import embedded_aws
from infra.render.pacing import SSM_REQUESTS_PER_SECOND
from tests.ops.support import EXAMPLES

CONFIG = EXAMPLES / "c6i-oneccl.yaml"  # cluster cpu-oneccl, 4 compute nodes


@pytest.fixture
def aws():
    with embedded_aws("us-east-1"):
        yield Aws("us-east-1", backoff=Backoff(sleep=lambda _: None))


def seed_cluster(name: str, nodes: int, region: str = "us-east-1") -> None:
    """What a running cluster leaves in Parameter Store: its hosts and settings, a status per node."""
    ssm = boto3.client("ssm", region_name=region)
    paths = Paths(name)
    for param in (paths.hosts, paths.settings):
        ssm.put_parameter(Name=param, Value="x", Type="String")
    for node in [HEAD, *map(compute_node_name, range(nodes - 1))]:
        ssm.put_parameter(Name=paths.node(node), Value="{}", Type="String")


def shared(findings):
    return [f for f in findings if f.severity == WARNING and "share Parameter Store" in f.message]


def test_another_clusters_parameters_give_a_warning_with_each_rate_and_the_fix(aws):
    seed_cluster("train-a", 300)
    [warning] = shared(preflight(aws, load(CONFIG)))
    assert warning.field == "cluster.name"
    rates = f"{steady_rate(300):.1f}/s settled, bursts up to {boot_rate(300):.1f}/s booting"
    assert f"train-a (300 nodes): {rates}" in warning.message
    assert f"({SSM_REQUESTS_PER_SECOND} requests/s" in warning.message
    assert "high-throughput-enabled" in warning.message and "another Region or account" in warning.message


def test_a_cluster_known_only_by_its_tags_counts_its_live_instances(aws):
    ec2 = boto3.client("ec2", region_name="us-east-1")
    ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=3,
        MaxCount=3,
        InstanceType="t3.micro",
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": TAG_CLUSTER, "Value": "tagged"}]}],
    )
    assert other_clusters(aws, "cpu-oneccl") == {"tagged": 3}


def test_alone_in_the_region_no_warning_and_its_own_parameters_do_not_count(aws):
    seed_cluster("cpu-oneccl", 5)  # this cluster, already up
    seed_cluster("elsewhere", 9, region="us-west-2")
    assert shared(preflight(aws, load(CONFIG))) == []
