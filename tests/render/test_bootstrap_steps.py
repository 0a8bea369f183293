"""The bootstrap's shell functions run for real against stand-ins (a scripted `aws`, `ssh`, `fi_info`):
logging, status reports, paced retries, the cluster key, joining, SSH trust, EFA, the launch helpers."""

import json
import re
import subprocess
import time
from pathlib import Path

from tests.render.bootstrap_fixtures import tool
from tests.render.bootstrap_shell import context, partial, run

COMMON = ["log", "retry", "settings", "status", "files"]
STUB_FAIL = 'fail() { echo "FAIL: $*"; exit 1; }\n'


def calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls"
    return path.read_text().splitlines() if path.exists() else []


def bodies(tmp_path: Path) -> list[str]:
    """The bodies of the PutObject calls (the statuses), in order."""
    path = tmp_path / "bodies"
    return [b for b in path.read_text().splitlines() if b] if path.exists() else []


STATUS_KEY = "status/arn:aws:ec2:us-east-1:123456789012:instance/i-0abc.json"


def ctx_for(tmp_path, **changes):
    return context(log_path=str(tmp_path / "bootstrap.log"), **changes)


PREAMBLE = (
    'HPCC_START=$(date +%s)\nHPCC_DEADLINE=$(( $(date +%s) + 600 '
    '))\nHPCC_PACE_FILE={pace}\nHPCC_NODE=compute-001\nHPCC_IP=10.0.0.6\n'
    'HPCC_INSTANCE_ID=i-0abc\nHPCC_APPLIED_VERSION=7\nHPCC_ACCOUNT=123456789012\n'
    'HPCC_STATUS_KEY=status/arn:aws:ec2:us-east-1:123456789012:instance/i-0abc.json\n'
)


def preamble(tmp_path):
    return PREAMBLE.format(pace=tmp_path / "pace")


def record_pacer_turns(stamps: Path) -> str:
    """Shell that wraps `pace` to append each time the pacer let a call through to STAMPS, read at once with
    builtins: a stamp an aws stand-in takes after a fork is late by a busy machine's scheduling, not the pacer's."""
    return (
        f'eval "paced_$(declare -f pace)"\n'
        f'pace() {{ paced_pace; local t; read -r t <"$HPCC_PACE_FILE"; echo "$t" >>{stamps}; }}\n'
    )


# -- logging ---------------------------------------------------------------------------------------


def test_every_log_line_carries_the_step_that_printed_it(tmp_path):
    ctx = ctx_for(tmp_path)
    script = (
        preamble(tmp_path)
        + """
for step in os lustre mount efa; do
  use_step "$step"
  for i in $(seq 1 40); do log "line $i of $step"; echo "stderr $i of $step" >&2; done
done
flush_log
"""
    )
    out = run(COMMON, script, ctx)
    assert out.returncode == 0, out.stderr
    lines = (tmp_path / "bootstrap.log").read_text().splitlines()
    assert len(lines) == 320
    for line in lines:
        m = re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \[(\w+)\] (?:line|stderr) \d+ of (\w+)", line)
        assert m and m.group(1) == m.group(2), line
    steps = [re.search(r"\[(\w+)\]", line).group(1) for line in lines]
    assert steps == sorted(steps, key=["os", "lustre", "mount", "efa"].index)  # in order


# -- status ----------------------------------------------------------------------------------------


def test_status_json_follows_the_contract_and_fits_in_4_kb(tmp_path):
    ctx = ctx_for(tmp_path)
    log = tmp_path / "bootstrap.log"
    log.write_text(
        "".join(f'2026-01-01T00:00:00Z [mount] line {i} \\ tab\t{"x" * 400}{i} "{chr(34) * 150}\n' for i in range(30))
    )  # quotes double in JSON: 15 lines would not fit
    out = run(COMMON, preamble(tmp_path) + 'HPCC_STEP=mount\nstatus_json failed false "mount failed: \\"x\\""', ctx)
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.encode()) <= 4000
    status = json.loads(out.stdout)
    assert {k: status[k] for k in ("node", "ip", "instanceId", "hostsVersion", "phase", "step", "ok")} == {
        "node": "compute-001",
        "ip": "10.0.0.6",
        "instanceId": "i-0abc",
        "hostsVersion": 7,
        "phase": "failed",
        "step": "mount",
        "ok": False,
    }
    assert status["message"] == 'mount failed: "x"' and re.fullmatch(r"\d{4}-.*Z", status["updated"])
    real = log.read_text().splitlines()
    tail = status["logTail"]
    assert 5 <= len(tail) < 15 and all(len(t) <= 200 for t in tail)
    assert all(real[len(real) - len(tail) + k].endswith(t) for k, t in enumerate(tail))  # contiguous, cut from the left


def test_a_failure_reports_phase_failed_with_the_step_and_the_log_tail(fake):
    tmp_path, _, env = fake
    (tmp_path / "answers").write_text("0|\n")
    ctx = ctx_for(tmp_path)
    out = run(
        COMMON,
        preamble(tmp_path) + 'use_step efa\nlog "checking"\nfalse_step() { fail "no EFA device"; }\n'
        'false_step\necho "not reached"',
        ctx,
        env=env,
    )
    assert out.returncode == 1 and "not reached" not in out.stdout
    put = calls(tmp_path)[-1]
    assert put.startswith(f"s3api put-object --bucket hpcc-llm-state-123456789012 --key {STATUS_KEY} ")
    status = json.loads(bodies(tmp_path)[-1])
    assert (status["phase"], status["step"], status["ok"], status["message"]) == (
        "failed",
        "efa",
        False,
        "no EFA device",
    )
    assert status["logTail"][-1].endswith("[efa] FAILED at step efa: no EFA device")


# -- AWS calls: retries and pacing -----------------------------------------------------------------


def test_aws_calls_retry_with_backoff_and_stop_at_not_found(fake):
    tmp_path, _, env = fake
    ctx = ctx_for(tmp_path, api_backoff_seconds=1, api_attempts=3)
    (tmp_path / "answers").write_text("255|ThrottlingException: Rate exceeded\n255|ThrottlingException\n0|value\n")
    out = run(COMMON, preamble(tmp_path) + "aws_retry ssm get-parameter --name x", ctx, env=env)
    assert out.stdout.strip() == "value" and len(calls(tmp_path)) == 3
    (tmp_path / "calls").unlink()
    (tmp_path / "answers").write_text("255|An error occurred (ParameterNotFound)\n")
    out = run(COMMON, preamble(tmp_path) + "aws_retry ssm get-parameter --name x || echo rc=$?", ctx, env=env)
    assert out.stdout.strip() == "rc=3" and len(calls(tmp_path)) == 1  # not found: the caller polls, no retries
    (tmp_path / "calls").unlink()
    (tmp_path / "answers").write_text("255|AccessDenied\n")
    out = run(COMMON, preamble(tmp_path) + "aws_retry ssm get-parameter --name x || echo rc=$?", ctx, env=env)
    assert out.stdout.strip() == "rc=1" and len(calls(tmp_path)) == 3  # gives up after api_attempts


def test_one_nodes_aws_calls_are_at_least_one_interval_apart(fake):
    tmp_path, bin_dir, env = fake
    tool(bin_dir, "aws", "true\n")
    ctx = ctx_for(tmp_path, api_interval_ms=400)
    out = run(
        COMMON,
        preamble(tmp_path)
        + record_pacer_turns(tmp_path / "stamps")
        + "for i in 1 2 3 4 5; do aws_retry sts get-caller-identity; done\n"
        "x=$(aws_retry sts get-caller-identity)  # a call in a subshell counts too\n"
        "aws_retry sts get-caller-identity",
        ctx,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    stamps = [int(s) for s in (tmp_path / "stamps").read_text().split()]
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    assert len(stamps) == 7 and min(gaps) >= 400 and max(gaps) <= 400 * 1.25 + 1500, gaps  # slack: a busy machine


def test_polling_waits_for_a_value_that_appears_later(fake):
    tmp_path, _, env = fake
    (tmp_path / "answers").write_text("255|ParameterNotFound\n255|ParameterNotFound\n0|10.0.0.4\n")
    ctx = ctx_for(tmp_path, poll_seconds=1)
    out = run(COMMON, preamble(tmp_path) + 'aws_wait 30 "hosts" ssm get-parameter --name h', ctx, env=env)
    assert out.stdout.strip() == "10.0.0.4" and len(calls(tmp_path)) == 3
    (tmp_path / "answers").write_text("255|ParameterNotFound\n")
    start = time.time()
    out = run(
        COMMON, preamble(tmp_path) + 'aws_wait 2 "hosts" ssm get-parameter --name h || echo gave-up', ctx, env=env
    )
    assert out.stdout.strip() == "gave-up" and time.time() - start < 10  # bounded by its own limit


# -- the cluster key -------------------------------------------------------------------------------


def test_head_generates_the_key_only_when_the_secret_has_no_value(fake):
    tmp_path, _, env = fake
    ctx = ctx_for(tmp_path, api_backoff_seconds=1, api_attempts=2, role="head")
    (tmp_path / "answers").write_text(
        "255|An error occurred (ResourceNotFoundException): can't find the specified secret value\n0|\n0|KEY\n"
    )
    out = run(
        COMMON + ["ssh"],
        preamble(tmp_path) + 'head_key hpcc/llm/ssh-key "cluster key"; echo "got ${#HPCC_KEY}"',
        ctx,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert [c.split()[1] for c in calls(tmp_path)] == ["get-secret-value", "put-secret-value", "get-secret-value"]
    assert "OPENSSH PRIVATE KEY" in (tmp_path / "stored-key").read_text() and "got 3" in out.stdout
    assert "PRIVATE KEY" not in out.stdout + out.stderr
    (tmp_path / "calls").unlink()
    (tmp_path / "answers").write_text("255|An error occurred (AccessDeniedException)\n")
    out = run(COMMON + ["ssh"], preamble(tmp_path) + "head_key hpcc/llm/ssh-key key || echo rc=$?", ctx, env=env)
    assert out.stdout.strip() == "rc=1"
    assert all("put-secret-value" not in c for c in calls(tmp_path))  # never replaces a key it could not read


def test_compute_waits_for_the_key_within_the_join_timeout(fake):
    tmp_path, _, env = fake
    ctx = ctx_for(tmp_path, poll_seconds=1, join_timeout_minutes=0)
    (tmp_path / "answers").write_text("255|ResourceNotFoundException\n")
    out = run(COMMON + ["ssh"], preamble(tmp_path) + STUB_FAIL + "compute_key hpcc/llm/ssh-key key", ctx, env=env)
    assert out.returncode == 1 and "hpcc/llm/ssh-key stayed empty" in out.stdout
    (tmp_path / "calls").unlink()
    (tmp_path / "answers").write_text("255|ResourceNotFoundException\n0|KEY\n")
    ctx = ctx_for(tmp_path, poll_seconds=1, join_timeout_minutes=1)
    out = run(
        COMMON + ["ssh"],
        preamble(tmp_path) + STUB_FAIL + 'compute_key hpcc/llm/ssh-key key; echo "$HPCC_KEY"',
        ctx,
        env=env,
    )
    assert out.stdout.strip().endswith("KEY") and len(calls(tmp_path)) == 2


# -- SSH trust -------------------------------------------------------------------------------------


def test_client_config_trusts_exactly_the_clusters_hosts(tmp_path):
    ips = [f"10.0.{i // 250}.{i % 250 + 4}" for i in range(70)]
    out = run(["ssh"], "client_config " + " ".join(ips))
    conf = tmp_path / "ssh_config"
    conf.write_text(out.stdout)

    def option(host, name):
        effective = subprocess.run(["ssh", "-G", "-F", str(conf), host], capture_output=True, text=True).stdout
        return next(line.split(None, 1)[1] for line in effective.splitlines() if line.startswith(name + " "))

    for ip in (ips[0], ips[33], ips[-1]):
        assert option(ip, "stricthostkeychecking") == "true"  # verified against the cluster's CA line only
        assert option(ip, "userknownhostsfile") == option(ip, "globalknownhostsfile") == "/etc/ssh/ssh_known_hosts.hpcc"
        assert all(a.endswith("-cert-v01@openssh.com") for a in option(ip, "hostkeyalgorithms").split(","))
        assert int(option(ip, "connectionattempts")) >= 3  # an sshd reloading (re-exec) refuses for an instant
    assert option("10.0.9.9", "userknownhostsfile") != "/etc/ssh/ssh_known_hosts.hpcc"  # not a cluster host
    # the identities offered: the slots the Python install keeps stable through a rotation, then the current copy
    from hpcc_node.cluster_keys import SLOTS

    effective = subprocess.run(["ssh", "-G", "-F", str(conf), ips[0]], capture_output=True, text=True).stdout
    offered = [
        line.split(None, 1)[1].rsplit("/", 1)[-1] for line in effective.splitlines() if line.startswith("identityfile ")
    ]
    assert offered == [*SLOTS, "id_hpcc"], offered


def test_sshd_drop_in_allows_keys_only_and_comes_first(tmp_path):
    out = run(["ssh"], "sshd_hardening")
    name = re.search(r"sshd_hardening [^|]*\| write_file /etc/ssh/sshd_config.d/(\S+)", partial("ssh")).group(1)
    conf_d = tmp_path / "sshd_config.d"
    conf_d.mkdir()
    (conf_d / name).write_text(out.stdout)
    (conf_d / "50-cloud-init.conf").write_text("PasswordAuthentication yes\n")  # as Ubuntu's cloud images have
    main = tmp_path / "sshd_config"
    main.write_text(f"Include {conf_d}/*.conf\nKbdInteractiveAuthentication yes\n")
    key = tmp_path / "hostkey"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    # sshd -T wants its privilege separation directory: a private /run, not the machine's
    effective = subprocess.run(
        [
            "unshare",
            "--mount",
            "sh",
            "-c",
            f'mount -t tmpfs hpcc /run && mkdir /run/sshd && exec /usr/sbin/sshd -T -f {main} -h {key}',
        ],
        capture_output=True,
        text=True,
    )
    assert effective.returncode == 0, effective.stderr
    lines = effective.stdout.splitlines()
    assert "passwordauthentication no" in lines and "kbdinteractiveauthentication no" in lines
    assert "permitrootlogin without-password" in lines and "pubkeyauthentication yes" in lines
    # The users' own keys (user_keys) are read besides each account's own file.
    assert "authorizedkeysfile .ssh/authorized_keys /etc/hpcc/authorized_keys/%u" in lines


# -- join ------------------------------------------------------------------------------------------


def test_join_waits_for_the_head_alone_never_for_its_peers(fake):
    """Readiness is per node (issue 19): a peer that never comes up delays no node; the head must answer."""
    tmp_path, bin_dir, env = fake
    tool(bin_dir, "ssh", f'echo "$*" >>{tmp_path}/ssh; case "$*" in *10.0.0.7*|*10.0.0.9*) exit 255 ;; esac; exit 0\n')
    ctx = ctx_for(tmp_path, poll_seconds=1, join_timeout_minutes=0)
    hosts = "HPCC_NAMES=(head gpu-000 gpu-002 cpu-000)\nHPCC_HOSTS=(10.0.0.4 10.0.0.5 10.0.0.7 10.0.0.9)\n"
    out = run(COMMON + ["identify", "join"], preamble(tmp_path) + hosts + STUB_FAIL + "step_join", ctx, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert [line.split()[-2] for line in (tmp_path / "ssh").read_text().splitlines()] == ["root@10.0.0.4"]
    hosts = "HPCC_NAMES=(head gpu-000)\nHPCC_HOSTS=(10.0.0.9 10.0.0.6)\n"  # the head does not answer
    out = run(COMMON + ["identify", "join"], preamble(tmp_path) + hosts + STUB_FAIL + "step_join", ctx, env=env)
    assert out.returncode == 1 and "FAIL: the head (10.0.0.9) did not accept SSH within 0 min" in out.stdout


# -- EFA -------------------------------------------------------------------------------------------

FI_INFO = "".join(
    f"provider: efa\n    fabric: efa\n    domain: efa_{i}-rdm\n    version: 122.0\n    type: FI_EP_RDM\n"
    for i in range(4)
)


def test_efa_devices_are_counted_once_each(fake):
    tmp_path, bin_dir, env = fake
    tool(bin_dir, "fi_info", f"cat <<'X'\n{FI_INFO}{FI_INFO}X\n")  # a provider listed twice per device
    out = run(["efa"], "efa_device_count", context(), env=env)
    assert out.stdout.strip() == "4"


def test_efa_step_retries_after_modprobe_then_fails_naming_the_type(fake):
    tmp_path, bin_dir, env = fake
    tool(bin_dir, "fi_info", 'echo "fi_getinfo: -61" >&2; exit 1\n')
    tool(bin_dir, "modprobe", f'echo "$*" >>{tmp_path}/modprobe\n')
    out = run(
        COMMON + ["efa"], preamble(tmp_path) + STUB_FAIL + "HPCC_OS=ubuntu-22.04\nstep_efa", ctx_for(tmp_path), env=env
    )
    assert out.returncode == 1 and (tmp_path / "modprobe").read_text() == "ib_uverbs\n"
    assert "no EFA device" in out.stdout and "p5.48xlarge was launched with 32" in out.stdout
    tool(bin_dir, "fi_info", f"cat <<'X'\n{FI_INFO}X\n")
    out = run(COMMON + ["efa"], preamble(tmp_path) + STUB_FAIL + "step_efa", ctx_for(tmp_path), env=env)
    assert "found 4 EFA device(s); p5.48xlarge was launched with 32" in out.stdout


# -- launch helpers --------------------------------------------------------------------------------


def helper(tmp_path: Path, name: str) -> Path:
    """The helper as the head node writes it, reading its hostfile and env from tmp_path."""
    text = partial("launch_env", context("p5-llm-head"))
    body = text.split(f"write_file /usr/local/bin/{name} 0755 <<'SH'\n", 1)[1].split("\nSH\n", 1)[0]
    path = tmp_path / name
    path.write_text(body.replace("/etc/hpcc/", f"{tmp_path}/") + "\n")
    path.chmod(0o755)
    return path


def test_hpcc_mpirun_passes_hostfile_fabric_variables_and_efa_flags(fake):
    tmp_path, bin_dir, env = fake
    tool(bin_dir, "mpirun", 'printf "%s\\n" "$@"\n')
    launch = context("p5-llm-head").settings  # the flags and variable names come from the settings at run time
    names = ",".join(name for name, _ in launch.fabric)
    (tmp_path / "env").write_text(
        "FI_PROVIDER=efa\nFI_EFA_USE_DEVICE_RDMA=1\nFI_EFA_FORK_SAFE=1\nNCCL_SOCKET_IFNAME=^lo,docker\n"
        f"HPCC_FABRIC_VARS={names}\n"
    )
    (tmp_path / "mpirun-options").write_text(launch.mpirun_options + "\n")
    env = {k: v for k, v in env.items() if k != "LD_LIBRARY_PATH"}
    args = subprocess.run(
        [str(helper(tmp_path, "hpcc-mpirun")), "python", "train.py"], capture_output=True, text=True, env=env
    ).stdout.splitlines()
    assert args[args.index("--hostfile") + 1] == f"{tmp_path}/hostfile"
    exported = {args[i + 1] for i, a in enumerate(args) if a == "-x"}
    assert {"PATH", "FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "FI_EFA_FORK_SAFE", "NCCL_SOCKET_IFNAME"} <= exported
    assert "LD_LIBRARY_PATH" not in exported and "NCCL_DEBUG" not in exported  # unset here: not passed
    assert " ".join(args).count("--mca pml ^cm --mca btl tcp,self --mca btl_tcp_if_exclude lo,docker0") == 1
    assert "--bind-to none" in " ".join(args) and args[-2:] == ["python", "train.py"]


def test_hpcc_torchrun_runs_on_every_compute_node_and_propagates_failure(fake):
    tmp_path, bin_dir, env = fake
    env.pop("TORCHRUN", None)  # the default launcher is what is checked first
    tool(bin_dir, "ssh", f'echo "$*" >>{tmp_path}/ssh; case "$*" in *10.0.0.6*) exit "${{FAIL_RC:-0}}" ;; esac\n')
    venv = tmp_path / "venv bin"  # the user's activated environment; a space to check the quoting
    venv.mkdir()
    tool(venv, "torchrun", "exit 0\n")
    (tmp_path / "hostfile").write_text("10.0.0.5 slots=8\n10.0.0.6 slots=8\n")
    script = helper(tmp_path, "hpcc-torchrun")
    ok = subprocess.run(
        [str(script), "train.py", "--lr", "1e-4"],
        capture_output=True,
        text=True,
        env={**env, "PATH": f"{venv}:{env['PATH']}"},
    )
    assert ok.returncode == 0, ok.stderr
    runs = (tmp_path / "ssh").read_text().splitlines()
    assert sorted(r.split()[2] for r in runs) == ["10.0.0.5", "10.0.0.6"]
    # The head's torchrun by full path: over ssh the nodes have sshd's PATH, not the venv's.
    launcher = str(venv / "torchrun").replace(" ", "\\ ")
    assert all(
        f"exec {launcher} --nnodes $NNODES" in r and "--node-rank $NODE_RANK" in r and r.endswith("train.py --lr 1e-4 ")
        for r in runs
    )
    bare_path = ":".join(p for p in env["PATH"].split(":") if not (Path(p) / "torchrun").exists())
    missing = subprocess.run([str(script), "train.py"], capture_output=True, text=True, env={**env, "PATH": bare_path})
    assert missing.returncode == 2 and "no torchrun on PATH" in missing.stderr and "set TORCHRUN" in missing.stderr
    failed = subprocess.run(
        [str(script), "train.py"],
        capture_output=True,
        text=True,
        env={**env, "FAIL_RC": "3", "TORCHRUN": "python -m torch.distributed.run"},
    )
    assert failed.returncode == 1 and "exec python -m torch.distributed.run" in (tmp_path / "ssh").read_text()


# -- mount -----------------------------------------------------------------------------------------


def test_fsx_parameter_and_fstab_line():
    out = run(
        ["mount"],
        """json_field dnsName <<<'{"dnsName": "fs-1.fsx.us-east-1.amazonaws.com", "mountName": "abcd"}'
json_field mountName <<<'{"dnsName": "fs-1.fsx.us-east-1.amazonaws.com", "mountName": "abcd"}'
fstab_line fs-1.fsx.us-east-1.amazonaws.com@tcp:/abcd""",
    )
    dns, mount_name, fstab = out.stdout.splitlines()
    assert (dns, mount_name) == ("fs-1.fsx.us-east-1.amazonaws.com", "abcd")
    assert fstab == (
        "fs-1.fsx.us-east-1.amazonaws.com@tcp:/abcd /fsx lustre defaults,relatime,flock,nosuid,nodev,_netdev,"
        "x-systemd.automount,x-systemd.requires=network-online.target 0 0"
    )


# -- the run's own bound ---------------------------------------------------------------------------


def test_commands_are_cut_at_their_bound_and_at_the_runs_deadline(tmp_path):
    ctx = ctx_for(tmp_path)
    start = time.time()
    out = run(COMMON, preamble(tmp_path) + "within 1 sleep 30 || echo rc=$?", ctx)
    assert out.stdout.strip() == "rc=124" and time.time() - start < 10
    out = run(COMMON, "HPCC_DEADLINE=$(( $(date +%s) - 1 ))\nwithin 60 true || echo rc=$?", ctx)
    assert out.stdout.strip() == "rc=124"  # the whole run's time is up: nothing more starts
    out = run(COMMON, STUB_FAIL + "HPCC_DEADLINE=$(( $(date +%s) - 1 ))\non_error 124 7 'apt-get install'", ctx)
    assert "FAIL: the bootstrap's 60 minutes ran out (apt-get install)" in out.stdout


def test_an_error_inside_a_command_substitution_does_not_report_the_node_failed(fake):
    tmp_path, _, env = fake
    (tmp_path / "answers").write_text("0|\n")
    script = (
        preamble(tmp_path) + "trap 'on_error $? $LINENO \"$BASH_COMMAND\"' ERR\nset -E\nuse_step ssh\n"
        'log "pid: $(cat /nonexistent/sshd.pid)"\necho continued >&2\nflush_log'
    )
    out = run(COMMON, script, ctx_for(tmp_path), env=env)
    assert out.returncode == 0 and calls(tmp_path) == []  # only the step's own shell reports
    assert "continued" in (tmp_path / "bootstrap.log").read_text()
