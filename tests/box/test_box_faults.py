"""Faults in the box: an EFA head whose device is missing. Its own box (one box at a time on a machine:
tests/box/conftest.py stops the shared box first). A node that never boots no longer fails the others (nodes wait
for the head only): tests/box/test_box_fleet.py checks that the others are ready and the bad one replaced."""

import pytest

from tests.box.cloud import FleetBox
from tests.box.machine import leftovers

pytestmark = [pytest.mark.box, pytest.mark.long]


def _check_log_tail(box: FleetBox, node, status: dict) -> None:
    """The status carries the node's last log lines: contiguous lines of its real log (long ones cut from the
    left), the failure among them."""
    tail, log = status["logTail"], box.log(node).splitlines()
    failed = [line for line in log if f"FAILED at step {status['step']}" in line]
    assert len(failed) == 1 and tail and failed[0].endswith(tail[-1]), (failed, tail)

    def matches(i: int) -> bool:
        return len(log) - i >= len(tail) and all(log[i + k].endswith(t) for k, t in enumerate(tail))

    assert any(matches(i) for i in range(len(log))), (tail, log[-20:])


def test_efa_nodes_without_a_device_retry_after_modprobe_then_report_the_efa_step():
    """The head (c5n.18xlarge, EFA expected) fails at efa; its controller never starts, so nothing is launched (the
    compute role runs the same efa step)."""
    box = FleetBox(profile="efa", groups=[{"name": "compute", "count": 2}]).start()
    try:
        codes = box.boot(timeout=300)
        print("\n" + box.phases.report("EFA box"))
        assert codes == {"head": 1}, f"{codes}\n{box.diagnose()}"
        assert box.controller is None and box.instances() == {}
        for node in box.nodes:
            status = box.status(node.name)
            assert (status["node"], status["phase"], status["step"], status["ok"]) == (
                node.name,
                "failed",
                "efa",
                False,
            ), status
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
