"""Metrics that follow the cluster (issue 34), on the shared box (tests/box/shared.py): the distribution's real
Prometheus on the head and node_exporter on every node, started by the bootstrap's metrics step; the head's
scrape targets written by the controller from the membership it publishes (hpcc_node/controller/targets.py).

- every ready node's exporter is an up target, labelled with its name, group and instance; so is the head's, and
  Prometheus itself;
- a replaced node's target is gone soon after its instance is terminated, and its replacement's series are there
  soon after it is ready (both printed; the issue's bound is 60 s each). The replacement is asked for with
  `hpcc replace` run on the head, so the same test shows that it replaces the node under its name at a new address
  (one replacement in the box instead of two: each costs a boot).

- (b) the alerts feed the heal loop: the real EFA errors rule's expression over a 1-minute window with no `for`
  (the rule's own 10 and 30 minutes are `promtool test rules`' to check: tests/render/test_prometheus.py), added to
  the head's rules for the test; an EFA error counter rising in a node's textfile fires it, the controller raises
  an alert on that node and drains it in Slurm with the rule named, and resumes it once the counter stops; a
  Prometheus frozen (SIGSTOP: it takes connections and answers nothing) is said in the controller's log while its
  loops go on;
- (c) `hpcc top --once`, run on the head against its Prometheus (`--prometheus`, as from inside the VPC), shows a
  running Slurm job with its nodes, its name (a user's text) shown as written.

Printed: `[metrics] ...` lines with what was measured."""

from __future__ import annotations

import json
import re
import time
import urllib.parse

import pytest
import yaml

from hpcc_contract import metrics
from hpcc_node.controller.model import ALERT, ALERT_REASON, RESUME
from infra.render import prometheus as prom
from tests.box.cloud import FleetBox
from tests.box.node import VENV_BIN
from tests.box.shared import expected_names
from tests.box.test_box_fleet import ip_of, request_replace, settled, slurm, wait_for

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


def head_series(box: FleetBox) -> dict[str, float]:
    """The controller's own series file on the head, as name -> value (labels dropped: the few unlabelled ones)."""
    text = box.head.file(f"{metrics.TEXTFILE_DIR}/{metrics.TEXTFILE_CONTROLLER}").read_text()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(hpcc_controller_\w+) (\S+)$", text, re.M)}


def test_b_a_firing_drain_rule_alerts_and_drains_its_node_until_it_stops_and_a_frozen_prometheus_stops_nothing(
    fleet: FleetBox,
):
    box, node = fleet, "a-002"
    pid = box.head.run("cat", "/run/hpcc-prometheus.pid").stdout.strip()
    assert pid.isdigit(), "no Prometheus pid on the head"

    # Prometheus frozen: the controller says so once and goes on looping
    loops = head_series(box)["hpcc_controller_loops_total"]
    box.undo("the head's Prometheus thawed", lambda: box.head.run("kill", "-CONT", pid))
    box.head.run("kill", "-STOP", pid, check=True)
    frozen = wait_for(
        lambda: (
            "Prometheus alerts unread" in box.controller_log()
            and head_series(box)["hpcc_controller_loops_total"] >= loops + 2
        ),
        120,
        box,
        why=lambda: f"the controller's loops on past a frozen Prometheus: {box.controller_log()[-1500:]}",
    )
    assert frozen
    box.head.run("kill", "-CONT", pid, check=True)
    wait_for(lambda: "Prometheus alerts read again" in box.controller_log(), 60, box, why="the alerts read again")
    looped = head_series(box)["hpcc_controller_loops_total"] - loops
    print(f"[metrics] Prometheus frozen, then thawed: the controller looped on ({looped:.0f} loops)")

    # the EFA rule, over a minute, added to the head's rules for the test
    rules_file = box.head.file(prom.RULES_PATH)
    original = rules_file.read_text()
    (efa,) = [a for a in prom.alerts() if a.name == prom.ALERT_EFA_ERRORS]
    quick = {**prom.rule(efa), "expr": efa.expr.replace("[10m]", "[1m]"), "for": "0s"}
    assert quick["expr"] != efa.expr
    doc = yaml.safe_load(original)
    doc["groups"].append({"name": "box-quick", "rules": [quick]})

    def put_rules(text: str) -> None:
        rules_file.write_text(text)
        box.head.run("kill", "-HUP", pid, check=True)

    injected = box.node(node).file(f"{metrics.TEXTFILE_DIR}/box_efa.prom")
    box.undo("the quick EFA rule removed", lambda: put_rules(original))
    box.undo("the injected EFA counter removed", lambda: injected.unlink(missing_ok=True))
    box.undo(f"{node} resumed", lambda: box.on_head("scontrol", "update", f"NodeName={node}", "State=RESUME"))
    put_rules(yaml.safe_dump(doc, sort_keys=False, width=1000))

    def counter(value: int) -> None:
        tmp = injected.with_suffix(".tmp")
        tmp.write_text(
            "# TYPE hpcc_efa_errors_total counter\n"
            f'hpcc_efa_errors_total{{device="rdmap-box0",counter="rdma_read_wr_err"}} {value}\n'
        )
        tmp.rename(injected)

    started, value = time.time(), 1

    def drained():
        nonlocal value
        value += 3  # the counter rises every look, as a failing link's does
        counter(value)
        state = slurm(box).get(node)
        return state if state and "DRAIN" in state.states and state.reason.startswith(ALERT_REASON) else None

    state = wait_for(
        drained, 240, box, every=5, why=lambda: f"{node} drained for the EFA alert: {slurm(box).get(node)}"
    )
    fired = time.time() - started
    assert prom.ALERT_EFA_ERRORS in state.reason and "rdma_read_wr_err" in state.reason, state.reason
    raised = [e for e in box.ledger().events if e.kind == ALERT and e.node == node and e.at >= started - 5]
    assert raised and "rdmap-box0" in raised[0].detail, raised
    print(f"[metrics] {node} drained {fired:.0f} s after its EFA errors began rising: {state.reason!r}")

    stopped = time.time()  # the counter stays: no rise in the last minute, the rule stops firing
    resumed = wait_for(
        lambda: (lambda st: st if st and not st.states & {"DRAIN", "DOWN"} else None)(slurm(box).get(node)),
        240,
        box,
        every=5,
        why=lambda: f"{node} resumed once its EFA errors stopped rising: {slurm(box).get(node)}",
    )
    assert resumed
    back = [e for e in box.ledger().events if e.kind == RESUME and e.node == node and e.at >= stopped]
    assert back and "no longer fires" in back[0].detail, back
    print(f"[metrics] {node} resumed {time.time() - stopped:.0f} s after its EFA errors stopped rising")


def test_c_hpcc_top_once_shows_the_running_job_with_its_nodes(fleet: FleetBox):
    box, name = fleet, "top <check> [b]"  # a user's text: shown as written, never markup
    out = box.on_head("sbatch", "--parsable", "-N", "2", "-w", "a-000,b-000", "-J", name, "--wrap", "sleep 900")
    job = out.stdout.strip().split(";")[0]
    assert job.isdigit(), out.stdout + out.stderr
    box.undo(f"job {job} cancelled", lambda: box.on_head("scancel", job))
    url = f"http://{box.head.ip}:{metrics.PROMETHEUS_PORT}"
    submitted = time.time()

    def top() -> str:
        return box.head.run(
            str(VENV_BIN / "python"), "-m", "infra.ops.cli", "top", "--once", "--prometheus", url
        ).stdout

    def shown():
        text = top()
        return text if job in text and "a-000, b-000" in text else None

    frame = wait_for(shown, 120, box, every=3, why=lambda: f"job {job} in hpcc top's frame: {top()[-2000:]}")
    assert name in frame, frame
    print(f"[metrics] hpcc top showed job {job} on a-000, b-000 {time.time() - submitted:.0f} s after sbatch:\n{frame}")
