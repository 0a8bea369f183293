"""moto's copy of EC2's DescribeInstanceTypes, read once per test session through the embedded AWS."""

from functools import lru_cache

import boto3

REGION = "us-east-1"
MOTO_ACCOUNT = "123456789012"  # the account moto answers as (the offline plan's)


@lru_cache(maxsize=1)
def all_descriptions() -> dict[str, dict]:
    from infra.plan.embedded_aws import embedded_aws

    with embedded_aws(REGION):
        pages = boto3.client("ec2", region_name=REGION).get_paginator("describe_instance_types").paginate()
        return {t["InstanceType"]: t for page in pages for t in page["InstanceTypes"]}


def efa_type_names() -> list[str]:
    return sorted(n for n, d in all_descriptions().items() if d["NetworkInfo"].get("EfaSupported"))


def as_launch_template(layout) -> dict:
    """A layout as the launch template's networkInterfaces input (the wire names aws_rules reads)."""
    return {
        "networkInterfaces": [
            {
                "networkCardIndex": s.network_card_index,
                "deviceIndex": s.device_index,
                "interfaceType": s.interface_type,
                "subnetId": "subnet-1",
            }
            for s in layout
        ]
    }


@lru_cache(maxsize=1)
def offline_facts():
    """Instance facts as the offline plan gets them (moto's data, snapshot prices), with no AWS call per use."""
    from infra.facts.instance_types import DescribedFacts

    return DescribedFacts(all_descriptions(), REGION)


def facts_for(name: str):
    return offline_facts().get(name)
