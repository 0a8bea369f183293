"""Preflight: other hpcc clusters in the same account and Region share Parameter Store's throughput with this
one. GetParameter(s) and PutParameter draw on one default throughput per account and Region (AWS General
Reference, "AWS Systems Manager endpoints and quotas", https://docs.aws.amazon.com/general/latest/gr/ssm.html;
Systems Manager User Guide, "Increasing Parameter Store throughput",
https://docs.aws.amazon.com/systems-manager/latest/userguide/parameter-store-throughput.html), and each
cluster's pacing (infra/render/pacing.py) takes TARGET_SHARE of it for itself alone."""

from __future__ import annotations

from collections.abc import Iterable

from hpcc_contract.names import TAG_CLUSTER, Paths
from infra.config.validators.findings import WARNING, Finding
from infra.ops.aws import Aws
from infra.render.pacing import SSM_REQUESTS_PER_SECOND, agent_ssm_requests_per_second, pacing_for

FIELD = "cluster.name"
PREFIX = "/hpcc/"
LIVE = ("pending", "running", "stopping", "stopped")


def other_clusters(aws: Aws, own: str) -> dict[str, int]:
    """Every other hpcc cluster seen by its `/hpcc/<name>/` parameters or its `hpcc:cluster` tags -> its nodes
    (status parameters or live tagged instances, whichever is more; at least 1)."""
    statuses: dict[str, set[str]] = {}
    for p in aws.pages(
        "ssm", "describe_parameters", ParameterFilters=[{"Key": "Name", "Option": "BeginsWith", "Values": [PREFIX]}]
    ):
        name = p["Name"][len(PREFIX) :].split("/")[0]
        nodes = statuses.setdefault(name, set())
        if p["Name"].startswith(Paths(name).nodes + "/"):
            nodes.add(p["Name"].rsplit("/", 1)[1])
    instances: dict[str, int] = {}
    for inst in aws.pages(
        "ec2",
        "describe_instances",
        "Reservations[].Instances[]",
        Filters=[{"Name": "tag-key", "Values": [TAG_CLUSTER]}, {"Name": "instance-state-name", "Values": list(LIVE)}],
    ):
        name = next(t["Value"] for t in inst.get("Tags", []) if t["Key"] == TAG_CLUSTER)
        instances[name] = instances.get(name, 0) + 1
    names = (set(statuses) | set(instances)) - {own}
    return {n: max(1, len(statuses.get(n, ())), instances.get(n, 0)) for n in sorted(names)}


def steady_rate(nodes: int) -> float:
    """What a settled cluster of `nodes` (head included) asks of Parameter Store: its agents read it only when the
    settings change (their polls are S3's)."""
    return agent_ssm_requests_per_second(pacing_for(nodes))


def boot_rate(nodes: int) -> float:
    """The most it asks while booting or resizing: its pacer's ceiling (a small cluster reaches it only briefly)."""
    return pacing_for(nodes).cluster_requests_per_second()


def shared_ssm_throughput(ctx) -> Iterable[Finding]:
    others = other_clusters(ctx.aws, ctx.cluster.name)
    if not others:
        return
    own_nodes = ctx.cluster.node_count + 1
    each = "; ".join(
        f"{n} ({nodes} nodes): {steady_rate(nodes):.1f}/s settled, bursts up to {boot_rate(nodes):.1f}/s booting"
        for n, nodes in others.items()
    )
    total = sum(steady_rate(n) for n in [own_nodes, *others.values()])
    peak = sum(boot_rate(n) for n in [own_nodes, *others.values()])
    yield Finding(
        WARNING,
        FIELD,
        (
            f"{len(others)} other hpcc cluster(s) in {ctx.aws.region} of this account share Parameter Store's default "
            f"throughput ({SSM_REQUESTS_PER_SECOND} requests/s for GetParameter(s) and PutParameter together): {each}. "
            f"With this one ({own_nodes} nodes: {steady_rate(own_nodes):.1f}/s settled, bursts up to "
            f"{boot_rate(own_nodes):.1f}/s booting) they ask {total:.1f}/s settled and up to {peak:.1f}/s while all "
            f"boot; above {SSM_REQUESTS_PER_SECOND}/s calls are throttled and slow every node's bootstrap and "
            "membership. Fix: turn on Parameter Store's higher throughput (billed; `aws ssm update-service-setting "
            "--setting-id /ssm/parameter-store/high-throughput-enabled --setting-value true`), do not boot the "
            "clusters at the same time, or put this one in another Region or account"
        ),
    )
