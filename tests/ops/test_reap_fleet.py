"""reap on a controller-run cluster: the head (the controller) terminated and waited for first, then every instance
tagged for the cluster, including one its controller launched after reap listed them; the ledger table and the
state bucket (emptied first) deleted last, and only when tagged for the cluster."""

from __future__ import annotations

import pytest
from moto import mock_aws

from infra.ops.aws import Aws
from infra.ops.reap.run import ORDER, Waits, inventory, reap
from tests.ops.fleet import REGION, C, fleet


def fast() -> Waits:
    return Waits(timeout=30, poll=0, sleep=lambda _: None)


@pytest.fixture
def f():
    with mock_aws():
        f = fleet({"gpu": 2, "cpu": 1})
        arn = f.ddb.describe_table(TableName=f.table)["Table"]["TableArn"]
        f.ddb.tag_resource(ResourceArn=arn, Tags=[{"Key": "hpcc:cluster", "Value": C}])
        f.s3.put_bucket_tagging(Bucket=f.bucket, Tagging={"TagSet": [{"Key": "hpcc:cluster", "Value": C}]})
        yield f


def states(f) -> dict[str, str]:
    return {
        i["InstanceId"]: i["State"]["Name"] for r in f.ec2.describe_instances()["Reservations"] for i in r["Instances"]
    }


def test_the_head_goes_first_then_everything_its_controller_launched_then_the_stores(f):
    assert ORDER[:2] == ("head-instance", "instance") and ORDER[-2:] == ("ledger-table", "bucket")
    inv = inventory(Aws(REGION), C)
    assert [i.id for i in inv.of("head-instance")] == [f.head] and len(inv.of("instance")) == 3
    assert [i.id for i in inv.of("ledger-table")] == [f.table] and [i.id for i in inv.of("bucket")] == [f.bucket]
    steps, late = [], []

    def on_step(kind, items):
        steps.append((kind, [i.id for i in items]))
        if kind == "head-instance":  # the controller launches once more before its head goes
            late.append(f.launch("compute", "gpu"))

    done = reap(Aws(REGION), C, yes=True, waits=fast(), on_step=on_step)
    assert not [i for i in done.items if i.failed], [(i.kind, i.id, i.result) for i in done.items]
    kinds = [k for k, _ in steps]
    assert kinds.index("head-instance") < kinds.index("instance") < kinds.index("ledger-table")
    assert late[0] in dict(steps)["instance"]
    assert set(states(f).values()) == {"terminated"}
    assert f.table not in f.ddb.list_tables()["TableNames"]
    assert f.bucket not in [b["Name"] for b in f.s3.list_buckets()["Buckets"]]


def test_an_untagged_table_or_bucket_is_left_alone_with_a_note():
    with mock_aws():
        f = fleet({"gpu": 1})
        inv = inventory(Aws(REGION), C)
        assert not inv.of("ledger-table") and not inv.of("bucket")
        assert any(f"DynamoDB table {f.table} is not tagged" in n for n in inv.notes)
        assert any(f"bucket {f.bucket} is not tagged" in n for n in inv.notes)
