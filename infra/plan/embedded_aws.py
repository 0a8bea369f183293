"""moto as an embedded AWS: what the offline plan creates resources in, and what tests read back with boto3.

Seeded with what a real region has and moto lacks: Deep Learning AMIs and their public SSM parameters.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache

from infra.facts.images import DLAMI_OWNER, IMAGE_FAMILIES, image_name_pattern
from infra.plan import internals

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
if "moto.settings" in sys.modules:  # moto imported first (it reads this one once, at import): the refusal holds
    sys.modules["moto.settings"].EC2_ENABLE_INSTANCE_TYPE_VALIDATION = (
        os.environ["MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION"].lower() == "true"
    )


@dataclass
class EmbeddedAws:
    region: str
    account: str = ACCOUNT

    def client(self, service: str):
        import boto3

        return boto3.client(service, region_name=self.region)


@lru_cache(maxsize=1)
def _managed_policies() -> dict:
    data = internals.managed_policy_documents()
    return {name: data[name] for name in MANAGED_POLICIES}


def _dlami(ec2, family: str, ami_id: str, name: str, arch: str, root_device: str, date: str):
    return internals.ami(
        ec2,
        ami_id=ami_id,
        name=name,
        description=f"hpcc offline stand-in for {family}",
        owner_id=DLAMI_OWNER,
        owner_alias="amazon",
        public=True,
        virtualization_type="hvm",
        architecture=arch,
        state="available",
        image_type="machine",
        hypervisor="xen",
        root_device_name=root_device,
        root_device_type="ebs",
        sriov="simple",
        creation_date=datetime(int(date[:4]), int(date[4:6]), int(date[6:]), tzinfo=UTC),
    )


# DLAMIs without a family parameter hpcc knows, found by name (image.nameFilter): the proprietary-driver one the
# p3dn example uses (V100 needs NVIDIA's proprietary driver).
NAMED_DLAMIS = ("Deep Learning Base Proprietary Nvidia Driver GPU AMI (Ubuntu 22.04) *",)


def _seed(region: str) -> None:
    internals.add_managed_policies(ACCOUNT, _managed_policies())
    ec2 = internals.ec2_backend(ACCOUNT, region)
    for family in IMAGE_FAMILIES:
        for arch in ("x86_64", "arm64"):
            pattern = image_name_pattern(family, arch)
            if pattern is None:
                continue
            ami_id = stable_ami_id(family if arch == "x86_64" else f"{family}-{arch}")
            ec2.amis[ami_id] = _dlami(
                ec2,
                family,
                ami_id,
                pattern.replace("*", DLAMI_DATE),
                arch,
                "/dev/xvda" if "amazon-linux" in family else "/dev/sda1",
                DLAMI_DATE,
            )
            internals.seed_public_parameter(
                ACCOUNT, region, f"/aws/service/deeplearning/ami/{arch}/{family}/latest/ami-id", ami_id, "aws:ec2:image"
            )
    for pattern in NAMED_DLAMIS:
        ami_id = stable_ami_id(pattern)
        ec2.amis[ami_id] = _dlami(
            ec2, pattern, ami_id, pattern.replace("*", DLAMI_DATE), "x86_64", "/dev/sda1", DLAMI_DATE
        )


def publish_dlami(region: str, family: str, date: str, account: str = ACCOUNT) -> str:
    """AWS releases a new DLAMI of `family`: a newer image, and the family's public parameter pointing at it
    (inside an active embedded_aws block). Returns the new image id."""
    ec2 = internals.ec2_backend(account, region)
    old = ec2.amis[stable_ami_id(family)]
    ami_id = stable_ami_id(f"{family}-{date}")
    ec2.amis[ami_id] = _dlami(
        ec2, family, ami_id, IMAGE_FAMILIES[family][1].replace("*", date), old.architecture, old.root_device_name, date
    )
    internals.seed_public_parameter(
        account, region, f"/aws/service/deeplearning/ami/x86_64/{family}/latest/ami-id", ami_id, "aws:ec2:image"
    )
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
