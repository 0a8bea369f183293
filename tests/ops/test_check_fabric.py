"""`hpcc check fabric` (infra/ops/check_fabric.py, check_cli.py): the round's script run for real with fi_pingpong
over loopback (a stand-in `ssh` runs each node's command here), its output read back, and a slow node named by
the command's table and exit code."""

from __future__ import annotations

import os
import random
import re
import shlex
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hpcc_node.health.fabric import Floor
from infra.ops import check_fabric as cf
from infra.ops.cli import app

NODES = {f"gpu-00{i}": f"10.0.0.{10 + i}" for i in range(6)}


def test_node_names_give_their_groups():
    assert cf.groups({"gpu-000": "a", "gpu-1000": "b", "cpu-001": "c", "odd": "d"}) == {
        "gpu": ["gpu-000", "gpu-1000"],
        "cpu": ["cpu-001"],
        "compute": ["odd"],
    }


def test_a_rounds_output_is_read_per_pair_in_gb_per_s():
    pairs = [("gpu-000", "gpu-001"), ("gpu-002", "gpu-003"), ("gpu-004", "gpu-005")]
    out = "PAIR gpu-000 gpu-001 12345.6\nPAIR gpu-003 gpu-002 FAIL\nnoise\n"
    assert cf.parse_round(out, pairs) == {pairs[0]: pytest.approx(12.3456), pairs[1]: None, pairs[2]: None}


@pytest.mark.skipif(shutil.which("fi_pingpong") is None, reason="needs libfabric's fi_pingpong")
def test_the_rounds_script_measures_real_pairs_over_loopback(tmp_path):
    ssh = tmp_path / "ssh"  # `ssh [options] HOST COMMAND` -> COMMAND here, HOST recorded
    ssh.write_text(
        f'#!/bin/bash\nwhile [ "${{1:0:1}}" = - ]; do shift 2; done\necho "$1" >>{tmp_path}/hosts\n'
        'shift\nexec bash -c "$1"\n'
    )
    ssh.chmod(ssh.stat().st_mode | stat.S_IEXEC)
    pairs = [("gpu-000", "gpu-001"), ("gpu-002", "gpu-003")]
    loopback = {n: f"127.0.0.{i + 1}" for i, n in enumerate(sorted(NODES))}
    script = cf.pair_script(pairs, loopback, "tcp", size=1 << 20, iterations=20, ssh=f"{ssh} -o BatchMode=yes")
    out = subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True, timeout=120)
    got = cf.parse_round(out.stdout, pairs)
    assert all(v is not None and v > 0 for v in got.values()), out.stdout + out.stderr
    # by address: node names do not resolve on the head
    assert sorted((tmp_path / "hosts").read_text().split()) == sorted(loopback[n] for p in pairs for n in p)


def fake_head(rates):
    """A head that answers each PAIR of the script with the slower of the two nodes' rates (MB/s)."""

    def run(script: str) -> str:
        pairs = re.findall(r"printf 'PAIR %s %s %s\\n' (\S+) (\S+) ", script)
        return "".join(f"PAIR {a} {b} {min(rates[a], rates[b])}\n" for a, b in pairs)

    return run


def test_a_slow_node_is_found_and_bisected_against_a_good_one():
    rates = {n: 12000.0 for n in NODES}
    rates["gpu-003"] = 3000.0
    report, measured = cf.check(NODES, fake_head(rates), "efa", 3, Floor(), random.Random(7))
    assert [f.node for f in report.slow] == ["gpu-003"] and "known good" in report.slow[0].why
    pairs, found = cf.rows(report, measured)
    assert ("gpu-003", "gpu", "3.00") == found[0][:3] and len(pairs) == len(measured) >= 9


def test_the_command_prints_the_pairs_and_names_the_slow_node(monkeypatch):
    rates = {n: 12000.0 for n in NODES}
    rates["gpu-004"] = 100.0
    monkeypatch.setattr(cf, "cluster_nodes", lambda aws, cluster: (NODES, "203.0.113.7", []))
    seen = []
    monkeypatch.setattr(cf, "ssh_runner", lambda via: seen.append(via) or fake_head(rates))
    monkeypatch.setattr("infra.ops.aws.Aws", lambda region: None)
    out = CliRunner().invoke(app, ["check", "fabric", "--cluster", "llm", "--seed", "1"])
    assert out.exit_code == 1, out.output
    assert "gpu-004" in out.output.split("below the floor")[1] and "GB/s" in out.output
    assert seen == [["ssh", "-o", "BatchMode=yes", "ubuntu@203.0.113.7"]]
    rates["gpu-004"] = 12000.0
    assert CliRunner().invoke(app, ["check", "fabric", "--cluster", "llm"]).exit_code == 0


def test_bad_options_are_refused_naming_them():
    out = CliRunner().invoke(app, ["check", "fabric", "--cluster", "llm", "--floor-fraction", "2"])
    assert out.exit_code == 2 and "--floor-fraction" in out.output


def test_the_nodes_and_the_head_come_from_the_clusters_running_instances():
    """The command's own AWS read (moto): running compute instances by their hpcc:node tag, the head's address;
    a terminated instance and another cluster's are not measured."""
    from moto import mock_aws

    from infra.ops.aws import Aws
    from tests.ops.fleet import REGION, C, fleet

    with mock_aws():
        f = fleet({"gpu": 3})
        gone = f.ids["gpu-002"]
        f.ec2.terminate_instances(InstanceIds=[gone])
        fleet({"gpu": 1}, cluster="other")
        nodes, head, skipped = cf.cluster_nodes(Aws(REGION), C)
        found = {i["InstanceId"]: i for r in f.ec2.describe_instances()["Reservations"] for i in r["Instances"]}
    assert nodes == {n: found[f.ids[n]]["PrivateIpAddress"] for n in ("gpu-000", "gpu-001")}
    assert head == (found[f.head].get("PublicIpAddress") or found[f.head]["PrivateIpAddress"])
    assert skipped == []


HOSTILE = "gpu-009;touch${IFS}/tmp/hpcc-pwned"


def test_a_hostile_node_tag_is_skipped_reported_and_never_reaches_a_script(monkeypatch):
    """Issue 33, finding 4: whoever may tag an instance of the cluster writes its hpcc:node tag; the command runs
    the names it reads there in bash on the head. Such an instance is left out and named, nothing of its tag in a
    script."""
    from moto import mock_aws

    from tests.ops.fleet import REGION, C, fleet

    scripts = []
    rates = {n: 12000.0 for n in ("gpu-000", "gpu-002")}
    monkeypatch.setattr(cf, "ssh_runner", lambda via: lambda script: scripts.append(script) or fake_head(rates)(script))
    with mock_aws():
        f = fleet({"gpu": 3})
        f.ec2.create_tags(Resources=[f.ids["gpu-001"]], Tags=[{"Key": "hpcc:node", "Value": HOSTILE}])
        out = CliRunner().invoke(app, ["check", "fabric", "--cluster", C, "--region", REGION, "--no-allreduce"])
    assert out.exit_code == 0, out.output
    assert f"skipped {f.ids['gpu-001']}: its hpcc:node tag" in out.output and "not a compute node's name" in out.output
    assert scripts and not [s for s in scripts if "gpu-009" in s or "pwned" in s or "gpu-001" in s]
    assert all("gpu-000" in s and "gpu-002" in s for s in scripts)


@pytest.mark.parametrize(
    "name, ip",
    [
        (HOSTILE, "10.0.0.9"),
        ("head", "10.0.0.9"),
        ("gpu-0001", "10.0.0.9"),
        ("gpu-009", "10.0.0.9;id"),
        ("$(id)", "10.0.0.9"),
    ],
)
def test_the_scripts_refuse_a_name_or_address_that_is_not_a_compute_nodes(name, ip):
    ips = {"gpu-000": "10.0.0.1", name: ip}
    with pytest.raises(ValueError, match="refusing to script"):
        cf.pair_script([("gpu-000", name)], ips, "efa")
    with pytest.raises(ValueError, match="refusing to script"):
        cf.allreduce_script(["gpu-000", name], ips, "torchrun")


def test_every_value_a_script_interpolates_is_quoted():
    ips = {"gpu-000": "10.0.0.1", "gpu-001": "10.0.0.2"}
    script = cf.allreduce_script(["gpu-000", "gpu-001"], ips, "'/opt/my env/bin/python' -m torch.distributed.run")
    line = script.splitlines()[1]
    ssh = shlex.split(line[line.index("ssh ") : line.index(" </dev/null")])
    assert ssh[:4] == ["ssh", "-o", "BatchMode=yes", "10.0.0.1"]
    remote = shlex.split(ssh[4])  # what the node's shell runs
    at = remote.index(str(cf.ALLREDUCE_TIMEOUT_S)) + 1
    assert remote[at : at + 5] == ["/opt/my env/bin/python", "-m", "torch.distributed.run", "--nnodes", "2"]
    assert "printf 'NODE %s %s %s\\n' gpu-000 \"$rc\"" in line
    assert "printf 'PAIR %s %s %s\\n' gpu-000 gpu-001" in cf.pair_script([("gpu-000", "gpu-001")], ips, "tcp")


# -- one ring all-reduce per group ---------------------------------------------------------------------------------

ALLREDUCE_PY = str(Path(__file__).resolve().parents[2] / "hpcc_node" / "jobs" / "allreduce.py")


def free_port() -> int:
    """A port nobody listens on: tests on other pytest workers run their own all-reduce at the same time, and a
    rank that joined another test's rendezvous on the shared default port waited out the whole run (CI, 2026-11-29)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stand_in_ssh(tmp_path, fail_on: str = ""):
    """`ssh [options] HOST COMMAND` -> COMMAND run here; where HOST is `fail_on` or COMMAND contains it, the node's
    torchrun is a command that dies as a broken node's would."""
    ssh = tmp_path / "ssh"
    broken = (
        (
            f'if [ "$1" = "{fail_on}" ] || [[ "$2" == *"{fail_on}"* ]]; then '
            'echo "RuntimeError: Connection reset by peer" >&2; exit 1; fi\n'
        )
        if fail_on
        else ""
    )
    ssh.write_text('#!/bin/bash\nwhile [ "${1:0:1}" = - ]; do shift 2; done\n' + broken + 'shift\nexec bash -c "$1"\n')
    ssh.chmod(ssh.stat().st_mode | stat.S_IEXEC)
    return f"{ssh} -o BatchMode=yes"


def test_a_groups_all_reduce_runs_for_real_and_reports_its_bus_bandwidth(tmp_path):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:
        pytest.skip("needs torch's torchrun in the test environment (requirements-dev.txt)")
    names = ["gpu-000", "gpu-001"]
    ips = {"gpu-000": "127.0.0.1", "gpu-001": "127.0.0.1"}
    script = cf.allreduce_script(
        names,
        ips,
        torchrun,
        procs=1,
        nbytes=1 << 20,
        ssh=stand_in_ssh(tmp_path),
        script=ALLREDUCE_PY,
        port=free_port(),
    )
    out = subprocess.run(
        ["bash", "-s"],
        input=script,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "GLOO_SOCKET_IFNAME": "lo"},
    )
    got = cf.parse_allreduce(out.stdout, "gpu", names)
    assert got.status == "ok" and got.ranks == 2 and got.busbw > 0, out.stdout + out.stderr
    broken = cf.allreduce_script(
        names, ips, torchrun, procs=1, ssh=stand_in_ssh(tmp_path, fail_on="127.0.0.1"), port=free_port()
    )
    out = subprocess.run(["bash", "-s"], input=broken, capture_output=True, text=True, timeout=300)
    got = cf.parse_allreduce(out.stdout, "gpu", names)
    assert got.status == "failed" and got.failed == tuple(names) and "Connection reset" in got.why, out.stdout


def test_the_all_reduce_result_names_the_nodes_that_failed_and_why():
    names = ["a-000", "a-001", "a-002"]
    ok = "NODE a-000 0 \nNODE a-002 0 done\nALLREDUCE ranks=3 bytes=16777216 algbw=1.500 busbw=2.000\nNODE a-001 0 \n"
    assert cf.parse_allreduce(ok, "a", names) == cf.Collective("a", "ok", 3, 2.0)
    bad = "NODE a-000 124 \nNODE a-001 1 ALLREDUCE-WRONG rank=1 got=5.0 want=6.0\n"
    got = cf.parse_allreduce(bad, "a", names)
    assert got.status == "failed" and got.failed == ("a-000", "a-001", "a-002") and got.why == "a-000: exit 124: "
    silent = "NODE a-000 0 \nNODE a-001 0 \nNODE a-002 0 \n"
    assert cf.parse_allreduce(silent, "a", names).status == "failed"
    assert cf.run_allreduce("a", names[:1], {}, None, "torchrun").status == "not run"
    assert "--torchrun" in cf.run_allreduce("a", names, {}, None, None).why


def test_the_command_fails_when_a_groups_all_reduce_fails(monkeypatch):
    rates = {n: 12000.0 for n in NODES}

    def head(script: str) -> str:
        if script.startswith("command -v torchrun"):
            return "/opt/pytorch/bin/torchrun\n"
        if "--master-port" in script:
            assert "/opt/pytorch/bin/torchrun --nnodes 6 --node-rank 5" in script
            return "".join(f"NODE {n} {1 if n == 'gpu-002' else 0} NCCL WARN NET/OFI\n" for n in NODES)
        return fake_head(rates)(script)

    monkeypatch.setattr(cf, "cluster_nodes", lambda aws, cluster: (NODES, "203.0.113.7", []))
    monkeypatch.setattr(cf, "ssh_runner", lambda via: head)
    monkeypatch.setattr("infra.ops.aws.Aws", lambda region: None)
    out = CliRunner().invoke(app, ["check", "fabric", "--cluster", "llm"])
    assert out.exit_code == 1 and "gpu-002: exit 1: NCCL WARN NET/OFI" in " ".join(out.output.split()), out.output
    assert CliRunner().invoke(app, ["check", "fabric", "--cluster", "llm", "--no-allreduce"]).exit_code == 0


def test_a_group_whose_first_node_dies_names_every_node_instead_of_waiting_out_the_run(tmp_path):
    """The first node hosts the rendezvous: when its part dies, the others give up after the join timeout,
    each named with why, rather than waiting out the whole run's timeout."""
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:
        pytest.skip("needs torch's torchrun in the test environment (requirements-dev.txt)")
    names = ["gpu-000", "gpu-001"]
    ips = {"gpu-000": "127.0.0.1", "gpu-001": "127.0.0.1"}
    script = cf.allreduce_script(
        names,
        ips,
        torchrun,
        procs=1,
        nbytes=1 << 10,
        script=ALLREDUCE_PY,
        join_timeout=5,
        ssh=stand_in_ssh(tmp_path, fail_on="--node-rank 0"),
        port=free_port(),
    )
    out = subprocess.run(
        ["bash", "-s"],
        input=script,
        capture_output=True,
        text=True,
        timeout=150,
        env={**os.environ, "GLOO_SOCKET_IFNAME": "lo"},
    )
    got = cf.parse_allreduce(out.stdout, "gpu", names)
    assert got.status == "failed" and got.failed == tuple(names) and "Connection reset" in got.why, out.stdout
    second = next(line for line in out.stdout.splitlines() if line.startswith("NODE gpu-001 "))
    # the rendezvous host gone: its store timed out, or its connection dropped (whichever came first), never the
    # banner of torchrun's error summary
    why = second.split(" ", 3)[3]
    assert re.search(r"(?i)timed out|connection (reset|refused|closed)|closed by peer", why), out.stdout
