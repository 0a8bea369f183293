"""What reap adds for a controller-run cluster: the head (the controller) terminated and gone before the compute
instances are listed again and terminated, so nothing is launched behind reap's back; the ledger table and the
state and bundle buckets, found by their names (infra/ops/store.py, hpcc_contract/names.py) and deleted only when tagged
`hpcc:cluster=<cluster>` (untagged: left alone, with a note), the buckets emptied first (S3 refuses to delete a
bucket that holds objects: S3 API reference, DeleteBucket)."""

from __future__ import annotations

from botocore.exceptions import ClientError

from hpcc_contract.names import TAG_CLUSTER, TAG_ROLE, bundle_bucket, ledger_table, state_bucket
from infra.ops import store
from infra.ops.aws import Aws, pages, tag_dict, tag_filter, waiter_done
from infra.ops.reap.kinds import Found, Item, Waits, each, fail, missing, wait

LIVE = ("pending", "running", "stopping", "stopped", "shutting-down")


def _instances(aws: Aws, cluster: str, live: bool = True) -> list[dict]:
    return [
        i
        for i in pages(
            aws,
            "ec2",
            "describe_instances",
            "Reservations[].Instances[]",
            Filters=tag_filter(cluster),
            PaginationConfig=store.PAGE,
        )
        if tag_dict(i.get("Tags")).get(TAG_CLUSTER) == cluster and (i["State"]["Name"] in LIVE or not live)
    ]


def _item(kind: str, i: dict) -> Item:
    tags = tag_dict(i.get("Tags"))
    return Item(
        kind, i["InstanceId"], tags.get("hpcc:node") or tags.get("Name", ""), extra={"state": i["State"]["Name"]}
    )


def find_heads(found: Found) -> list[Item]:
    return [
        _item("head-instance", i)
        for i in _instances(found.aws, found.cluster)
        if tag_dict(i.get("Tags")).get(TAG_ROLE) == "head"
    ]


def find_instances(found: Found) -> list[Item]:
    # Every state: reap's interface rule counts a terminated instance's interfaces as gone with it.
    found.records["instance"] = _instances(found.aws, found.cluster, live=False)
    return [
        _item("instance", i)
        for i in found.records["instance"]
        if i["State"]["Name"] in LIVE and tag_dict(i.get("Tags")).get(TAG_ROLE) != "head"
    ]


def terminate(aws: Aws, items: list[Item], waits: Waits) -> None:
    """TerminateInstances, then botocore's InstanceTerminated waiter on all of them."""
    started = each(items, lambda it: aws.call("ec2", "terminate_instances", InstanceIds=[it.id]))
    if started:
        wait(
            started,
            waits,
            waiter_done(aws, "ec2", "InstanceTerminated", InstanceIds=[i.id for i in started]),
            f"{len(started)} instance(s) to terminate",
        )


def relist(aws: Aws, cluster: str, items: list[Item]) -> list[Item]:
    """After the head is gone: instances its controller launched since the inventory, added to `items`."""
    known = {it.id for it in items}
    return [
        _item("instance", i)
        for i in _instances(aws, cluster)
        if i["InstanceId"] not in known and tag_dict(i.get("Tags")).get(TAG_ROLE) != "head"
    ]


# -- the ledger table -----------------------------------------------------------------------------------


def _table_names(found: Found) -> list[str]:
    names = [ledger_table(found.cluster)]
    given = store.settings(found.aws, found.cluster).get("LEDGER_TABLE")
    return list(dict.fromkeys(names + ([given] if given else [])))


def find_tables(found: Found) -> list[Item]:
    items = []
    for name in _table_names(found):
        try:
            table = found.aws.call("dynamodb", "describe_table", TableName=name)["Table"]
            tags = found.aws.call("dynamodb", "list_tags_of_resource", ResourceArn=table["TableArn"]).get("Tags", [])
        except ClientError as e:
            if missing(e):
                continue
            raise
        if table.get("TableStatus") == "DELETING":
            continue
        if tag_dict(tags).get(TAG_CLUSTER) == found.cluster:
            items.append(Item("ledger-table", name))
        else:
            found.inv.notes.append(f"DynamoDB table {name} is not tagged {TAG_CLUSTER}={found.cluster}; left alone")
    return items


def delete_tables(aws: Aws, items: list[Item], waits: Waits) -> None:
    started = each(items, lambda it: aws.call("dynamodb", "delete_table", TableName=it.id))
    for it in started:
        wait([it], waits, waiter_done(aws, "dynamodb", "TableNotExists", TableName=it.id), f"table {it.id} to go")


# -- the state and bundle buckets -------------------------------------------------------------------------


def _bucket_names(found: Found) -> list[str]:
    try:
        account = found.aws.call("sts", "get_caller_identity")["Account"]
    except ClientError as e:
        found.inv.notes.append(f"could not tell the account ({e}); the cluster's buckets are not listed")
        return []
    given = store.settings(found.aws, found.cluster).get("STATE_BUCKET")
    names = [state_bucket(found.cluster, account), bundle_bucket(found.cluster, account)]
    return list(dict.fromkeys(names + ([given] if given else [])))


def find_buckets(found: Found) -> list[Item]:
    items = []
    for name in _bucket_names(found):
        try:
            tags = found.aws.call("s3", "get_bucket_tagging", Bucket=name).get("TagSet", [])
        except ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchBucket", "404") or missing(e):
                continue
            if code != "NoSuchTagSet":
                raise
            tags = []
        if tag_dict(tags).get(TAG_CLUSTER) == found.cluster:
            items.append(Item("bucket", name))
        else:
            found.inv.notes.append(f"bucket {name} is not tagged {TAG_CLUSTER}={found.cluster}; left alone")
    return items


def _delete_batches(aws: Aws, bucket: str, objects: list[dict]) -> None:
    for start in range(0, len(objects), 1000):  # DeleteObjects takes up to 1,000 keys (S3 API reference)
        aws.call(
            "s3", "delete_objects", Bucket=bucket, Delete={"Objects": objects[start : start + 1000], "Quiet": True}
        )


def empty_and_delete(aws: Aws, it: Item) -> None:
    """Every object version and delete marker (a versioned bucket), then every object, then the bucket."""
    versions = [
        {"Key": v["Key"], "VersionId": v["VersionId"]}
        for v in pages(aws, "s3", "list_object_versions", "[Versions, DeleteMarkers][]", Bucket=it.id)
        if isinstance(v, dict) and v.get("VersionId") not in (None, "null")
    ]
    _delete_batches(aws, it.id, versions)
    _delete_batches(
        aws, it.id, [{"Key": o["Key"]} for o in pages(aws, "s3", "list_objects_v2", "Contents", Bucket=it.id)]
    )
    aws.call("s3", "delete_bucket", Bucket=it.id)


def delete_buckets(aws: Aws, items: list[Item], waits: Waits) -> None:
    for it in each(items, lambda it: empty_and_delete(aws, it)):
        try:
            waits.until(waiter_done(aws, "s3", "BucketNotExists", Bucket=it.id), f"bucket {it.id} to go")
        except TimeoutError as e:
            fail(it, e)
