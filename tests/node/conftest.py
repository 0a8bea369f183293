"""The controller's stores in moto, for the tests of tests/node that use them: the ledger's table (`ddb`) and the
state bucket (`s3`)."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from hpcc_contract.ledger import table_definition

LEDGER_TABLE = "hpcc-test-ledger"
STATE_BUCKET = "hpcc-test-cluster"


@pytest.fixture
def ddb():
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(**table_definition(LEDGER_TABLE))
        yield client


@pytest.fixture
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=STATE_BUCKET)
        yield client
