"""The check runner (a child per check, a timeout is a failure, a missing tool says so) and the node's verdict
with the file Slurm's HealthCheckProgram reads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from hpcc_node.health import host, verdict
from hpcc_node.health.runner import PACKAGE_ROOT, CheckSpec, Runner
from hpcc_node.health.verdict import CheckResult, fail, ok, unknown, warn

PY = sys.executable
MARGIN_S = 2.0  # process start and polling


def echo(name: str, text: str, rc: int = 0) -> CheckSpec:
    code = f"import sys; print({text!r}); sys.exit({rc})"
    return CheckSpec(
        name,
        (PY, "-c", code),
        lambda out, rc: ok(name, out.strip()) if rc == 0 else fail(name, f"rc {rc}: {out.strip()}"),
    )


def sleeper(name: str, seconds: float, timeout: float) -> CheckSpec:
    return CheckSpec(name, (PY, "-c", f"import time; time.sleep({seconds})"), lambda out, rc: ok(name), timeout)


def test_checks_run_in_children_and_their_output_reaches_the_parser():
    results = Runner().run([echo("a", "hello"), echo("b", "broken", 3)])
    assert results[0] == ok("a", "hello") and results[1].status == "fail" and "rc 3: broken" in results[1].evidence


def test_a_blocked_check_is_a_failure_within_its_timeout_and_does_not_hold_up_the_others():
    start = time.monotonic()
    results = Runner().run([sleeper("mount", 60, 0.5), echo("quick", "fine")])
    took = time.monotonic() - start
    assert took < 0.5 + MARGIN_S, took
    assert (results[0].status, results[0].action) == ("fail", "drain")
    assert "no answer within 0.5 s" in results[0].evidence
    assert results[1].status == "ok"


def test_a_child_that_cannot_be_killed_is_left_and_remembered_not_started_again(tmp_path):
    """SIGKILL waits while a reader is in uninterruptible sleep (a hung Lustre): here a kill that does nothing."""
    marker = tmp_path / "starts"
    spec = CheckSpec(
        "mount",
        (PY, "-c", f"open({str(marker)!r}, 'a').write('x'); import time; time.sleep(60)"),
        lambda out, rc: ok("mount"),
        0.3,
    )
    runner = Runner(kill=lambda pid, sig: None)
    try:
        start = time.monotonic()
        first = runner.run([spec])[0]
        second = runner.run([spec])[0]
        assert time.monotonic() - start < 2 * 0.3 + MARGIN_S
        assert first.status == "fail" and second.status == "fail" and "still blocked" in second.evidence
        assert marker.read_text() == "x"  # one child, not two
    finally:
        for proc, _ in runner.stuck.values():
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert runner.run([echo("mount", "back")])[0].status == "ok"  # the child is gone: the check runs again


def test_a_grandchild_holding_the_output_open_does_not_hold_the_runner():
    code = "import os, time\nif os.fork() == 0:\n    time.sleep(60)\nprint('done')"
    start = time.monotonic()
    result = Runner().run([CheckSpec("x", (PY, "-c", code), lambda out, rc: ok("x", out.strip()), 5)])[0]
    assert result == ok("x", "done") and time.monotonic() - start < 5


def test_a_missing_tool_on_a_gpu_node_is_a_failure_that_says_so():
    spec = CheckSpec("gpu_count", ("nvidia-smi", "-L"), lambda out, rc: ok("gpu_count"), needed_on="a GPU node")
    result = Runner(env={"PATH": "/nonexistent"}).run([spec])[0]
    assert (result.status, result.action) == ("fail", "drain")
    assert result.evidence == "nvidia-smi missing on a GPU node"


def test_a_parser_that_raises_is_unknown_never_a_pass():
    def broken(out, rc):
        raise KeyError("field")

    result = Runner().run([CheckSpec("x", (PY, "-c", "print(1)"), broken)])[0]
    assert result.status == "unknown" and "KeyError" in result.evidence


def test_the_python_probes_run_as_children_through_the_runner(tmp_path):
    specs = [
        CheckSpec(
            verdict.DISK_FREE,
            tuple(host.probe_argv("disk", str(tmp_path), "0")),
            lambda out, rc: host.parse_probe(out, rc, verdict.DISK_FREE),
        ),
        CheckSpec(
            verdict.SHARED_MOUNT,
            tuple(host.probe_argv("mount", str(tmp_path), "n")),
            lambda out, rc: host.parse_probe(out, rc, verdict.SHARED_MOUNT),
        ),
    ]
    disk, mount = Runner(env={"PATH": os.environ["PATH"]}).run(specs)
    assert disk.status == "ok" and mount.status == "fail" and "is not mounted" in mount.evidence


def test_a_hung_mount_fails_its_check_at_the_timeout_with_the_mount_named():
    """A FIFO where the probe writes blocks its open(2), as a hung Lustre server blocks a writer (the box does
    the same in a node's own tmpfs): the check fails at its timeout, naming the probe and the mount."""
    from hpcc_node.health import checks

    if not os.path.ismount("/dev/shm"):
        pytest.skip("no tmpfs mounted at /dev/shm")
    name = f"pytest-{os.getpid()}"
    fifo = f"/dev/shm/{host.PROBE_FILE.format(host=name)}"
    os.mkfifo(fifo)
    try:
        facts = checks.NodeFacts(name, shared_mount="/dev/shm")
        (result,) = Runner(env={"PATH": os.environ["PATH"]}).run(checks.specs([verdict.SHARED_MOUNT], facts, 1))
    finally:
        os.unlink(fifo)
    assert (result.status, result.action) == ("fail", "drain"), result
    assert result.evidence.startswith("the mount probe of /dev/shm gave no answer within 1 s"), result.evidence


# -- results and the verdict ------------------------------------------------------------------------


def test_a_result_keeps_failure_and_taking_out_together():
    with pytest.raises(ValueError):
        CheckResult("x", "unknown", "e", "drain")  # unknown never drains
    with pytest.raises(ValueError):
        CheckResult("x", "fail", "e", "none")  # a failure always takes the node out
    with pytest.raises(ValueError):
        CheckResult("x", "fail", "e", "drain", "pray")
    assert fail("x", "e").failure_class == "health"


def test_the_node_verdict_is_the_worst_result_with_the_strongest_action_and_remedy():
    v = verdict.node_verdict(
        [
            ok("a"),
            warn("b", "w"),
            fail("xid", "Xid 79 on PCI:0000:53:00", "down", "reboot"),
            fail("disk_free", "full", "drain", "none"),
            unknown("c", "u"),
        ],
        now=1000,
    )
    assert (v.status, v.action, v.remedy, v.healthy) == ("fail", "down", "reboot", False)
    assert v.reason == "hpcc: xid: Xid 79 on PCI:0000:53:00"
    assert verdict.node_verdict([ok("a"), unknown("b", "odd")], 0).healthy
    assert verdict.node_verdict([ok("a")], 0).reason == ""


def test_no_check_at_all_is_not_a_clean_bill():
    v = verdict.node_verdict([], 0)
    assert v.status == "unknown" and "no check ran" in v.reason


def test_the_reason_fits_slurm_on_one_line():
    v = verdict.node_verdict([fail("xid", "line one\nline two " + "x" * 500)], 0)
    assert "\n" not in v.reason and len(v.reason) <= verdict.REASON_MAX


def test_the_verdict_file_round_trips_and_is_read_for_slurm(tmp_path):
    path = str(tmp_path / "verdict")
    v = verdict.node_verdict(
        [ok("gpu_count", "8 GPU(s)"), fail("xid", "Xid 79 on PCI:0000:53:00: gone", "down", "reboot")], now=1000
    )
    verdict.write_verdict(path, v)
    assert verdict.parse_verdict(open(path).read()) == v
    assert verdict.read_verdict(path, now=1010) == (False, "hpcc: xid: Xid 79 on PCI:0000:53:00: gone")
    verdict.write_verdict(path, verdict.node_verdict([ok("gpu_count")], now=1000))
    assert verdict.read_verdict(path, now=1010) == (True, "")
    assert os.listdir(tmp_path) == ["verdict"]  # written through a rename, nothing left behind


def test_the_reader_slurm_calls_exits_by_the_verdict(tmp_path):
    path = str(tmp_path / "verdict")
    env = {**os.environ, "PYTHONPATH": PACKAGE_ROOT}

    def call():
        return subprocess.run(
            [PY, "-m", "hpcc_node.health.verdict", path], capture_output=True, text=True, cwd=str(tmp_path), env=env
        )

    assert call().returncode == 1
    verdict.write_verdict(
        path, verdict.node_verdict([fail("xid", "Xid 79 on PCI:0000:53:00", "down", "reboot")], time.time())
    )
    out = call()
    assert out.returncode == 1 and out.stdout.strip() == "hpcc: xid: Xid 79 on PCI:0000:53:00"
    verdict.write_verdict(path, verdict.node_verdict([ok("gpu_count")], time.time()))
    assert call().returncode == 0


def test_a_missing_damaged_or_stale_verdict_is_not_healthy(tmp_path):
    path = tmp_path / "verdict"
    healthy, why = verdict.read_verdict(str(path), now=0)
    assert not healthy and "no verdict" in why
    path.write_text("status=ok\n")
    assert not verdict.read_verdict(str(path), now=0)[0]
    path.write_text(verdict.VERDICT_FORMAT + "\nstatus=ok\n")
    assert "incomplete" in verdict.read_verdict(str(path), now=0)[1]
    verdict.write_verdict(str(path), verdict.node_verdict([ok("a")], now=1000))
    healthy, why = verdict.read_verdict(str(path), now=1000 + verdict.VERDICT_MAX_AGE_S + 1)
    assert not healthy and "the agent stopped" in why


def test_the_timer_and_the_lists_are_stated():
    assert 10 <= verdict.INTERVAL_S <= 15 and verdict.CHECK_TIMEOUT_S < verdict.INTERVAL_S
    assert verdict.INTERVAL_S + verdict.CHECK_TIMEOUT_S < 60  # leaves the controller time for the 60 s target
    assert verdict.DCGM_DIAG in verdict.BOOT_CHECKS and verdict.DCGM_DIAG not in verdict.PERIODIC_CHECKS
    assert verdict.XID in verdict.PERIODIC_CHECKS and verdict.EPILOG_CHECKS == (verdict.XID,)
