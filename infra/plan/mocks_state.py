"""The plan's controller store and node groups: the ledger table created in moto's DynamoDB as the program asks
(and as hpcc_contract/ledger.py's table_definition says it must be), and the groups' dynamic resources
(infra/program/components/groups.py), which create nothing in AWS: only their inputs are recorded."""

from __future__ import annotations

import boto3

from hpcc_contract.ledger import table_definition
from infra.plan.aws_rules import AwsRejected

DYNAMIC = "pulumi-python:dynamic:Resource"


class StateMocks:
    """Mixed into MotoMocks: needs its `region` and `account`."""

    def _table(self, name, i):
        want = table_definition(i["name"])
        keys = [{"AttributeName": i.get("hashKey"), "KeyType": "HASH"}]
        attributes = [{"AttributeName": a["name"], "AttributeType": a["type"]} for a in i.get("attributes") or []]
        if (keys, attributes, i.get("billingMode")) != (
            want["KeySchema"],
            want["AttributeDefinitions"],
            want["BillingMode"],
        ):
            raise AwsRejected(
                name,
                "LedgerSchema",
                f"the ledger table must be {want} (hpcc_contract/ledger.py); "
                f"the program asks for hash key {i.get('hashKey')!r}, "
                f"attributes {attributes}, billing {i.get('billingMode')!r}",
            )
        client = boto3.client("dynamodb", region_name=self.region)
        table = client.create_table(
            **want, Tags=[{"Key": k, "Value": v} for k, v in sorted((i.get("tags") or {}).items())]
        )
        desc = table["TableDescription"]
        return i["name"], {"arn": desc["TableArn"], "streamArn": "", "streamLabel": ""}

    def _resource(self, name, i):
        """A dynamic resource: its provider runs only under `pulumi up` (create is a no-op there too)."""
        if "cluster" not in i or "group" not in i:
            raise AwsRejected(name, "NotImplemented", "the offline plan knows only the node groups' dynamic resource")
        return f"{i['cluster']}/{i['group']}", {}
