"""On-demand hourly prices: the one fact about instance types that DescribeInstanceTypes does not carry.

Two sources, in this order of trust:
- `price_list_price`: the AWS Price List Query API (`pricing.get_products`, service code AmazonEC2),
  asked when credentials exist (AWS docs: "Using the AWS Price List Query API"; filter fields as in
  `pricing.get_attribute_values`). The client is injected, so tests give a stub.
- `SNAPSHOT`: a small dated copy for offline plans. A type not in it has no price (None): the
  estimate says "unknown" instead of a wrong number.
"""

from __future__ import annotations

import json

# us-east-1, Linux, shared tenancy, on-demand USD per hour. Carried over unchanged from the hand-typed
# rows of infra/catalog.py (last edited there before 2026-11-23); re-check against the Price List API
# (`hpcc` with credentials uses `price_list_price`) before trusting them for a budget.
SNAPSHOT_REGION = "us-east-1"
PRICE_LIST_REGION = "us-east-1"  # where the Price List Query API answers (also ap-south-1, eu-central-1)
SNAPSHOT_DATE = "2026-11-23"
SNAPSHOT: dict[str, float] = {
    "p3dn.24xlarge": 31.212,
    "p4d.24xlarge": 32.7726,
    "p4de.24xlarge": 40.9657,
    "p5.48xlarge": 98.32,
    "p5e.48xlarge": 108.152,
    "p5en.48xlarge": 84.80,
    "g5.48xlarge": 16.288,
    "g6e.48xlarge": 30.13118,
    "trn1.32xlarge": 21.50,
    "c5n.9xlarge": 1.944,
    "c5n.18xlarge": 3.888,
    "c6i.32xlarge": 5.44,
    "c6in.32xlarge": 7.2576,
    "c7i.48xlarge": 8.568,
    "m7i.48xlarge": 9.6768,
    "hpc6a.48xlarge": 2.88,
    "c6i.16xlarge": 2.72,
    "c6i.8xlarge": 1.36,
    "c6i.xlarge": 0.17,
    "c5.xlarge": 0.17,
    "m5.xlarge": 0.192,
    "m6i.2xlarge": 0.384,
}


def snapshot_price(instance_type: str) -> float | None:
    return SNAPSHOT.get(instance_type)


def price_list_filters(instance_type: str, region: str) -> list[dict]:
    """The product attributes that pin one Linux, shared-tenancy, on-demand EC2 price."""
    fields = {
        "instanceType": instance_type,
        "regionCode": region,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
        "licenseModel": "No License required",
    }
    return [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in fields.items()]


def on_demand_usd(price_item: dict) -> float | None:
    """The hourly USD price of one Price List product (terms.OnDemand.*.priceDimensions.*.pricePerUnit.USD)."""
    for term in price_item.get("terms", {}).get("OnDemand", {}).values():
        for dim in term.get("priceDimensions", {}).values():
            usd = dim.get("pricePerUnit", {}).get("USD")
            if dim.get("unit") == "Hrs" and usd is not None and float(usd) > 0:
                return float(usd)
    return None


def price_list_price(pricing, instance_type: str, region: str) -> float | None:
    """Ask the Price List API (`pricing`: a boto3 "pricing" client, which lives in us-east-1 or ap-south-1).

    None when AWS lists no single positive hourly price for the type: several differing answers mean the
    filters were not specific enough, and a guess is worse than "unknown".
    """
    found: set[float] = set()
    pages = pricing.get_paginator("get_products").paginate(
        ServiceCode="AmazonEC2", Filters=price_list_filters(instance_type, region), FormatVersion="aws_v1"
    )
    for page in pages:
        for raw in page.get("PriceList", []):
            usd = on_demand_usd(json.loads(raw) if isinstance(raw, str) else raw)
            if usd is not None:
                found.add(usd)
    return found.pop() if len(found) == 1 else None
