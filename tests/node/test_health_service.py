"""The checks wired to a node (hpcc_node/health/service.py, __main__.py): facts from health.env, the monitor's
verdict file with the box's stand-ins, a fatal Xid that stays until the next boot, the status fields the controller
reads, and the Slurm entry points (HealthCheckProgram, Prolog, Epilog) run as Slurm runs them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcc_node.health import service, xid
from hpcc_node.health.runner import Runner
from hpcc_node.health.verdict import PERIODIC_CHECKS, XID, node_verdict, ok, parse_verdict, write_verdict

ROOT = Path(__file__).resolve().parents[2]
STANDINS = ROOT / "tests" / "box" / "standins"


def test_facts_are_read_checked_and_never_sourced():
    facts, standin = service.parse_facts(
        "GPUS=8\nEFA_DEVICES=32\nSHARED_MOUNT=/fsx\nDCGM_LEVEL=2\nKERNEL_LOG=/var/log/kern.log\nDISK_MIN_FREE_GIB=0\n",
        "gpu-001",
    )
    # an older bootstrap's KERNEL_LOG (a file any user reaches through syslog) is accepted and never read
    assert (facts.gpus, facts.efa_devices, facts.shared_mount, facts.dcgm_level, standin) == (8, 32, "/fsx", 2, "")
    assert service.parse_facts("GPUS=8\nXID_STANDIN=/var/log/kern.log\n", "gpu-001")[1] == "/var/log/kern.log"
    for bad, words in [
        ("GPUS=$(reboot)", "GPUS='$(reboot)' is not a int"),
        ("PATH=/x", "is not one of"),
        ("DCGM_LEVEL=7", "DCGM_LEVEL=7 is not 0-4"),
        ("KERNEL_LOG=kern.log", "not an absolute path"),
        ("XID_STANDIN=kern.log", "not an absolute path"),
    ]:
        with pytest.raises(service.FactsError, match=words.replace("$", r"\$").replace("(", r"\(").replace(")", r"\)")):
            service.parse_facts(bad, "gpu-001")


class Node:
    def __init__(self, tmp: Path, gpus: int = 8):
        self.tmp = tmp
        self.standin = tmp / "standin"
        self.standin.mkdir()
        self.boot_id = tmp / "boot_id"
        self.boot_id.write_text("boot-1\n")
        self.env = {
            **os.environ,
            "PATH": f"{STANDINS}:{os.environ['PATH']}",
            "HPCC_STANDIN_STATE": str(self.standin),
            "HPCC_HEALTH_ENV": str(tmp / "health.env"),
            "HPCC_HEALTH_VERDICT": str(tmp / "verdict"),
            "HPCC_HEALTH_STATE": str(tmp / "state"),
            "HPCC_NODE": "gpu-001",
            "PYTHONPATH": str(ROOT),
        }
        (tmp / "health.env").write_text(
            f"GPUS={gpus}\nDCGM_LEVEL=2\nDISK_MIN_FREE_GIB=0\nXID_STANDIN={self.standin / 'kern.log'}\n"
        )
        (self.standin / "kern.log").write_text("Nov 24 12:00:00 gpu-001 kernel: an old line\n")

    def monitor(self) -> service.Monitor:
        facts, log = service.load_facts("gpu-001", self.env["HPCC_HEALTH_ENV"])
        return service.Monitor(
            facts,
            log,
            self.env["HPCC_HEALTH_VERDICT"],
            self.env["HPCC_HEALTH_STATE"],
            Runner(env=self.env),
            boot_id_path=str(self.boot_id),
        )

    def inject(self, xid: str) -> None:
        subprocess.run([str(STANDINS / "inject-xid"), xid], env=self.env, check=True)

    def cli(self, command: str, **env) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "hpcc_node.health", command],
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )

    def verdict(self):
        return parse_verdict(Path(self.env["HPCC_HEALTH_VERDICT"]).read_text())


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path)


def test_the_boot_checks_run_once_a_boot(node):
    m = node.monitor()
    assert not m.boot_checked()
    v = m.boot()
    assert v.healthy and {r.check for r in v.results} >= {"gpu_count", "dcgm_diag", XID}
    assert m.boot_checked() and node.verdict().status == v.status
    node.boot_id.write_text("boot-2\n")  # rebooted for a remedy: everything again
    assert not m.boot_checked()


def test_a_fatal_xid_stays_in_every_verdict_until_the_next_boot(node):
    m = node.monitor()
    assert m.run(PERIODIC_CHECKS).healthy
    node.inject("79")
    first = m.run(PERIODIC_CHECKS)
    assert (first.status, first.action, first.remedy) == ("fail", "down", "reboot")
    assert first.reason.startswith("hpcc: xid: Xid 79 on PCI:0000:53:00")
    assert not m.run(PERIODIC_CHECKS).healthy  # no new log line, the GPU is still gone
    node.boot_id.write_text("boot-2\n")
    assert m.run(PERIODIC_CHECKS).healthy


def test_an_application_xid_warns_once_and_takes_nothing_out(node):
    m = node.monitor()
    node.inject("13")
    v = m.run(PERIODIC_CHECKS)
    assert v.status == "warn" and v.healthy and "Xid 13" in v.reason
    assert m.run(PERIODIC_CHECKS).status == "ok"


def test_a_xid_from_before_the_first_monitor_is_not_read(node):
    node.inject("79")
    assert node.monitor().run([XID]).healthy


def test_the_status_fields_carry_the_failed_verdict_to_the_controller(node):
    m = node.monitor()
    node.inject("79")
    m.run(PERIODIC_CHECKS)
    fields = service.status_fields(node.env["HPCC_HEALTH_VERDICT"])
    assert fields["ok"] is False and fields["class"] == fields["failure"] == "health"
    assert (fields["check"], fields["action"], fields["remedy"]) == ("xid", "down", "reboot")
    assert "Xid 79" in fields["evidence"]
    write_verdict(node.env["HPCC_HEALTH_VERDICT"], node_verdict([ok("gpu_count", "8 GPU(s)")], time.time()))
    assert service.status_fields(node.env["HPCC_HEALTH_VERDICT"]) == {"health": "ok"}
    assert service.status_fields(str(node.tmp / "none")) == {}


def test_a_spares_deep_check_runs_the_boot_checks_and_a_failure_stays_until_the_next_boot(node):
    """`deep` (the controller's job on a held spare): DCGM again; its failure stays in the agent's periodic verdicts
    (they never run DCGM); a Xid already kept stays in the deep verdict; the time is kept for the controller."""
    m = node.monitor()
    m.boot()
    booted = service.status_fields(node.env["HPCC_HEALTH_VERDICT"], state_dir=node.env["HPCC_HEALTH_STATE"])
    assert booted["deepChecked"] >= time.time() - 60  # the boot checks are a deep check
    passed = node.cli("deep")
    assert passed.returncode == 0 and "dcgm_diag: ok" in passed.stdout and passed.stdout.endswith("passed\n")
    (node.standin / "dcgm").write_text("fail:memory:3\n")
    failed = node.cli("deep")
    assert failed.returncode == 1 and failed.stdout.splitlines()[-1].startswith("hpcc: dcgm_diag: dcgmi diag failed")
    assert not m.deep().healthy  # (the command's boot id is this machine's; the monitor's is the test's)
    (node.standin / "dcgm").write_text("pass\n")  # the GPU is still bad: nothing runs DCGM until the next check
    later = m.run(PERIODIC_CHECKS)
    assert (later.status, later.action, later.remedy) == ("fail", "drain", "replace") and "dcgm_diag" in later.reason
    node.boot_id.write_text("boot-2\n")
    assert m.run(PERIODIC_CHECKS).healthy
    node.inject("79")
    m.run(PERIODIC_CHECKS)
    assert "Xid 79" in m.deep().reason  # DCGM passes here, the kept Xid does not go


def test_slurms_health_check_reads_the_verdict_only(node):
    missing = node.cli("healthcheck")
    assert missing.returncode == 1 and "no verdict" in missing.stdout
    node.monitor().run(PERIODIC_CHECKS)
    assert node.cli("healthcheck").returncode == 0
    stale = node.verdict()
    write_verdict(
        node.env["HPCC_HEALTH_VERDICT"],
        stale.__class__(stale.status, stale.action, stale.remedy, stale.reason, stale.written - 600, stale.results),
    )
    out = node.cli("healthcheck")
    assert out.returncode == 1 and "the agent stopped" in out.stdout


def test_the_boot_step_fails_a_node_short_of_gpus_naming_the_check(node):
    (node.standin / "gpus").write_text("7\n")
    out = node.cli("boot")
    assert out.returncode == 1 and "hpcc: gpu_count: 7 GPU(s) visible, the instance type has 8" in out.stdout
    (node.standin / "gpus").write_text("8\n")
    assert node.cli("boot").returncode == 0


def test_the_epilog_puts_a_xid_of_the_job_into_the_verdict_and_the_next_prolog_refuses_the_node(node):
    node.monitor().run(PERIODIC_CHECKS)
    assert node.cli("prolog", SLURM_JOB_ID="41").returncode == 0
    node.inject("48")
    out = node.cli("epilog", SLURM_JOB_ID="41")
    assert out.returncode == 0 and "job 41: Xid 48" in out.stdout
    assert not node.verdict().healthy and "Xid 48" in node.verdict().reason
    refused = node.cli("prolog", SLURM_JOB_ID="42")
    assert refused.returncode == 1 and "hpcc: xid: Xid 48" in refused.stderr


def test_the_prolog_refuses_a_node_whose_fast_checks_fail(node):
    (node.standin / "recovery").write_text("2:Reboot\n")
    out = node.cli("prolog", SLURM_JOB_ID="7")
    assert out.returncode == 1 and "hpcc: gpu_recovery: GPU 2" in out.stderr


def test_a_node_from_before_the_health_step_refuses_no_job(node):
    os.unlink(node.env["HPCC_HEALTH_ENV"])
    assert node.cli("prolog", SLURM_JOB_ID="7").returncode == 0
    out = node.cli("boot")
    assert out.returncode == 1 and "health.env is missing" in out.stderr


def test_the_agents_status_carries_its_health_verdict(tmp_path):
    from hpcc_node.health.verdict import fail
    from tests.node.agent_support import FakeAws, make_agent

    a, _ = make_agent(tmp_path, FakeAws())
    assert "health" not in a.extra()  # no verdict yet (a node from before the health checks)
    write_verdict(
        os.path.join(a.c.run, service.VERDICT_NAME),
        node_verdict([fail("xid", "Xid 79 on PCI:0000:53:00: ...", "down", "reboot")], time.time()),
    )
    extra = a.extra()
    assert (extra["ok"], extra["class"], extra["check"], extra["action"], extra["remedy"]) == (
        False,
        "health",
        "xid",
        "down",
        "reboot",
    )


def test_the_health_thread_signals_a_changed_verdict_once_and_survives_a_failing_check():
    """The agent writes its status when on_change fires (not at its next tick): once per change of status or
    action, never for the same verdict again; a check that raises is logged and changes nothing."""
    from hpcc_node.health.service import check_once
    from hpcc_node.health.verdict import NodeVerdict

    verdicts = [
        NodeVerdict("ok", "none", "none", "", 1),
        NodeVerdict("ok", "none", "none", "", 2),
        NodeVerdict("fail", "down", "replace", "hpcc: xid: Xid 79", 3),
        RuntimeError("parser bug"),
        NodeVerdict("fail", "down", "replace", "hpcc: xid: Xid 79", 4),
    ]

    class Monitor:
        def boot_checked(self):
            return True

        def run(self, names):
            v = verdicts.pop(0)
            if isinstance(v, Exception):
                raise v
            return v

    changes, logged, last = [], [], None
    for _ in range(5):
        last = check_once(Monitor(), last, logged.append, lambda: changes.append(len(verdicts)))
    assert changes == [4, 2]  # the first verdict, then the failure; not its repeats nor the error
    assert last == ("fail", "down") and any("parser bug" in line for line in logged)


XID79 = "NVRM: Xid (PCI:0000:53:00): 79, pid=0, GPU has fallen off the bus."


def test_a_xid_line_any_user_can_log_is_not_read(tmp_path):
    """Issue 33, finding 3: `logger -p kern.crit 'NVRM: Xid ...'`, as any user, makes rsyslog write the line to
    /var/log/kern.log, the file a node's health.env named before. That file is no longer read: the check reads the
    kernel's own records, so the forged line takes nothing down."""
    kern = tmp_path / "kern.log"
    kern.write_text("")
    facts, standin = service.parse_facts(f"GPUS=0\nDCGM_LEVEL=0\nDISK_MIN_FREE_GIB=0\nKERNEL_LOG={kern}\n", "gpu-001")
    m = service.Monitor(
        facts, standin, str(tmp_path / "verdict"), str(tmp_path / "state"), boot_id_path=str(tmp_path / "boot_id")
    )
    assert isinstance(m.source, xid.KmsgSource) and m.source.path == "/dev/kmsg"
    with open(kern, "a") as f:
        f.write(f"Nov 29 04:00:00 gpu-001 kernel: [ 99.000000] {XID79}\n")
    (result,) = [r for r in m.run([XID]).results if r.check == XID]
    assert result.status in ("ok", "unknown") and result.action == "none", result  # unknown: no /dev/kmsg here


def test_no_kernel_log_is_unknown_and_hpcc_status_says_so(tmp_path):
    """Issue 33, finding 8: a missing or unreadable source is `unknown`, never ok, and `hpcc status` shows it."""
    from infra.ops.status.cluster import health_text

    facts, _ = service.parse_facts("GPUS=0\nDCGM_LEVEL=0\nDISK_MIN_FREE_GIB=0\n", "gpu-001")
    gone = xid.KmsgSource(lambda: "boot-1", path=str(tmp_path / "kmsg"))  # an image without /dev/kmsg
    m = service.Monitor(facts, "", str(tmp_path / "verdict"), str(tmp_path / "state"), xid_source=gone)
    v = m.run([XID])
    assert v.status == "unknown" and v.healthy and "no kernel log to read Xids from" in v.reason
    fields = service.status_fields(str(tmp_path / "verdict"), state_dir=str(tmp_path / "state"))
    assert fields["health"] == "unknown" and fields["healthCheck"] == XID and "ok" not in fields
    assert health_text(fields) == "unknown xid"
    standin = service.Monitor(facts, str(tmp_path / "absent.log"), str(tmp_path / "v2"), str(tmp_path / "s2"))
    assert standin.run([XID]).status == "unknown"


def test_a_stand_in_named_by_a_health_env_others_can_write_is_refused(tmp_path):
    env = tmp_path / "health.env"
    env.write_text(f"GPUS=0\nXID_STANDIN={tmp_path}/kern.log\n")
    env.chmod(0o666)
    with pytest.raises(service.FactsError, match="others than root may write it"):
        service.load_facts("gpu-001", str(env))
    env.chmod(0o644)
    assert service.load_facts("gpu-001", str(env))[1] == f"{tmp_path}/kern.log"
