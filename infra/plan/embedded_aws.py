"""moto as an embedded AWS: what the offline plan creates resources in, and what tests read back with boto3.

Seeded with what a real region has and moto lacks: Deep Learning AMIs and their public SSM parameters.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from datetime import datetime, timezone
from typing import Iterator

from infra.config import DLAMI_OWNER, IMAGE_FAMILIES, image_name_pattern

ACCOUNT = "123456789012"
MANAGED_POLICIES = ("AmazonSSMManagedInstanceCore",)  # moto's default account
DLAMI_DATE = "20261101"

# Before moto is imported: skip its stock AMIs and its 1,000 managed policies (slow; the ones the program
# attaches are seeded below), and reject instance types EC2 does not have, as EC2 would.
os.environ.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
os.environ.setdefault("MOTO_IAM_LOAD_MANAGED_POLICIES", "false")
os.environ.setdefault("MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION", "true")
for _var, _value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
    os.environ.setdefault(_var, _value)


@dataclass
class EmbeddedAws:
    region: str
    account: str = ACCOUNT

    def client(self, service: str):
        import boto3

        return boto3.client(service, region_name=self.region)


@lru_cache(maxsize=1)
def _managed_policies() -> dict:
    from moto.iam.aws_managed_policies import aws_managed_policies_data

    data = json.loads(aws_managed_policies_data)
    return {name: data[name] for name in MANAGED_POLICIES}


def _seed(region: str) -> None:
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.amis import Ami
    from moto.iam.models import AWSManagedPolicy, iam_backends
    from moto.ssm.models import Parameter, ssm_backends

    iam = iam_backends[ACCOUNT]["global"]
    for name, doc in _managed_policies().items():
        policy = AWSManagedPolicy.from_data(name, ACCOUNT, "global", doc)
        iam.managed_policies[policy.arn] = policy

    ec2 = ec2_backends[ACCOUNT][region]
    params = ssm_backends[ACCOUNT][region]._parameters
    for family in IMAGE_FAMILIES:
        for arch in ("x86_64", "arm64"):
            pattern = image_name_pattern(family, arch)
            if pattern is None:
                continue
            ami_id = stable_ami_id(family if arch == "x86_64" else f"{family}-{arch}")
            ec2.amis[ami_id] = Ami(
                ec2, ami_id=ami_id, name=pattern.replace("*", DLAMI_DATE), description=f"hpcc offline stand-in for {family}",
                owner_id=DLAMI_OWNER, owner_alias="amazon", public=True, virtualization_type="hvm",
                architecture=arch, state="available", image_type="machine", hypervisor="xen",
                root_device_name="/dev/xvda" if "amazon-linux" in family else "/dev/sda1", root_device_type="ebs",
                sriov="simple", creation_date=datetime(int(DLAMI_DATE[:4]), int(DLAMI_DATE[4:6]), int(DLAMI_DATE[6:]), tzinfo=timezone.utc))
            # moto refuses put_parameter under /aws/, so public parameters go straight into its store.
            name = f"/aws/service/deeplearning/ami/{arch}/{family}/latest/ami-id"
            params[name].append(Parameter(account_id=ACCOUNT, name=name, value=ami_id, parameter_type="String",
                                          description=None, allowed_pattern=None, keyid=None,
                                          last_modified_date=0, version=1, data_type="aws:ec2:image"))


def publish_dlami(region: str, family: str, date: str, account: str = ACCOUNT) -> str:
    """AWS releases a new DLAMI of `family`: a newer image, and the family's public parameter pointing at it
    (inside an active embedded_aws block). Returns the new image id."""
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.amis import Ami
    from moto.ssm.models import Parameter, ssm_backends

    ec2 = ec2_backends[account][region]
    old = ec2.amis[stable_ami_id(family)]
    ami_id = stable_ami_id(f"{family}-{date}")
    ec2.amis[ami_id] = Ami(
        ec2, ami_id=ami_id, name=IMAGE_FAMILIES[family][1].replace("*", date), description=f"hpcc offline stand-in for {family}",
        owner_id=DLAMI_OWNER, owner_alias="amazon", public=True, virtualization_type="hvm", architecture=old.architecture,
        state="available", image_type="machine", hypervisor="xen", root_device_name=old.root_device_name,
        root_device_type="ebs", sriov="simple",
        creation_date=datetime(int(date[:4]), int(date[4:6]), int(date[6:]), tzinfo=timezone.utc))
    name = f"/aws/service/deeplearning/ami/x86_64/{family}/latest/ami-id"
    params = ssm_backends[account][region]._parameters[name]
    params.append(Parameter(account_id=account, name=name, value=ami_id, parameter_type="String", description=None,
                            allowed_pattern=None, keyid=None, last_modified_date=0, version=len(params) + 1,
                            data_type="aws:ec2:image"))
    return ami_id


def stable_ami_id(family: str) -> str:
    """Deterministic across runs (Python's hash() is salted per process)."""
    import hashlib

    return "ami-" + hashlib.sha256(family.encode()).hexdigest()[:17]


@contextmanager
def embedded_aws(region: str) -> Iterator[EmbeddedAws]:
    from moto import mock_aws

    os.environ["AWS_DEFAULT_REGION"] = region
    with mock_aws():
        _seed(region)
        yield EmbeddedAws(region)
