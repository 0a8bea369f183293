"""The controller's store: the ledger (a DynamoDB table, hpcc_contract/ledger.py `table_definition`: one
string hash key `pk`, on demand) and the state bucket (`membership.json`, written by the head's role only, and
`status/<instance-arn>.json`, each written by its own node only: infra/program/components/identity.py).

The bucket is private as the bundle bucket is: every public access blocked, SSE-S3, and a policy naming only the
cluster's two node roles with exactly what each may do, and denying every other principal any object put (policy
rule `state-bucket-private`). `pulumi destroy`
empties and removes it (`force_destroy`); statuses and membership are the running cluster's, nothing to keep."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from hpcc_contract import ledger
from hpcc_contract.names import (
    CERTS_PREFIX,
    HOSTKEYS_PREFIX,
    MEMBERSHIP_DELTAS_PREFIX,
    MEMBERSHIP_KEY,
    STATUS_PREFIX,
    ledger_table,
    state_bucket,
    tags,
)
from infra.program.components.private_bucket import private_bucket

# The instance's own ARN as IAM resolves it for a role session of an EC2 instance (IAM User Guide, "IAM policy
# elements: Variables and tags"; the key is ec2:SourceInstanceARN).
OWN_STATUS = STATUS_PREFIX + "${ec2:SourceInstanceARN}.json"
OWN_HOSTKEYS = HOSTKEYS_PREFIX + "${ec2:SourceInstanceARN}.json"  # hpcc_node/certstore.py


@dataclass
class StateArgs:
    cluster: str
    account: pulumi.Input[str]
    role_arns: dict[str, pulumi.Input[str]]  # role -> IAM role ARN (head, compute)
    extra_tags: dict[str, str] = field(default_factory=dict)


def state_bucket_policy(bucket: str, head_arn: str, compute_arn: str) -> str:
    """The head reads and writes the bucket; a compute node reads membership.json (and its deltas), the statuses and
    the host certificates, and writes its own status and host public keys only. No other principal writes an object,
    whatever its own IAM policies allow (a bucket policy's Deny binds the account's principals too: IAM User Guide,
    "Policy evaluation logic"): what the controller and the nodes read there (the membership, the statuses, the
    certificates) is theirs alone. The Deny names the two roles by `aws:PrincipalArn` (a role session's is its role's
    ARN: IAM User Guide, "AWS global condition context keys"); reads and deletes stay open to the deployer (`hpcc
    status`, `hpcc reap`, `pulumi destroy` empties the bucket)."""
    arn = f"arn:aws:s3:::{bucket}"
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "OnlyTheClusterWritesState",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": ["s3:PutObject", "s3:PutObjectAcl", "s3:PutObjectTagging", "s3:RestoreObject"],
                    "Resource": [f"{arn}/*"],
                    "Condition": {"ArnNotEquals": {"aws:PrincipalArn": [head_arn, compute_arn]}},
                },
                {
                    "Sid": "HeadKeepsState",
                    "Effect": "Allow",
                    "Principal": {"AWS": [head_arn]},
                    "Action": ["s3:GetObject", "s3:PutObject"],
                    "Resource": [f"{arn}/*"],
                },
                {
                    "Sid": "HeadListsState",
                    "Effect": "Allow",
                    "Principal": {"AWS": [head_arn]},
                    "Action": ["s3:ListBucket"],
                    "Resource": [arn],
                },
                {
                    "Sid": "NodesReadMembership",
                    "Effect": "Allow",
                    "Principal": {"AWS": [compute_arn]},
                    "Action": ["s3:GetObject"],
                    "Resource": [f"{arn}/{MEMBERSHIP_KEY}", f"{arn}/{MEMBERSHIP_DELTAS_PREFIX}*"],
                },
                {
                    "Sid": "NodesReadStatuses",
                    "Effect": "Allow",
                    "Principal": {"AWS": [compute_arn]},
                    "Action": ["s3:GetObject"],
                    "Resource": [f"{arn}/{STATUS_PREFIX}*"],
                },
                {
                    "Sid": "NodesWriteOwnStatus",
                    "Effect": "Allow",
                    "Principal": {"AWS": [compute_arn]},
                    "Action": ["s3:PutObject"],
                    "Resource": [f"{arn}/{OWN_STATUS}", f"{arn}/{OWN_HOSTKEYS}"],
                },
                # The host certificates the head signed (hpcc_node/certstore.py): public, any node's may be read.
                {
                    "Sid": "NodesReadHostCertificates",
                    "Effect": "Allow",
                    "Principal": {"AWS": [compute_arn]},
                    "Action": ["s3:GetObject"],
                    "Resource": [f"{arn}/{CERTS_PREFIX}*"],
                },
            ],
        },
        sort_keys=True,
    )


class ControllerState(pulumi.ComponentResource):
    bucket: pulumi.Output[str]
    bucket_arn: pulumi.Output[str]
    table: pulumi.Output[str]
    table_arn: pulumi.Output[str]

    def __init__(self, name: str, args: StateArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("hpcc:cluster:ControllerState", name, None, opts)
        c, t = args.cluster, args.extra_tags
        child = pulumi.ResourceOptions(parent=self)
        table = aws.dynamodb.Table(
            f"{c}-ledger",
            name=ledger_table(c),
            hash_key=ledger.KEY,
            billing_mode=ledger.BILLING_MODE,
            attributes=[aws.dynamodb.TableAttributeArgs(name=ledger.KEY, type="S")],
            server_side_encryption=aws.dynamodb.TableServerSideEncryptionArgs(enabled=True),
            point_in_time_recovery=aws.dynamodb.TablePointInTimeRecoveryArgs(enabled=True),
            tags=tags(c, "ledger", t),
            opts=child,
        )
        bucket, block = private_bucket(
            f"{c}-state",
            pulumi.Output.from_input(args.account).apply(lambda a: state_bucket(c, a)),
            tags(c, "state", t),
            child,
        )
        aws.s3.BucketPolicy(
            f"{c}-state-policy",
            bucket=bucket.id,
            policy=pulumi.Output.all(bucket.bucket, args.role_arns["head"], args.role_arns["compute"]).apply(
                lambda a: state_bucket_policy(a[0], a[1], a[2])
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[block]),
        )
        self.bucket, self.bucket_arn = bucket.bucket, bucket.arn
        self.table, self.table_arn = table.name, table.arn
        self.register_outputs({"bucket": bucket.bucket, "table": table.name})
