"""On-demand prices: the dated snapshot, and the Price List API through an injected (stubbed) client."""

import json

import boto3
import pytest
from botocore.stub import Stubber

from infra.facts.prices import price_list_filters, price_list_price, snapshot_price


def _product(usd: str, unit: str = "Hrs") -> str:
    return json.dumps(
        {
            "product": {"attributes": {"instanceType": "p5.48xlarge"}},
            "terms": {"OnDemand": {"T1": {"priceDimensions": {"D1": {"unit": unit, "pricePerUnit": {"USD": usd}}}}}},
        }
    )


@pytest.fixture
def pricing():
    client = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        yield client, stub


def _expect(stub, price_list):
    stub.add_response(
        "get_products",
        {"PriceList": price_list, "FormatVersion": "aws_v1"},
        {
            "ServiceCode": "AmazonEC2",
            "Filters": price_list_filters("p5.48xlarge", "us-west-2"),
            "FormatVersion": "aws_v1",
        },
    )


def test_one_hourly_price_is_read_from_the_price_list(pricing):
    client, stub = pricing
    _expect(stub, [_product("55.04")])
    assert price_list_price(client, "p5.48xlarge", "us-west-2") == 55.04
    stub.assert_no_pending_responses()


@pytest.mark.parametrize(
    "price_list",
    [[], [_product("55.04"), _product("60.00")], [_product("0.0000000000")], [_product("55.04", unit="Quantity")]],
)
def test_no_single_positive_hourly_price_is_unknown_not_a_guess(price_list, pricing):
    client, stub = pricing
    _expect(stub, price_list)
    assert price_list_price(client, "p5.48xlarge", "us-west-2") is None


def test_filters_pin_linux_shared_on_demand_in_the_region():
    f = {x["Field"]: x["Value"] for x in price_list_filters("trn2.48xlarge", "us-east-2")}
    assert (f["instanceType"], f["regionCode"], f["operatingSystem"], f["tenancy"], f["capacitystatus"]) == (
        "trn2.48xlarge",
        "us-east-2",
        "Linux",
        "Shared",
        "Used",
    )


def test_the_snapshot_knows_the_old_catalog_types_only():
    assert snapshot_price("c5.xlarge") == 0.17 and snapshot_price("p6-b300.48xlarge") is None
