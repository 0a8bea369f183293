"""Day-2 figures (`make bench`): what a second `pulumi up` does to the nodes of a 64-node cluster, from the
offline plan compared with the first plan (infra/plan/changes.py). Target: adding one node replaces none.

Before the day-2 work every edit here replaced all 65 instances: the node count and the tags were in the
launch templates, and every instance followed the template's latest version."""

from __future__ import annotations

import copy
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from infra.config.stackfile import read_raw  # noqa: E402 - after sys.path gets the checkout
from infra.plan.previous import PreviousPlan  # noqa: E402 - after sys.path gets the checkout
from infra.plan.runner import plan_config  # noqa: E402 - after sys.path gets the checkout

NODES = 64
INSTANCE = "aws:ec2/instance:Instance"
EDITS = {
    "add one node": lambda c: c["compute"].update(count=NODES + 1),
    "remove one node": lambda c: c["compute"].update(count=NODES - 1),
    "edit a tag": lambda c: c.setdefault("tags", {}).update(owner="research"),
    "longer bootstrap timeout": lambda c: c.setdefault("bootstrap", {}).update(timeoutMinutes=90),
}


def main() -> None:
    base = copy.deepcopy(read_raw(ROOT / "examples" / "c6i-oneccl.yaml"))
    base["hpcc:cluster"]["compute"]["count"] = NODES
    print(f"{NODES} compute nodes + head (examples/c6i-oneccl.yaml): what the next `pulumi up` does to the instances")
    print("| edit | instances created | replaced | deleted | updated in place | other changes | diff s |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as first:
        plan_config(base).write(Path(first))
        previous = PreviousPlan.load(first)
        for label, edit in EDITS.items():
            config = copy.deepcopy(base)
            edit(config["hpcc:cluster"])
            started = time.perf_counter()
            result = plan_config(config, previous=previous)
            seconds = time.perf_counter() - started
            nodes = Counter(c.action for c in result.changes if c.type == INSTANCE)
            other = Counter(c.action for c in result.changes if c.type != INSTANCE)
            print(
                f"| {label} | {nodes['create']} | {nodes['replace']} | {nodes['delete']} | {nodes['update']} | "
                f"{', '.join(f'{n} {a}' for a, n in sorted(other.items())) or '-'} | {seconds:.1f} |"
            )


if __name__ == "__main__":
    main()
