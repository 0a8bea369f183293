"""Faults in the box: a node that never boots, and a node whose EFA device is missing."""

import time

from tests.box.harness import Box


def test_a_node_that_never_boots_fails_the_others_within_the_join_timeout_naming_it():
    box = Box(ghosts=1, join_timeout_minutes=1)
    try:
        box.start()
        started = time.time()
        codes = box.boot(timeout=240)
        elapsed = time.time() - started
        assert set(codes.values()) == {1}, codes
        # join timeout (60 s) plus the start-up jitter and one poll: well inside the bootstrap's own bound
        assert elapsed < 60 + 60, elapsed
        for node in box.nodes:
            status = box.status(node.name)
            assert (status["phase"], status["step"], status["ok"]) == ("failed", "join", False)
            assert "compute-002 (10.200.0.200)" in status["message"]
            assert any("never joined" in line for line in status["logTail"])
    finally:
        box.stop()


def test_an_efa_node_without_a_device_retries_after_modprobe_then_reports_the_efa_step():
    box = Box(compute_type="c5n.18xlarge", compute_count=1)
    try:
        box.start()
        codes = box.boot(timeout=180, wait=["compute-000"])
        assert codes == {"compute-000": 1}
        status = box.status("compute-000")
        assert (status["phase"], status["step"], status["ok"]) == ("failed", "efa", False)
        assert "no EFA device" in status["message"] and "modprobe ib_uverbs" in status["message"]
        log = box.log(box.nodes[1])
        assert log.index("loading ib_uverbs and retrying") < log.index("FAILED at step efa")
        assert any("FAILED at step efa" in line for line in status["logTail"])
        assert box.nodes[1].holder.poll() is None  # the node is kept for its logs
    finally:
        box.stop()
