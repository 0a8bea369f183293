"""The controller's ledger table (hpcc_contract/names.py ledger_table): one string hash key, billed on demand so a
4,096-node boot is not throttled by a provisioned rate. The program creates it so (infra/program/components/state.py),
the controller and `hpcc replace` use it (hpcc_node/controller/ledger.py owns its items), and the plan's embedded
AWS refuses any other shape (infra/plan/mocks_state.py)."""

from __future__ import annotations

from typing import Any, Dict

# the hash key: `<kind>#<name>` (slot#gpu-000, iid#i-0abc, ...), or `lease`, `membership`, `dropped-statuses`
KEY = "pk"
BILLING_MODE = "PAY_PER_REQUEST"


def table_definition(name: str) -> Dict[str, Any]:
    """CreateTable's arguments for the ledger table `name`."""
    return {
        "TableName": name,
        "KeySchema": [{"AttributeName": KEY, "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": KEY, "AttributeType": "S"}],
        "BillingMode": BILLING_MODE,
    }
