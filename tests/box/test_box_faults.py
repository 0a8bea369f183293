"""Faults in the box: a node that never boots, and EFA nodes whose device is missing. Each starts its own box
(one box at a time on a machine: tests/box/conftest.py stops the shared box first)."""

import re
from datetime import datetime

import pytest

from tests.box.harness import Box, leftovers

pytestmark = pytest.mark.box


def _step_times(log: str, step: str) -> list[datetime]:
    stamps = re.findall(rf"^(\S+Z) \[{re.escape(step)}\]", log, flags=re.MULTILINE)
    return [datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ") for s in stamps]


def _check_log_tail(box: Box, node, status: dict) -> None:
    """The status carries the node's last log lines: contiguous lines of its real log (long ones cut from the
    left), the failure among them."""
    tail, log = status["logTail"], box.log(node).splitlines()
    failed = [line for line in log if f"FAILED at step {status['step']}" in line]
    assert len(failed) == 1 and tail and failed[0].endswith(tail[-1]), (failed, tail)

    def matches(i: int) -> bool:
        return len(log) - i >= len(tail) and all(log[i + k].endswith(t) for k, t in enumerate(tail))

    assert any(matches(i) for i in range(len(log))), (tail, log[-20:])


def test_a_node_that_never_boots_fails_the_others_within_the_join_timeout_naming_it():
    box = Box(ghosts=1, join_timeout_minutes=1).start()
    try:
        ghost = f"compute-002 ({box.ghost_ips()[0]})"
        codes = box.boot(timeout=240)
        assert codes == {n.name: 1 for n in box.nodes}, f"{codes}\n{box.diagnose()}"
        for node in box.nodes:
            status = box.status(node.name)
            assert (status["phase"], status["step"], status["ok"]) == ("failed", "join", False), status
            assert ghost in status["message"], status["message"]
            _check_log_tail(box, node, status)
            # Within the configured join timeout (60 s), plus at most one poll and one ssh attempt.
            join = _step_times(box.log(node), "join")
            waited = (join[-1] - join[0]).total_seconds()
            assert 59 <= waited <= 60 + 2 * 5 + 10, waited
        assert box.status("compute-002") == {"phase": "pending"}  # nothing booted there
    finally:
        box.stop()
    assert leftovers() == []


def test_efa_nodes_without_a_device_retry_after_modprobe_then_report_the_efa_step():
    box = Box(profile="efa", compute_count=2).start()
    try:
        codes = box.boot(timeout=180)
        assert codes == {n.name: 1 for n in box.nodes}, f"{codes}\n{box.diagnose()}"
        for node in box.nodes:
            status = box.status(node.name)
            assert (status["node"], status["phase"], status["step"], status["ok"]) == (
                node.name, "failed", "efa", False), status
            assert "no EFA device" in status["message"] and "modprobe ib_uverbs" in status["message"], status
            assert "c5n.18xlarge" in status["message"]
            _check_log_tail(box, node, status)
            log = box.log(node)
            assert log.index("loading ib_uverbs and retrying") < log.index("FAILED at step efa")
            # modprobe really ran (the box's stand-in records it instead of touching the host's kernel)
            assert node.file("/var/log/hpcc-box-modprobe.log").read_text().split() == ["modprobe", "ib_uverbs"]
            assert "[ssh]" not in log  # nothing after the failing step
            assert node.holder.poll() is None  # the node is kept for its logs
    finally:
        box.stop()
    assert leftovers() == []
