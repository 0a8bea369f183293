"""Where the operator commands read a controller-run cluster: the ledger (DynamoDB, hpcc_node/controller/ledger.py),
the state bucket (membership.json and the nodes' `status/<instance-arn>.json`), the groups parameter and EC2 by tag.

Names come from the settings parameter (STATE_BUCKET, LEDGER_TABLE: what the nodes are told), else from
hpcc_contract/names.py (`ledger_table`, `state_bucket` with the caller's account), so a half-created or half-destroyed
cluster is still found. Every read is shaped for 4,096 nodes: DescribeInstances filtered on the cluster's tag in pages
of 1,000 (EC2 API reference, DescribeInstances: MaxResults 5-1000), ListObjectsV2 pages of 1,000 (S3 API reference), one
Scan of the ledger (pages of 1 MB), and the statuses fetched on a few threads."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from botocore.exceptions import ClientError

from hpcc_contract import groups as groups_format
from hpcc_contract.names import STATUS_PREFIX, Paths, ledger_table, state_bucket
from hpcc_node import status
from hpcc_node.controller import membership
from hpcc_node.controller.ledger import Ledger, Loaded
from infra.ops.aws import Aws, error_code, tag_filter

READER = "hpcc-ops (read only)"  # the Ledger's owner when ops only reads: it never takes the lease
PAGE = {"PageSize": 1000}
FETCH_THREADS = 16  # status objects fetched at once: 4,096 GETs in seconds, far below S3's 5,500 GET/s per prefix


def groups_parameter(cluster: str) -> str:
    return Paths(cluster).groups


def _missing(e: ClientError) -> bool:
    return error_code(e) in (
        "ParameterNotFound",
        "ResourceNotFoundException",
        "NoSuchBucket",
        "NoSuchKey",
        "404",
        "NotFound",
    )


@dataclass
class Names:
    table: str
    bucket: str


def settings(aws: Aws, cluster: str) -> dict[str, str]:
    """The settings parameter's KEY=VALUE lines ({} before the program wrote it)."""
    try:
        text = aws.call("ssm", "get_parameter", Name=Paths(cluster).settings)["Parameter"]["Value"]
    except ClientError as e:
        if _missing(e):
            return {}
        raise
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def names(aws: Aws, cluster: str, given: dict[str, str] | None = None) -> Names:
    found = settings(aws, cluster) if given is None else given
    table = found.get("LEDGER_TABLE") or ledger_table(cluster)
    bucket = found.get("STATE_BUCKET") or state_bucket(cluster, aws.call("sts", "get_caller_identity")["Account"])
    return Names(table, bucket)


def load_ledger(aws: Aws, table: str) -> Loaded:
    """The controller's whole state, read only (Ledger.load: one consistent Scan); empty before the table exists."""
    try:
        # A throttled page retries the whole scan (the Aws clients leave retries to Backoff).
        return aws.backoff.run(Ledger(aws.client("dynamodb"), table, READER, time.time).load)
    except ClientError as e:
        if _missing(e):
            return Loaded()
        raise


def lease(aws: Aws, table: str) -> tuple[str, float]:
    """Who holds the controller's lease and until when (epoch seconds); ("", 0) when nobody ever did."""
    try:
        return aws.backoff.run(Ledger(aws.client("dynamodb"), table, READER, time.time).holder)
    except ClientError as e:
        if _missing(e):
            return "", 0.0
        raise


def groups(aws: Aws, cluster: str) -> list[dict]:
    """The groups the program wrote to `/hpcc/<c>/groups` (hpcc_contract/groups.py); [] when absent or of another
    format."""
    try:
        value = aws.call("ssm", "get_parameter", Name=groups_parameter(cluster))["Parameter"]["Value"]
    except ClientError as e:
        if _missing(e):
            return []
        raise
    try:
        found = groups_format.loads(value)
    except groups_format.GroupsFormatError:
        return []
    return [g for g in found if isinstance(g, dict) and isinstance(g.get("name"), str)]


def read_membership(aws: Aws, bucket: str) -> dict:
    """membership.json ({} when not yet published or the bucket is gone)."""
    try:
        doc, _ = membership.read(aws.client("s3"), bucket)
    except ClientError as e:
        if _missing(e):
            return {}
        raise
    return doc if isinstance(doc, dict) else {}


@dataclass
class Statuses:
    by_instance: dict[str, dict] = field(default_factory=dict)  # instance id -> the status it wrote
    heard: dict[str, float] = field(default_factory=dict)  # instance id -> its object's LastModified (epoch seconds)
    notes: list[str] = field(default_factory=list)


def statuses(aws: Aws, bucket: str, wanted: set[str] | None = None) -> Statuses:
    """Each `status/<instance-arn>.json`, kept only when the body names the key's own instance (a node writes only
    its own key; IAM makes it so, and this check keeps a forged or stale body from standing for another)."""
    out = Statuses()
    s3 = aws.client("s3")
    keys = []
    try:
        for obj in aws.pages(
            "s3", "list_objects_v2", "Contents", Bucket=bucket, Prefix=STATUS_PREFIX, PaginationConfig=PAGE
        ):
            iid = membership.key_instance(obj["Key"])
            if iid and (wanted is None or iid in wanted):
                keys.append((iid, obj["Key"]))
                if hasattr(obj.get("LastModified"), "timestamp"):  # the agent's last write or heartbeat
                    out.heard[iid] = obj["LastModified"].timestamp()
    except ClientError as e:
        if _missing(e):
            return out
        raise

    def fetch(item: tuple[str, str]) -> tuple[str, dict | str]:
        iid, key = item
        try:
            got = aws.backoff.run(s3.get_object, Bucket=bucket, Key=key)
            body = json.loads(got["Body"].read())
        except ClientError as e:
            return iid, f"cannot read {key}: {error_code(e)}"
        except ValueError:
            return iid, f"{key} is not JSON"
        return iid, status.with_applied(body, got.get("Metadata")) if isinstance(
            body, dict
        ) else f"{key} is not an object"

    with ThreadPoolExecutor(FETCH_THREADS) as pool:
        for iid, body in pool.map(fetch, keys):
            if isinstance(body, str):
                out.notes.append(body)
            elif (body.get("instance_id") or body.get("instanceId")) != iid:
                out.notes.append(f"status of {iid} names another instance; ignored")
            else:
                out.by_instance[iid] = body
    return out


def cluster_instances(aws: Aws, cluster: str) -> list[dict]:
    """Every instance tagged for the cluster (head and compute, every state), pages of 1,000."""
    return list(
        aws.pages(
            "ec2",
            "describe_instances",
            "Reservations[].Instances[]",
            Filters=tag_filter(cluster),
            PaginationConfig=PAGE,
        )
    )
