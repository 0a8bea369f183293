"""`hpcc up`'s wait on a controller-run cluster (the Pulumi call is a fake workspace; after it, moto holds what the
controller would write): progress per group until every node is ready, replacements included; failed nodes named
with what the controller does; an early stop when nothing left can come up on its own; a timeout that grows with
the count."""

from __future__ import annotations

from rich.console import Console

from hpcc_node.controller import model
from hpcc_node.controller.model import GroupState
from infra.config.estimates import launch_minutes, ready_timeout_minutes
from infra.config.stackfile import load
from infra.ops.aws import Aws
from infra.ops.up import up, wait_timeout
from infra.plan.embedded_aws import embedded_aws
from tests.ops.fleet import fleet
from tests.ops.support import EXAMPLES, FakeStack

REGION, C = "us-east-1", "cpu-oneccl"
CPU = EXAMPLES / "c6i-oneccl.yaml"  # one group `compute` of 4 (the `compute:` block)


def run_up(env, tmp_path, on_up, sleep, wait_seconds=3600):
    out = Console(record=True, width=250)
    report = up(
        CPU,
        "dev",
        aws=Aws(REGION),
        stack_factory=lambda name: FakeStack(env, CPU, on_up=on_up),
        console=out,
        hostfile_path=tmp_path / "hostfile",
        poll=0,
        sleep=sleep,
        skip_preflight=True,
        wait_seconds=wait_seconds,
    )
    return report, " ".join(out.export_text().split())


def test_up_waits_through_a_failed_boot_and_its_replacement_then_writes_the_hostfile(tmp_path):
    with embedded_aws(REGION) as env:
        made = {}

        def controller_boots_them(_options):
            f = made["f"] = fleet({"compute": 4}, cluster=C, ready=False)
            f.status(
                f.ids["compute-002"],
                name="compute-002",
                ok=False,
                phase="failed",
                step="efa",
                failure="bootstrap",
                message="fi_info -p efa found no device",
                logTail=["[efa] fi_getinfo: -61"],
            )

        polls = []

        def controller_acts(_seconds):
            f, led = made["f"], made["f"].ledger()
            polls.append(1)
            slots = led.load().slots
            if len(polls) == 1:  # three become ready; the failed one is being replaced
                for n in ("compute-000", "compute-001", "compute-003"):
                    led.put_slot(slots[n], state=model.READY)
                led.put_slot(slots["compute-002"], state=model.REPLACING, reason="bootstrap: step efa failed")
                f.ec2.terminate_instances(InstanceIds=[slots["compute-002"].instance_id])
            elif len(polls) == 2:  # the name moved to a new instance, which boots
                new = f.launch("compute", "compute")
                f.ids["compute-002"] = new
                led.name(slots["compute-002"], new, f.clock())
            else:
                led.put_slot(slots["compute-002"], state=model.READY)
                f.publish()
                for n, iid in f.ids.items():
                    f.status(iid, name=n, phase="ready", generation=2)
                f.status(f.head, name="head", phase="ready", generation=2)

        report, text = run_up(env, tmp_path, controller_boots_them, controller_acts)
        assert report.ok, text
        assert len(polls) == 3 and report.readiness.ready_in("compute") == 4
        assert "compute-002 failed at step efa: bootstrap: fi_info -p efa found no device" in text
        assert "[efa] fi_getinfo: -61" in text and "the controller replaces it (attempt 1 of 3)" in text
        assert "ready per group: compute 4/4" in text
        lines = (tmp_path / "hostfile").read_text().splitlines()
        assert len(lines) == 4 and all(line.endswith("slots=32") for line in lines)


def test_a_node_left_failed_ends_the_wait_early_and_says_what_to_do(tmp_path):
    with embedded_aws(REGION) as env:

        def one_left_failed(_options):
            f = fleet({"compute": 4}, cluster=C)
            led = f.ledger()
            led.put_slot(
                led.load().slots["compute-001"],
                state=model.FAILED,
                attempts=3,
                reason="bootstrap: step lustre failed (attempt cap)",
            )

        report, text = run_up(env, tmp_path, one_left_failed, lambda _: (_ for _ in ()).throw(AssertionError("waited")))
        assert not report.ok and not report.readiness.timed_out
        assert [r.node for r in report.readiness.stuck] == ["compute-001"]
        assert "fix the cause, then `hpcc replace compute-001`" in text
        assert "stopped: nothing left can come up on its own" in text


def test_a_protected_group_ends_the_wait_and_is_named(tmp_path):
    with embedded_aws(REGION) as env:

        def protected(_options):
            f = fleet({"compute": 4}, cluster=C, ready=False)
            led = f.ledger()
            led.put_group(GroupState("compute"), protected="10 bootstrap failures in a row: step efa failed")

        report, text = run_up(env, tmp_path, protected, lambda _: None, wait_seconds=0)
        assert not report.ok
        assert "group compute is protected: 10 bootstrap failures in a row: step efa failed" in text
        assert "group compute: 4 of 4 asked nodes not ready" in text


def test_up_times_out_naming_nodes_not_ready(tmp_path):
    with embedded_aws(REGION) as env:
        report, text = run_up(
            env, tmp_path, lambda _: fleet({"compute": 4}, cluster=C, ready=False), lambda _: None, wait_seconds=0
        )
        assert not report.ok and report.readiness.timed_out
        assert "compute-003 not ready: instance running, ledger booting, bootstrap phase pending" in text


def test_the_wait_grows_with_the_count_through_the_launch_waves_only():
    cfg = load(CPU)
    small, large = wait_timeout(cfg, {"compute": 4}), wait_timeout(cfg, {"a": 2048, "b": 2048})
    assert large - small == 60 * (26 - 1)  # 4,096: 1,000 at once, then EC2 refills 2 a second: 26 min against 1
    boot = cfg.cluster.bootstrap.timeout_minutes
    assert small == 60 * (1 + max(boot, 30) + boot + 5)
    assert ready_timeout_minutes(20, 0, 1000, 30) == 30 + 20 + 5
    assert launch_minutes(1000, 1000) == 1 and launch_minutes(1001, 1000) == 2 and launch_minutes(2200, 1000) == 10
