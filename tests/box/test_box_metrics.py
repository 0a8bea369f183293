"""Metrics that follow the cluster (issue 34), on the shared box (tests/box/shared.py): the distribution's real
Prometheus on the head and node_exporter on every node, started by the bootstrap's metrics step; the head's
scrape targets written by the controller from the membership it publishes (hpcc_node/controller/targets.py).

- every ready node's exporter is an up target, labelled with its name, group and instance; so is the head's, and
  Prometheus itself;
- a replaced node's target is gone soon after its instance is terminated, and its replacement's series are there
  soon after it is ready (both printed; the issue's bound is 60 s each). The replacement is asked for with
  `hpcc replace` run on the head, so the same test shows that it replaces the node under its name at a new address
  (one replacement in the box instead of two: each costs a boot).

Printed: `[metrics] ...` lines with what was measured."""

from __future__ import annotations

import json
import time
import urllib.parse

import pytest

from hpcc_contract import metrics
from tests.box.cloud import FleetBox
from tests.box.shared import expected_names
from tests.box.test_box_fleet import ip_of, request_replace, settled, wait_for

pytestmark = [pytest.mark.box, pytest.mark.long]

BOUND = 60  # seconds: the bound for a target to follow a termination, and a replacement's series to appear


def api(box: FleetBox, path: str) -> dict:
    """Prometheus' HTTP API on the head's address ({} while it does not answer)."""
    url = f"http://{box.head.ip}:{metrics.PROMETHEUS_PORT}{path}"
    run = box.on_head("curl", "-sf", "--max-time", "5", "-g", url)
    if run.returncode != 0:
        return {}
    doc = json.loads(run.stdout)
    return doc.get("data") or {} if doc.get("status") == "success" else {}


def targets(box: FleetBox) -> dict[tuple[str, str, str], str]:
    """(job, node, instance_id) -> health of every active target."""
    out = {}
    for t in api(box, "/api/v1/targets?state=active").get("activeTargets", []):
        labels = t.get("labels", {})
        key = (labels.get("job", ""), labels.get(metrics.LABEL_NODE, ""), labels.get(metrics.LABEL_INSTANCE_ID, ""))
        out[key] = t.get("health", "")
    return out


def query(box: FleetBox, expr: str) -> list[dict]:
    return api(box, f"/api/v1/query?query={urllib.parse.quote(expr)}").get("result", [])


def members(box: FleetBox) -> set[tuple[str, str]]:
    """(node, instance) of every ready node in the ledger, and the head's."""
    slots = box.ledger().slots
    ready = {(s.name, s.instance_id) for s in slots.values() if s.state == "ready"}
    return ready | {("head", box.head.instance_id)}


def test_a_every_ready_node_is_an_up_target_and_hpcc_replace_on_the_head_moves_the_target_with_the_node(
    fleet: FleetBox,
):
    box = fleet
    want = members(box)

    def all_up():
        found = targets(box)
        up = {(n, i) for (job, n, i), h in found.items() if job == metrics.JOB_NODE and h == "up"}
        return found if up == want and found.get((metrics.JOB_PROMETHEUS, "head", box.head.instance_id)) else None

    started = time.time()
    found = wait_for(all_up, 180, box, every=2, why=lambda: f"every member's node target up: want {sorted(want)}, "
                     f"seen {targets(box)}")  # fmt: skip
    print(f"[metrics] {len(found)} targets up {time.time() - started:.0f} s after the baseline: {sorted(found)}")
    per_node = query(box, f'count by (node) ({{job="{metrics.JOB_NODE}"}})')
    print("[metrics] series per node (this machine's node_exporter, box defaults):",
          {r["metric"].get("node"): r["value"][1] for r in per_node})  # fmt: skip
    assert per_node and all(int(r["value"][1]) > 0 for r in per_node)
    compute = len(want) - 1  # Slurm's queue and nodes, from the controller's series on the head

    def slurm_counted():
        rows = query(box, 'sum by (state) (hpcc_slurm_nodes{group!=""})')
        got = {r["metric"]["state"]: int(float(r["value"][1])) for r in rows}
        return got if sum(got.values()) == compute and not got.get("down") else None

    by_state = wait_for(slurm_counted, 60, box, every=2, why=lambda: f"Slurm's {compute} compute nodes, none down, "
                        f"in hpcc_slurm_nodes: {query(box, 'hpcc_slurm_nodes')}")  # fmt: skip
    print(f"[metrics] Slurm's compute nodes by state (hpcc_slurm_nodes): {by_state}")

    victim = "a-001"
    before = box.ledger().slots
    old = before[victim].instance_id
    old_ip = ip_of(box, old)
    request_replace(box, victim)

    def terminated():
        inst = box.instances().get(old)
        return inst is None or inst["State"]["Name"] in ("shutting-down", "terminated")

    wait_for(terminated, 180, box, why=f"{victim}'s instance {old} terminated")
    gone_at = time.time()
    wait_for(
        lambda: not any(i == old for (_, _, i) in targets(box)),
        BOUND,
        box,
        why=lambda: f"{old}'s targets gone within {BOUND} s of its termination: {targets(box)}",
    )
    print(f"[metrics] {victim}'s old target ({old}) gone {time.time() - gone_at:.1f} s after its termination")

    now = wait_for(
        lambda: (lambda s: s if s and s[victim].instance_id != old else None)(settled(box, expected_names(box))),
        600,
        box,
        why=f"{victim} replaced and settled",
    )
    new, ready_at = now[victim].instance_id, time.time()
    assert set(now) == expected_names(box) and ip_of(box, new) != old_ip  # under its name, a new address
    wait_for(
        lambda: any(r["value"][1] == "1" for r in query(box, f'up{{instance_id="{new}"}}')),
        BOUND,
        box,
        why=lambda: f"{victim}'s replacement {new} scraped within {BOUND} s of being ready: {targets(box)}",
    )
    print(f"[metrics] {victim}'s replacement ({new}) series present {time.time() - ready_at:.1f} s after it was ready")
