"""Metrics that follow the cluster (issue 34), on the shared box (tests/box/shared.py): the distribution's real
Prometheus on the head and node_exporter on every node, started by the bootstrap's metrics step; the head's
scrape targets written by the controller from the membership it publishes (hpcc_node/controller/targets.py).

- every ready node's exporters (node_exporter, and the stand-in dcgm-exporter on the compute nodes) are up targets,
  labelled with its name, group and instance; so is the head's node_exporter, and Prometheus itself;
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
  running Slurm job with its nodes, its name (a user's text) shown as written;
- (d) a job given two GPUs (the shared box's Slurm has Gres=gpu:8 on every compute node, the stand-in
  dcgm-exporter serves 8 GPUs there) has those GPUs' series labelled with its id while it runs and not after (the
  Prolog's and Epilog's job map), and every panel of every dashboard returns data from the box's Prometheus.

Printed: `[metrics] ...` lines with what was measured."""

from __future__ import annotations

import json
import re
import time
import urllib.parse

import pytest
import yaml

from hpcc_contract import dcgm, metrics
from hpcc_node.controller.model import ALERT, ALERT_REASON, RESUME
from infra.render import prometheus as prom
from infra.render.dashboards import metric_names, panel_queries
from tests.box.cloud import FleetBox
from tests.box.node import VENV_BIN
from tests.box.shared import STANDIN_STATE, expected_names
from tests.box.test_box_fleet import ip_of, request_replace, settled, slurm, wait_for

pytestmark = [pytest.mark.box, pytest.mark.long]

# The panels that show only trouble (dashboard uid, title): empty while all is well, they must read series that are
# there (a failing check is `hpcc_health_check_ok == 0`) or that come with their event: Prometheus' ALERTS while an
# alert is pending or firing, the health agent's Xid counter once it has seen a Xid (tests/ops/
# test_dashboard_panels.py has both with data). Every other panel must return data.
TROUBLE_ONLY = {
    ("hpcc-cluster", "Alerts firing"),
    ("hpcc-node", "GPU Xids (DCGM's last; hpcc's in the last hour)"),
    ("hpcc-fleet", "Failing health checks"),
}
EVENT_ONLY = ("ALERTS", "hpcc_gpu_xid_errors_total")
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

    gpus = {(n, i) for n, i in want if n != "head"}  # every compute node: the stand-in dcgm-exporter

    def all_up():
        found = targets(box)
        up = {(n, i) for (job, n, i), h in found.items() if job == metrics.JOB_NODE and h == "up"}
        gpu_up = {(n, i) for (job, n, i), h in found.items() if job == metrics.JOB_GPU and h == "up"}
        itself = found.get((metrics.JOB_PROMETHEUS, "head", box.head.instance_id))
        return found if up == want and gpu_up == gpus and itself else None

    started = time.time()
    found = wait_for(all_up, 180, box, every=2, why=lambda: f"every member's node and GPU target up: want "
                     f"{sorted(want)}, seen {targets(box)}")  # fmt: skip
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


def test_d_a_jobs_gpu_series_carry_its_id_while_it_runs_and_every_dashboard_panel_has_data(fleet: FleetBox):
    """(b) and (d): a Slurm job given two of a-000's GPUs (`--gpus-per-node`: SLURM_JOB_GPUS in its Prolog, which
    writes dcgm-exporter's job map) has those GPUs' series labelled hpc_job=<its id> while it runs and not after;
    meanwhile every panel of every dashboard (infra/render/dashboards.py) returns data from the box's Prometheus,
    its node and job variables set to a-000 and the job. a-000's exporter serves DCGM 4.7's names and units, as
    dcgm-exporter 4.9.0 on today's DLAMI does, the other nodes 4.8.x's: what the dashboards read is what the head's
    rules record from either. The box's nodes have no EFA devices: a-000's textfile gets the agent's EFA counters
    for the test (the series the health agent writes from the devices' counters)."""
    box, node = fleet, "a-000"
    names = box.node(node).file(f"{STANDIN_STATE}/dcgm_names")
    box.undo(f"{node}'s exporter back on 4.8.x's names", lambda: names.unlink(missing_ok=True))
    names.parent.mkdir(parents=True, exist_ok=True)
    names.write_text("4.9\n")
    gpu_util = box.node(node).file(f"{STANDIN_STATE}/gpu_util")
    efa = box.node(node).file(f"{metrics.TEXTFILE_DIR}/box_efa_bytes.prom")
    box.undo(f"{node}'s GPUs idle again", lambda: gpu_util.unlink(missing_ok=True))
    box.undo(f"{node}'s EFA counters removed", lambda: efa.unlink(missing_ok=True))
    gpu_util.parent.mkdir(parents=True, exist_ok=True)  # the stand-ins' state: none yet is the healthy default
    gpu_util.write_text("0:93,1:71\n")
    out = box.on_head(
        "sbatch", "--parsable", "-N", "1", "-w", node, "--gpus-per-node=2", "-J", "gpu job", "--wrap", "sleep 900"
    )
    job = out.stdout.strip().split(";")[0]
    assert job.isdigit(), out.stdout + out.stderr
    box.undo(f"job {job} cancelled", lambda: box.on_head("scancel", job))
    submitted = time.time()
    labelled = f'{dcgm.UTILIZATION.record}{{{dcgm.JOB_LABEL}="{job}"}}'

    def efa_counters(at: float) -> None:
        rx = int((at - submitted) * 2e9)
        tmp = efa.with_suffix(".tmp")
        tmp.write_text(
            "# TYPE hpcc_efa_bytes_total counter\n"
            f'hpcc_efa_bytes_total{{device="rdmap-box0",direction="rx"}} {rx}\n'
            f'hpcc_efa_bytes_total{{device="rdmap-box0",direction="tx"}} {rx}\n'
            "# TYPE hpcc_efa_errors_total counter\n"
            'hpcc_efa_errors_total{device="rdmap-box0",counter="rx_drops"} 0\n'
        )
        tmp.rename(efa)

    def on_gpus():
        efa_counters(time.time())
        rows = query(box, labelled)
        seen = {(r["metric"].get(metrics.LABEL_NODE), r["metric"].get("gpu")) for r in rows}
        return rows if seen == {(node, "0"), (node, "1")} else None

    rows = wait_for(on_gpus, 120, box, every=3, why=lambda: f"job {job}'s GPUs labelled: {query(box, labelled)}")
    at_node = f'{{{metrics.LABEL_NODE}="{node}"}}'
    assert query(box, dcgm.UTILIZATION.renamed + at_node) and not query(box, dcgm.UTILIZATION.legacy + at_node)
    print(f"[metrics] job {job}'s two GPUs on {node} labelled hpc_job={job} {time.time() - submitted:.0f} s after "
          f"sbatch, utilisation {sorted(float(r['value'][1]) for r in rows)} recorded from DCGM 4.7's "
          f"{dcgm.UTILIZATION.renamed}")  # fmt: skip

    panels = panel_queries(node=node, job_id=job)
    empty: list[str] = []
    quiet: list[str] = []

    def exported(expr: str) -> bool:
        """Every series the query reads is in Prometheus (a filter such as `== 0` may leave none while all is well);
        an event's own series (an alert firing, an Xid seen) only once its alerting rules are loaded."""
        for name in metric_names(expr):
            if name in EVENT_ONLY:
                if name == "ALERTS" and not api(box, "/api/v1/rules?type=alert").get("groups"):
                    return False
            elif not query(box, f'count({{__name__="{name}"}})'):
                return False
        return True

    def every_panel():
        efa_counters(time.time())
        blank = [(board, title, expr) for board, title, expr in panels if not query(box, expr)]
        empty[:] = [f"{b} / {t}: {e}" for b, t, e in blank if (b, t) not in TROUBLE_ONLY or not exported(e)]
        quiet[:] = [f"{b} / {t}" for b, t, e in blank]
        return not empty

    wait_for(every_panel, 180, box, every=5, why=lambda: "panels with no data:\n" + "\n".join(empty))
    boards = sorted({board for board, _, _ in panels})
    print(f"[metrics] {len(panels) - len(quiet)} of {len(panels)} panel queries of {len(boards)} dashboards {boards} "
          f"returned data {time.time() - submitted:.0f} s after sbatch; the others show only trouble, of which there "
          f"was none, and read series Prometheus has: {quiet}")  # fmt: skip

    cancelled = box.on_head("scancel", job)
    assert cancelled.returncode == 0, cancelled.stderr
    ended = time.time()

    def unlabelled():
        still = query(box, labelled)
        plain = query(box, f'{dcgm.UTILIZATION.record}{{{metrics.LABEL_NODE}="{node}", gpu="0"}}')
        return not still and plain and all(dcgm.JOB_LABEL not in r["metric"] for r in plain)

    wait_for(unlabelled, 120, box, every=3, why=lambda: f"job {job}'s label gone: {query(box, labelled)}")
    print(f"[metrics] job {job}'s label gone from {node}'s GPU series {time.time() - ended:.0f} s after scancel")
