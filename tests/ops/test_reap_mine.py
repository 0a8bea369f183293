"""reap re-checks every filter on its own side: against an endpoint that ignores every EC2 filter (it
answers with the whole region: the other cluster, the default VPC), the inventory is what it was with
filters, and the other cluster is left whole."""

from __future__ import annotations

from infra.ops.aws import Aws, Backoff
from infra.ops.reap.run import Waits, inventory, reap
from infra.plan.embedded_aws import embedded_aws
from infra.plan.runner import plan_stack_file
from tests.ops.support import EXAMPLES, stack_file

REGION = "us-east-1"


def ids(inv) -> set[tuple[str, str]]:
    return {(i.kind, i.id) for i in inv.items}


def ignore_filters(aws: Aws) -> list[str]:
    """Every EC2 Describe call loses its filters before it is sent; returns the operations it did so for."""
    stripped: list[str] = []

    def strip(params, model, **_):
        if model.name.startswith("Describe") and (params.pop("Filters", None) or params.pop("Filter", None)):
            stripped.append(model.name)

    aws.client("ec2").meta.events.register("before-parameter-build.ec2", strip)
    return stripped


def test_an_endpoint_that_ignores_filters_makes_reap_touch_nothing_of_another_cluster(tmp_path):
    with embedded_aws(REGION) as env:
        plan_stack_file(EXAMPLES / "c6i-oneccl.yaml", aws=env)
        plan_stack_file(stack_file(tmp_path, "c6i-oneccl", name="other"), aws=env)
        other = ids(inventory(Aws(REGION, backoff=Backoff(sleep=lambda _: None)), "other"))
        honest = ids(inventory(Aws(REGION, backoff=Backoff(sleep=lambda _: None)), "cpu-oneccl"))

        aws = Aws(REGION, backoff=Backoff(sleep=lambda _: None))
        stripped = ignore_filters(aws)
        assert ids(inventory(aws, "cpu-oneccl")) == honest
        assert {"DescribeVpcs", "DescribeSubnets", "DescribeNetworkInterfaces", "DescribeInstances"} <= set(stripped)

        inv = reap(aws, "cpu-oneccl", yes=True, waits=Waits(poll=0, timeout=5))
        assert not [i for i in inv.items if i.failed]
        assert ids(inventory(Aws(REGION, backoff=Backoff(sleep=lambda _: None)), "other")) == other
