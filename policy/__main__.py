"""hpcc's policy pack: `pulumi up --policy-pack policy`. Every policy is mandatory; the rule table is rules.py
(checks in node_rules.py, network_rules.py and iam_rules.py, over records.py's records), and the same rules run
offline over `hpcc plan`'s graph too (tests/policy/test_policy.py)."""

import sys
from pathlib import Path

from pulumi_policy import EnforcementLevel, PolicyPack

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pack import policies  # noqa: E402 - after sys.path gets the pack's own directory

PolicyPack(name="hpcc", enforcement_level=EnforcementLevel.MANDATORY, policies=policies())
