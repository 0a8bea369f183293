"""A GPU compute node's agent keeps its dcgm-exporter on the bundle's answer (hpcc_node/agent_dcgm.py): the role
script's apply-dcgm once when the bundle pairs the node's DCGM with another exporter, brings another counters file,
or the node has no record (it booted before records); not again for the same answer; never on the head, a CPU node
or with observability off; a failed apply said with its output and tried again after a while, the tick going on."""

from pathlib import Path

import pytest

from hpcc_contract import dcgm
from hpcc_node import agent_dcgm, agent_metrics
from hpcc_node.agent_dcgm import dcgm_due
from hpcc_node.dcgm import applied_record, parse_record
from tests.node.agent_support import SETTINGS, FakeAws, P, make_agent
from tests.node.test_agent_metrics import METRICS

CURRENT = applied_record("1:4.7.0-1")  # what this bundle applies on a node with DCGM 4.7.0
# What a bundle from before DCGM 4.7's pairing applied on that node: no exporter.
UNPAIRED = CURRENT.replace("exporter=4.9.0", "exporter=none")
OTHER_COUNTERS = CURRENT.split("counters=")[0] + "counters=" + "0" * 64


def applies(agent) -> int:
    return sum(1 for argv in agent.run.calls if argv[-1] == "apply-dcgm")


def booted(tmp_path, name="compute-001", gpus=8, record=UNPAIRED, patches=METRICS, now=None):
    """A node whose health step found `gpus` GPUs and whose metrics step recorded `record` (None: nothing)."""
    aws = FakeAws()
    aws.members("10.0.0.4\n10.0.0.5")
    aws.put(f"{P}/settings", SETTINGS)
    clock = (lambda: now[0]) if now else (lambda: 1000.0)
    ip = "10.0.0.4" if name == "head" else "10.0.0.5"
    agent, _ = make_agent(tmp_path, aws, name, clock=clock, ip=ip, patches=patches)
    etc = Path(agent.c.etc)
    (etc / "health.env").write_text(f"GPUS={gpus}\nEFA_DEVICES=0\nDCGM_LEVEL=2\n")
    if record is not None:
        (etc / Path(dcgm.APPLIED_PATH).name).write_text(record + "\n")
    return agent


def log_of(agent) -> str:
    return Path(agent.c.log).read_text()


# -- the decision --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [*(f"1:{d}-1" for d in dcgm.PAIRED), "1:4.8.0-1", "", "none", "4.6.0 ; rm -rf /"])
def test_the_record_the_step_writes_is_one_the_agent_reads_and_due_for_nothing(version):
    record = applied_record(version)
    fields = parse_record(record)
    assert fields is not None and fields["exporter"] == (dcgm.exporter_for(version) or "none")
    assert dcgm_due("compute", 8, True, record) is None


def test_a_bundle_pairing_the_nodes_dcgm_anew_is_due_and_says_which_release():
    why = dcgm_due("compute", 8, True, UNPAIRED)
    assert why == "this bundle pairs DCGM 1:4.7.0-1 with dcgm-exporter 4.9.0, the node applied none"


def test_another_counters_file_a_missing_record_and_an_unreadable_one_are_due():
    assert "counters file is another" in (dcgm_due("compute", 8, True, OTHER_COUNTERS) or "")
    assert "no record" in (dcgm_due("compute", 8, True, None) or "")
    assert "unreadable" in (dcgm_due("compute", 8, True, "exporter=4.9.0\n") or "")


def test_the_head_a_cpu_node_and_observability_off_are_never_due():
    assert dcgm_due("head", 8, True, None) is None
    assert dcgm_due("compute", 0, True, UNPAIRED) is None
    assert dcgm_due("compute", 8, False, UNPAIRED) is None


# -- the agent -----------------------------------------------------------------------------------------------------


def test_a_gpu_node_applies_the_new_pairing_once_and_logs_why(tmp_path):
    node = booted(tmp_path)
    node.tick()
    node.tick()
    assert applies(node) == 1
    argv = next(a for a in node.run.calls if a[-1] == "apply-dcgm")
    assert argv[:2] == ["bash", str(Path(node.current_dir()) / "roles" / "compute.sh")]
    log = log_of(node)
    assert "apply-dcgm of bundle" in log and "with dcgm-exporter 4.9.0, the node applied none" in log
    assert "dcgm-exporter on bundle" in log and "exporter=4.9.0" in log
    fresh = type(node)(node.c, node.aws, clock=node.clock, run=node.run, s3=node.aws.s3)
    fresh.tick()  # a restarted agent reads the record: the same answer is not applied again
    assert applies(node) == 1


def test_a_node_on_the_bundles_answer_applies_nothing_and_one_without_a_record_applies_once(tmp_path):
    settled = booted(tmp_path / "settled", record=CURRENT)
    settled.tick()
    assert applies(settled) == 0
    old = booted(tmp_path / "old", record=None)
    old.tick()
    old.tick()
    assert applies(old) == 1 and "no record of what the metrics step applied" in log_of(old)


def test_another_counters_file_is_applied_once(tmp_path):
    node = booted(tmp_path, record=OTHER_COUNTERS)
    node.tick()
    node.tick()
    assert applies(node) == 1 and "counters file is another" in log_of(node)


def test_the_head_a_cpu_node_and_a_bundle_without_metrics_never_apply(tmp_path):
    head = booted(tmp_path / "head", name="head")
    cpu = booted(tmp_path / "cpu", gpus=0)
    off = booted(tmp_path / "off", patches=None)
    broken = booted(tmp_path / "broken")
    (Path(broken.c.etc) / "health.env").write_text("GPUS=eight\n")  # unreadable facts: no GPU node to act for
    for agent in (head, cpu, off, broken):
        agent.tick()
        assert applies(agent) == 0


def test_a_failed_apply_is_said_with_its_output_and_tried_again_after_a_while(tmp_path):
    now = [1000.0]
    node = booted(tmp_path, now=now)
    node.run.apply_dcgm_rc = 1
    node.tick()
    node.tick()
    assert applies(node) == 1
    log = log_of(node)
    assert "apply-dcgm of bundle" in log and "failed (exit 1)" in log and "Version '4.9.0*' was not found" in log
    now[0] += agent_dcgm.RETRY_S - 1
    node.tick()
    assert applies(node) == 1
    now[0] += 1
    node.run.apply_dcgm_rc = 0
    node.tick()
    node.tick()
    assert applies(node) == 2 and agent_dcgm.RETRY_S == agent_metrics.RETRY_S


def test_an_apply_that_records_nothing_new_is_not_run_every_tick(tmp_path):
    now = [1000.0]
    node = booted(tmp_path, now=now)
    node.run.dcgm_version = None  # exits 0 but leaves the old record
    node.tick()
    node.tick()
    assert applies(node) == 1 and "it ran, but still this bundle pairs" in log_of(node)


def test_a_hung_apply_is_logged_and_the_tick_goes_on(tmp_path):
    import subprocess

    node = booted(tmp_path)
    real = node.run

    def hung(argv, **kw):
        if argv[-1] == "apply-dcgm":
            real.calls.append(argv)
            raise subprocess.TimeoutExpired(argv, kw.get("timeout", 0))
        return real(argv, **kw)

    node.run = hung
    node.tick()  # raises nothing: the bundle and the status are still followed
    assert "failed (exit -1): TimeoutExpired" in log_of(node)
