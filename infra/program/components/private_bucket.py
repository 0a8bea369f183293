"""A private S3 bucket as the cluster's stores use it (infra/program/components/bundle.py, state.py): every public
access blocked, SSE-S3 by default, removed with its objects by `pulumi destroy` (force_destroy). The resource names are
`<name>`, `<name>-private` and `<name>-sse`, the names the stores have always had (a rename would replace them)."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws


def private_bucket(
    name: str, bucket: pulumi.Input[str], tags: dict, opts: pulumi.ResourceOptions
) -> tuple[aws.s3.Bucket, aws.s3.BucketPublicAccessBlock]:
    """The bucket and its public access block (what a bucket policy must wait for: S3 refuses a policy while
    the block is being set)."""
    made = aws.s3.Bucket(name, bucket=bucket, force_destroy=True, tags=tags, opts=opts)
    block = aws.s3.BucketPublicAccessBlock(
        f"{name}-private",
        bucket=made.id,
        block_public_acls=True,
        block_public_policy=True,
        ignore_public_acls=True,
        restrict_public_buckets=True,
        opts=opts,
    )
    aws.s3.BucketServerSideEncryptionConfiguration(
        f"{name}-sse",
        bucket=made.id,
        opts=opts,
        rules=[
            aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                apply_server_side_encryption_by_default=aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                    sse_algorithm="AES256"
                )
            )
        ],
    )
    return made, block
