"""The cluster's bundle store: a private S3 bucket, the bundle in it at `bundles/<sha256>.tar.gz`, and the pointer
`/hpcc/<cluster>/bundle` the nodes follow (infra/render/bundle.py builds the archive; the loader checks it).

- Private: every public access blocked, SSE-S3 by default, versioned, readable through the bucket policy only by
  the cluster's two node roles (and by nobody outside the account: the policy names no one else). Nodes reach it
  through the VPC's S3 gateway endpoint (infra/program/components/network.py), with no internet.
- Create-once: the key is the archive's hash, so a key never holds two bundles. Neither S3 nor this program's
  provider sends `If-None-Match: *` (pulumi-aws 7's BucketObjectv2 has no such input), so a writer with
  s3:PutObject on the bucket could still overwrite one; versioning keeps what was there, and the loader's hash
  check refuses a changed object. Integrity comes from who may write the bucket and the pointer (IAM).
- Old bundles stay (`retain_on_delete`): a node that runs one can still fetch it again, and `pulumi destroy`
  removes them with the bucket (`force_destroy`).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from hpcc_contract.names import Paths, bundle_bucket, bundle_key, tags
from infra.program.components.private_bucket import private_bucket


@dataclass
class BundleArgs:
    cluster: str
    account: pulumi.Input[str]
    archive: bytes  # infra/render/bundle.py's pack(): deterministic, so its hash is the key
    sha256: str
    reader_role_arns: list[pulumi.Input[str]]  # the node roles (infra/program/components/identity.py)
    extra_tags: dict[str, str] = field(default_factory=dict)


def bucket_policy(bucket: str, reader_arns: list[str]) -> str:
    """Allow only the node roles to read bundles: no Deny (moto applies a Deny to every caller, and a deny of
    non-TLS would lock the box's nodes out), no wildcard principal; the account's admins keep their IAM rights."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "NodesReadBundles",
                    "Effect": "Allow",
                    "Principal": {"AWS": sorted(reader_arns)},
                    "Action": ["s3:GetObject"],
                    "Resource": [f"arn:aws:s3:::{bucket}/bundles/*"],
                }
            ],
        },
        sort_keys=True,
    )


def pointer_value(bucket: str, sha256: str) -> str:
    return json.dumps({"sha256": sha256, "bucket": bucket, "key": bundle_key(sha256)}, sort_keys=True)


class BundleStore(pulumi.ComponentResource):
    bucket: pulumi.Output[str]
    pointer: aws.ssm.Parameter  # the instances boot after it exists (infra/program/components/compute.py)

    def __init__(self, name: str, args: BundleArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("hpcc:cluster:BundleStore", name, None, opts)
        c, t = args.cluster, args.extra_tags
        child = pulumi.ResourceOptions(parent=self)
        bucket, block = private_bucket(
            f"{c}-bundles",
            pulumi.Output.from_input(args.account).apply(lambda a: bundle_bucket(c, a)),
            tags(c, "bundles", t),
            child,
        )
        versioning = aws.s3.BucketVersioning(
            f"{c}-bundles-versioning",
            bucket=bucket.id,
            opts=child,
            versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(status="Enabled"),
        )
        aws.s3.BucketPolicy(
            f"{c}-bundles-policy",
            bucket=bucket.id,
            policy=pulumi.Output.all(bucket.bucket, *args.reader_role_arns).apply(
                lambda a: bucket_policy(a[0], list(a[1:]))
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[block]),
        )
        # One resource per bundle (its name carries the hash): a new bundle is a new object beside the old one.
        obj = aws.s3.BucketObjectv2(
            f"{c}-bundle-{args.sha256[:16]}",
            bucket=bucket.id,
            key=f"bundles/{args.sha256}.tar.gz",
            content_base64=base64.b64encode(args.archive).decode(),
            content_type="application/gzip",
            tags=tags(c, "bundle", t),
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True, depends_on=[versioning]),
        )
        self.pointer = aws.ssm.Parameter(
            f"{c}-bundle-param",
            name=Paths(c).bundle,
            type="String",
            description="the bundle the nodes boot from and follow: {sha256, bucket, key} (infra/render/bundle.py)",
            value=pulumi.Output.all(bucket.bucket, obj.key).apply(lambda a: pointer_value(a[0], args.sha256)),
            tags=tags(c, "bundle-param", t),
            opts=child,
        )
        self.bucket = bucket.bucket
        self.register_outputs({"bucket": bucket.bucket, "bundle": args.sha256})
