"""Whole steps of the bootstrap run for real against stand-ins, each twice where the step writes files:
rerunning changes nothing, skipped steps do nothing, the Lustre, mount, EFA and sshd-reload paths.

Steps that write under /etc or /run run in a private mount namespace (`unshare --mount`) with a tmpfs or
a bind mount over exactly the paths they write, so the machine running the tests is never changed."""

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from infra.render.steps import STATUS_EVERY_SECONDS
from tests.render.bootstrap_fixtures import tool
from tests.render.bootstrap_shell import context, partial, settings_shell
from tests.render.test_bootstrap_steps import COMMON, bodies, calls, ctx_for
from tests.render.test_bootstrap_steps import preamble as steps_preamble

STUB_FAIL = 'fail() { echo "FAIL: $*"; exit 1; }\n'


def preamble(tmp_path) -> str:
    """As a step sees it, its output not yet sent to the log (log lines go to stdout)."""
    return steps_preamble(tmp_path) + "HPCC_STEP=test\n"


def private_run(partials, script, ctx, env, over=(), binds=(), overlay=(), timeout=60) -> subprocess.CompletedProcess:
    """Run SCRIPT after PARTIALS in bash inside a private mount namespace: a tmpfs on each directory in
    OVER, each (source, target) in BINDS bind-mounted, and each directory in OVERLAY made writable by an
    overlay whose changes stay in the test's directory (for paths that need not exist on the machine)."""
    body = "\n".join(partial(p, ctx) for p in partials) + "\n" + settings_shell(ctx.settings)
    setup = ""
    for n, d in enumerate(overlay):
        layer = Path(ctx.log_path).parent / f"overlay-{n}"
        (layer / "upper").mkdir(parents=True, exist_ok=True)
        (layer / "work").mkdir(exist_ok=True)
        setup += (
            f"/bin/mount -t overlay hpcc -o lowerdir={shlex.quote(d)},upperdir={layer}/upper,"
            f"workdir={layer}/work {shlex.quote(d)} && "
        )
    setup += "".join(f"/bin/mount -t tmpfs hpcc {shlex.quote(d)} && " for d in over)
    setup += "".join(f"/bin/mount --bind {shlex.quote(str(s))} {shlex.quote(t)} && " for s, t in binds)
    path = Path(ctx.log_path).parent / "script.sh"
    path.write_text(f"#!/bin/bash\nset -euo pipefail\n{body}\n{script}\n")
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", f"{setup}exec bash {path}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def state(paths) -> dict:
    """Content, mode and mtime of each file: what a rerun must leave alone."""
    return {str(p): (p.read_bytes(), p.stat().st_mode, p.stat().st_mtime_ns) for p in paths}


# -- the run's bounds ------------------------------------------------------------------------------


def test_a_command_is_cut_when_the_runs_time_is_up_before_its_own_bound(tmp_path):
    from tests.render.bootstrap_shell import run

    start = time.time()
    out = run(COMMON, "HPCC_DEADLINE=$(( $(date +%s) + 2 ))\nwithin 60 sleep 30 || echo rc=$?", ctx_for(tmp_path))
    took = time.time() - start
    assert out.stdout.strip() == "rc=124", f"exit {out.returncode}, stderr: {out.stderr[-2000:]}"
    assert took < 20, f"{took:.1f} s: the run's time (2 s) did not cut the 30 s sleep"


# -- skipping --------------------------------------------------------------------------------------


def test_a_skipped_step_neither_runs_nor_reports(fake):
    tmp_path, _, env = fake
    (tmp_path / "answers").write_text("0|\n")
    from tests.render.bootstrap_shell import run

    script = (
        preamble(tmp_path) + "step_lustre() { echo RAN-lustre; }\nstep_mount() { echo RAN-mount; }\n"
        "step_efa() { echo RAN-efa; }\nrun_step lustre step_lustre\nrun_step mount step_mount\n"
        "run_step efa step_efa\nflush_log"
    )
    out = run(COMMON, script, ctx_for(tmp_path), env={**env, "HPCC_SKIP_STEPS": "lustre,mount"})
    assert out.returncode == 0, out.stderr
    log = (tmp_path / "bootstrap.log").read_text()
    assert "RAN-lustre" not in log and "RAN-mount" not in log and "[efa] RAN-efa" in log
    assert (
        "[lustre] skipped: HPCC_SKIP_STEPS names lustre" in log
        and "[mount] skipped: HPCC_SKIP_STEPS names mount" in log
    )
    reported = bodies(tmp_path)
    assert len(reported) == 1 and '"phase": "efa"' in reported[0]  # the efa step only


def test_quick_steps_share_one_status_write_and_a_step_that_waits_is_reported_from_its_wait(fake):
    """A step's start is written only once the last write is STATUS_EVERY_SECONDS old: lustre is (the first),
    mount right after it is not; efa, waiting in poll_pause once that much time has passed, is reported from there."""
    tmp_path, _, env = fake
    (tmp_path / "answers").write_text("0|\n0|\n")
    from tests.render.bootstrap_shell import run

    script = (
        preamble(tmp_path) + "step_lustre() { :; }\nstep_mount() { :; }\n"
        "step_efa() { HPCC_POLL_SECONDS=1; "
        f"HPCC_REPORTED_AT=$(( $(date +%s) - {STATUS_EVERY_SECONDS} )); poll_pause; }}\n"
        "run_step lustre step_lustre\nrun_step mount step_mount\nrun_step efa step_efa\nflush_log"
    )
    out = run(COMMON, script, ctx_for(tmp_path), env=env)
    assert out.returncode == 0, out.stderr
    reported = bodies(tmp_path)
    assert [b.split('"phase": "')[1].split('"')[0] for b in reported] == ["lustre", "efa"], reported
    assert "[mount] start" in (tmp_path / "bootstrap.log").read_text()  # it ran, unreported


# -- identify --------------------------------------------------------------------------------------


def test_without_imds_the_nodes_ip_is_the_default_routes_source(fake):
    tmp_path, bin_dir, env = fake
    tool(bin_dir, "curl", "exit 7\n")  # no instance metadata service
    tool(bin_dir, "ip", 'echo "1.1.1.1 via 10.0.0.1 dev eth0 src 10.0.0.6 uid 0"\n')
    from tests.render.bootstrap_shell import run

    out = run(COMMON + ["identify"], "primary_ip", ctx_for(tmp_path), env=env)
    assert out.stdout.strip() == "10.0.0.6", out.stderr


# -- idempotence -----------------------------------------------------------------------------------


def test_installing_the_key_twice_changes_nothing(fake):
    tmp_path, _, env = fake
    home = tmp_path / "home"
    home.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    from tests.render.bootstrap_shell import run

    script = preamble(tmp_path) + f'HPCC_KEY=$(cat {tmp_path / "k"})\ninstall_key {home} "$(id -un)"'
    first = run(COMMON + ["ssh"], script, ctx_for(tmp_path), env=env)
    assert first.returncode == 0, first.stderr
    files = sorted((home / ".ssh").iterdir())
    before = state(files)
    time.sleep(1.1)
    second = run(COMMON + ["ssh"], script, ctx_for(tmp_path), env=env)
    assert second.returncode == 0 and state(files) == before
    assert (home / ".ssh" / "authorized_keys").read_text().count("ssh-ed25519") == 1
    assert (home / ".ssh" / "id_hpcc").stat().st_mode & 0o777 == 0o600
    assert (
        "PRIVATE KEY" not in first.stdout + first.stderr + second.stdout + second.stderr
    )  # the private key never reaches the log


FSX = '{"dnsName": "fs-1.fsx.us-east-1.amazonaws.com", "mountName": "abcd"}'


def test_mount_waits_for_the_file_system_then_mounts_and_persists_it_once(fake):
    tmp_path, bin_dir, env = fake
    mnt = tmp_path / "fsx"
    fstab = tmp_path / "fstab"
    fstab.write_text(f"LABEL=root / ext4 defaults 0 1\nold@tcp:/x {mnt} lustre defaults 0 0\n")
    (tmp_path / "answers").write_text(f"255|ParameterNotFound\n0|{FSX}\n")
    tool(bin_dir, "mount", f'echo "$*" >>{tmp_path}/mounts; touch {tmp_path}/mounted\n')
    tool(bin_dir, "mountpoint", f'[ -e {tmp_path}/mounted ]\n')
    ctx = ctx_for(tmp_path, mount_point=str(mnt), poll_seconds=1)
    script = preamble(tmp_path) + STUB_FAIL + f"lnet_reachable() {{ true; }}\nHPCC_FSTAB={fstab}\nstep_mount"
    from tests.render.bootstrap_shell import run

    out = run(COMMON + ["mount"], script, ctx, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    before = state([fstab])
    time.sleep(1.1)
    out = run(COMMON + ["mount"], script, ctx, env=env)  # the second run changes nothing
    assert out.returncode == 0 and state([fstab]) == before, out.stdout + out.stderr
    assert (
        tmp_path / "mounts"
    ).read_text() == f"-t lustre -o relatime,flock,nosuid,nodev fs-1.fsx.us-east-1.amazonaws.com@tcp:/abcd {mnt}\n"
    lines = fstab.read_text().splitlines()
    assert lines[0] == "LABEL=root / ext4 defaults 0 1" and len(lines) == 2  # the stale entry replaced, once
    assert lines[1].startswith(f"fs-1.fsx.us-east-1.amazonaws.com@tcp:/abcd {mnt} lustre ") and "_netdev" in lines[1]
    assert (mnt / "scratch").stat().st_mode & 0o7777 == 0o1777
    assert [c.split()[1] for c in calls(tmp_path)] == ["get-parameter", "get-parameter", "get-parameter"]
    fstab.write_text(f"{lines[1]}\n{lines[0]}\n{lines[1]}\n")  # the right entry, but twice
    out = run(COMMON + ["mount"], script, ctx, env=env)
    assert out.returncode == 0 and fstab.read_text().splitlines() == [lines[0], lines[1]]


def test_mount_fails_naming_the_port_when_lustre_does_not_answer(fake):
    tmp_path, _, env = fake
    (tmp_path / "answers").write_text(f"0|{FSX}\n")
    ctx = ctx_for(tmp_path, mount_point=str(tmp_path / "fsx"), poll_seconds=1)
    from tests.render.bootstrap_shell import run

    script = (
        preamble(tmp_path) + STUB_FAIL + "lnet_reachable() { false; }\n"
        'wait_for() { "${@:3}" || return 1; }\nstep_mount'
    )  # no 30-minute wait here
    out = run(COMMON + ["mount"], script, ctx, env=env)
    assert out.returncode == 1 and "does not answer on TCP 988" in out.stdout


# -- lustre ----------------------------------------------------------------------------------------


def test_lustre_is_skipped_when_the_module_is_there(fake):
    tmp_path, bin_dir, env = fake
    tool(bin_dir, "modinfo", "echo 2.15.4\n")
    tool(bin_dir, "apt-get", f"echo apt-get >>{tmp_path}/apt\n")
    from tests.render.bootstrap_shell import run

    out = run(COMMON + ["lustre"], preamble(tmp_path) + "HPCC_OS=ubuntu-22.04\nstep_lustre", ctx_for(tmp_path), env=env)
    assert out.returncode == 0 and not (tmp_path / "apt").exists()
    assert "Lustre client already installed" in out.stdout


def ubuntu_tools(tmp_path: Path, bin_dir: Path, kernel: str, available: list[str]) -> None:
    tool(bin_dir, "uname", f"echo {kernel}\n")
    tool(bin_dir, "modinfo", f"[ -e {tmp_path}/installed ]\n")
    tool(bin_dir, "lsb_release", "echo jammy\n")
    tool(bin_dir, "curl", 'while [ "$1" != -o ]; do shift; done; echo KEY >"$2"\n')
    tool(bin_dir, "gpg", 'while [ "$1" != -o ]; do shift; done; echo GPG >"$2"\n')
    listing = "".join(f"lustre-client-modules-{k} - Lustre client modules\\n" for k in available)
    tool(
        bin_dir,
        "apt-cache",
        f'''case "$1" in
  show) case " {' '.join(available)} " in *" ${{2#lustre-client-modules-}} "*) exit 0 ;; esac; exit 100 ;;
  search) printf '{listing}' ;;
esac
''',
    )
    tool(
        bin_dir,
        "apt-get",
        f'echo "apt-get $*" >>{tmp_path}/apt; case " $* " in *" install "*) touch {tmp_path}/installed ;; esac\n',
    )
    tool(bin_dir, "apt-mark", f'echo "apt-mark $*" >>{tmp_path}/apt\n')
    tool(bin_dir, "dpkg-query", 'for p in "$@"; do case "$p" in lustre-*|linux-aws) echo "ii  $p" ;; esac; done\n')


def test_ubuntu_installs_the_kernels_lustre_package_from_the_signed_repo_and_holds_it(fake):
    tmp_path, bin_dir, env = fake
    kernel = "6.8.0-1019-aws"
    ubuntu_tools(tmp_path, bin_dir, kernel, ["6.8.0-1018-aws", kernel])
    script = (
        preamble(tmp_path)
        + STUB_FAIL
        + "HPCC_OS=ubuntu-22.04\nstep_lustre\ncat /etc/apt/sources.list.d/fsxlustreclientrepo.list"
    )
    out = private_run(
        COMMON + ["lustre"],
        script,
        ctx_for(tmp_path),
        env,
        over=["/etc/apt/sources.list.d", "/usr/share/keyrings", "/run"],
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[-1] == (
        "deb [signed-by=/usr/share/keyrings/fsx-ubuntu-public-key.gpg] "
        "https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu jammy main"
    )
    apt = (tmp_path / "apt").read_text().splitlines()
    assert (
        f"apt-get -o DPkg::Lock::Timeout=600 install -y -q lustre-client-modules-{kernel}" in apt
    )  # waits for cloud-init's apt
    hold = next(line for line in apt if line.startswith("apt-mark hold"))
    assert f"lustre-client-modules-{kernel}" in hold.split() and "linux-aws" in hold.split()


def test_the_lustre_repo_is_the_releases_codename_without_lsb_release(fake):
    tmp_path, bin_dir, env = fake
    kernel = "6.8.0-1019-aws"
    ubuntu_tools(tmp_path, bin_dir, kernel, [kernel])
    tool(bin_dir, "lsb_release", "exit 127\n")  # minimal images may not ship it
    script = (
        preamble(tmp_path) + STUB_FAIL + "HPCC_OS=ubuntu-24.04 HPCC_OS_CODENAME=noble\nstep_lustre\n"
        "cat /etc/apt/sources.list.d/fsxlustreclientrepo.list"
    )
    out = private_run(
        COMMON + ["lustre"],
        script,
        ctx_for(tmp_path),
        env,
        over=["/etc/apt/sources.list.d", "/usr/share/keyrings", "/run"],
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[-1].endswith("/ubuntu noble main")


def test_a_kernel_with_no_lustre_package_fails_naming_it_and_the_nearest(fake):
    tmp_path, bin_dir, env = fake
    ubuntu_tools(
        tmp_path, bin_dir, "6.8.0-1019-aws", ["6.5.0-1020-aws", "6.8.0-1015-aws", "6.8.0-1021-aws", "6.11.0-1004-aws"]
    )
    script = preamble(tmp_path) + STUB_FAIL + "HPCC_OS=ubuntu-22.04\nstep_lustre"
    out = private_run(
        COMMON + ["lustre"],
        script,
        ctx_for(tmp_path),
        env,
        over=["/etc/apt/sources.list.d", "/usr/share/keyrings", "/run"],
    )
    assert out.returncode == 1
    assert "no Lustre client for the running kernel 6.8.0-1019-aws" in out.stdout
    assert "nearest kernels with one: 6.5.0-1020-aws 6.8.0-1015-aws 6.8.0-1021-aws 6.11.0-1004-aws" in out.stdout
    assert "install" not in (tmp_path / "apt").read_text()


# -- efa -------------------------------------------------------------------------------------------

FI_INFO = "".join(f"provider: efa\n    fabric: efa\n    domain: efa_{i}-rdm\n" for i in range(32))


def test_efa_on_ubuntu_logs_the_installer_version_and_persists_ptrace_scope(fake):
    tmp_path, bin_dir, env = fake
    tool(bin_dir, "fi_info", f"cat <<'X'\n{FI_INFO}X\n")
    tool(bin_dir, "sysctl", f'echo "sysctl $*" >>{tmp_path}/sysctl\n')
    opt = tmp_path / "opt-amazon"
    opt.mkdir()
    (opt / "amazon").mkdir()
    (opt / "amazon" / "efa_installed_packages").write_text("# EFA installer version: 1.38.0\n")
    script = (
        preamble(tmp_path)
        + STUB_FAIL
        + "HPCC_OS=ubuntu-22.04\nstep_efa\nstep_efa\necho ---\ncat /etc/sysctl.d/99-hpcc-efa.conf"
    )
    out = private_run(COMMON + ["efa"], script, ctx_for(tmp_path), env, over=["/etc/sysctl.d"], binds=[(opt, "/opt")])
    assert out.returncode == 0, out.stdout + out.stderr
    log, conf = out.stdout.split("---\n")
    assert conf == "kernel.yama.ptrace_scope = 0\n"
    assert "EFA devices: 32 by fi_info" in log and log.count("wrote /etc/sysctl.d/99-hpcc-efa.conf") == 1
    assert "EFA installer version: 1.38.0" in log
    assert "-w kernel.yama.ptrace_scope=0" in (tmp_path / "sysctl").read_text()


def test_without_efa_the_tcp_provider_must_work(fake):
    tmp_path, bin_dir, env = fake
    ctx = ctx_for(
        tmp_path,
        **{
            k: v
            for k, v in vars(context("c6i-oneccl-compute")).items()
            if k in ("efa_enabled", "efa_devices", "instance_type")
        },
    )
    from tests.render.bootstrap_shell import run

    tool(bin_dir, "fi_info", '[ "$*" = "-p tcp" ]\n')
    out = run(COMMON + ["efa"], preamble(tmp_path) + STUB_FAIL + "step_efa", ctx, env=env)
    assert out.returncode == 0 and "EFA is not in use on c6i.16xlarge" in out.stdout
    tool(bin_dir, "fi_info", "exit 1\n")
    out = run(COMMON + ["efa"], preamble(tmp_path) + STUB_FAIL + "step_efa", ctx, env=env)
    assert out.returncode == 1 and "TCP provider does not work" in out.stdout


# -- sshd reload -----------------------------------------------------------------------------------


def test_without_systemd_sshd_gets_a_hup_from_its_pid_file(fake):
    tmp_path, bin_dir, env = fake
    tool(bin_dir, "sshd", "exit 0\n")  # sshd -t: the configuration is fine
    hupped, trapping = tmp_path / "hupped", tmp_path / "trapping"
    sleeper = subprocess.Popen(  # HUP's default action restored: bash cannot trap a signal ignored on entry (nohup)
        ["bash", "-c", f"trap 'touch {hupped}; exit 0' HUP; touch {trapping}; while :; do sleep 0.1; done"],
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 60  # its trap is set (a loaded machine starts bash slowly)
        while not trapping.exists():
            assert time.monotonic() < deadline and sleeper.poll() is None, "the stand-in sshd never set its trap"
            time.sleep(0.05)
        script = preamble(tmp_path) + STUB_FAIL + f"echo {sleeper.pid} >/run/sshd.pid\nreload_sshd"
        out = private_run(COMMON + ["ssh"], script, ctx_for(tmp_path), env, over=["/run"])
        assert out.returncode == 0, out.stdout + out.stderr
        sleeper.wait(timeout=120)  # a deadline, not a duration: it exits as soon as its trap ran
        assert hupped.exists() and f"sent HUP to sshd ({sleeper.pid})" in out.stdout
    finally:
        if sleeper.poll() is None:
            sleeper.kill()


def test_sshd_takes_the_whole_cluster_connecting_at_once(tmp_path):
    """512 nodes join by SSH at once and mpirun fans out: sshd's default MaxStartups (10:30:100) would drop most."""
    from tests.render.bootstrap_shell import run

    conf = tmp_path / "sshd_config"
    conf.write_text(run(["ssh"], "sshd_hardening").stdout)
    key = tmp_path / "hostkey"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    effective = subprocess.run(
        [
            "unshare",
            "--mount",
            "sh",
            "-c",
            f'mount -t tmpfs hpcc /run && mkdir /run/sshd && exec /usr/sbin/sshd -T -f {conf} -h {key}',
        ],
        capture_output=True,
        text=True,
    )
    assert effective.returncode == 0, effective.stderr
    start, _rate, full = next(
        line.split()[1] for line in effective.stdout.splitlines() if line.startswith("maxstartups ")
    ).split(":")
    assert int(start) >= 64 and int(full) >= 512


@pytest.mark.parametrize("role", ["head", "compute"])
def test_a_rendered_script_runs_exactly_the_step_list_in_order(role):
    """main() runs infra/render/steps.py STEPS, each step's function defined in the script, and nothing else."""
    import re

    from infra.render.steps import STEPS
    from tests.render.bootstrap_cases import cases

    script = dict(cases())[f"p5-llm-{role}"]
    assert re.findall(r"^  run_step (\S+) (\S+)$", script, flags=re.MULTILINE) == [tuple(s) for s in STEPS]
    assert all(re.search(rf"^{s.function}\(\) \{{", script, flags=re.MULTILINE) for s in STEPS)
    assert os.linesep == "\n" and script.startswith("#!/bin/bash\n") and "set -Eeuo pipefail" in script


@pytest.mark.parametrize(
    "dns,mount_name",
    [
        ("fs-1.fsx.us-east-1.amazonaws.com; touch PWNED", "abcd"),
        ("$(touch PWNED).fsx.us-east-1.amazonaws.com", "abcd"),
        ("fs-1.fsx.us-east-1.amazonaws.com/988`touch PWNED`", "abcd"),
        ("fs-1.fsx.us-east-1.amazonaws.com", "ab;touch PWNED"),
        ("fs-1.fsx.us-east-1.amazonaws.com", "../../etc"),
    ],
)
def test_a_crafted_file_system_parameter_is_refused_and_never_run(fake, dns, mount_name):
    """The parameter is data: a value that is not a host name and a mount name fails the step, and no part of it
    runs as a command (the node's role can write parameters only under nodes/, but the check does not rely on that)."""
    import json as _json

    tmp_path, bin_dir, env = fake
    (tmp_path / "answers").write_text(f"0|{_json.dumps({'dnsName': dns, 'mountName': mount_name})}\n")
    ctx = ctx_for(tmp_path, mount_point=str(tmp_path / "fsx"), poll_seconds=1)
    from tests.render.bootstrap_shell import run

    script = preamble(tmp_path) + STUB_FAIL + 'wait_for() { "${@:3}" || return 1; }\nstep_mount'
    out = run(COMMON + ["mount"], script, ctx, env={**env, "PWD": str(tmp_path)})
    assert out.returncode == 1 and "not an FSx file system of us-east-1; refused" in out.stdout, out.stdout + out.stderr
    assert not list(tmp_path.rglob("PWNED")) and not (Path.cwd() / "PWNED").exists()


def test_lnet_probe_passes_the_host_as_an_argument(tmp_path):
    from tests.render.bootstrap_shell import run

    out = run(
        ["mount"],
        f'cd {tmp_path}; lnet_reachable "127.0.0.1/1;touch PWNED;" || true; lnet_reachable \'$(touch PWNED2)\' || true',
    )
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "PWNED2").exists(), out.stderr


def test_the_cluster_key_is_accepted_only_from_inside_the_vpc_and_an_older_open_line_goes(fake):
    """A public head's sshd faces the internet: the cluster key (root on every node) must not log in from there."""
    tmp_path, _, env = fake
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    public = (tmp_path / "k.pub").read_text().strip()
    mine = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAdecSRFR0wnzfd+gZo01f3h1LlaxXbHdtb4hdt4DXiz me@laptop"
    (home / ".ssh" / "authorized_keys").write_text(f"{mine}\n{public}\n")  # as an older hpcc left it: unrestricted
    from tests.render.bootstrap_shell import run

    script = (
        preamble(tmp_path)
        + STUB_FAIL
        + f'HPCC_KEY=$(cat {tmp_path / "k"})\nHPCC_VPC_CIDR=10.0.0.0/16\ninstall_key {home} "$(id -un)"'
    )
    out = run(COMMON + ["ssh"], script, ctx_for(tmp_path), env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (home / ".ssh" / "authorized_keys").read_text().splitlines() == [mine, f'from="10.0.0.0/16" {public}']
    bad = run(COMMON + ["ssh"], script.replace("=10.0.0.0/16", "='10.0.0.0/16 ssh-rsa'"), ctx_for(tmp_path), env=env)
    assert bad.returncode == 1 and "is not an IPv4 CIDR" in bad.stdout


def test_the_users_own_keys_go_to_the_login_users_file_and_follow_the_settings(fake):
    tmp_path, _, env = fake
    keys = (
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAdecSRFR0wnzfd+gZo01f3h1LlaxXbHdtb4hdt4DXiz me@laptop",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBbHdtb4hdt4DXizAdecSRFR0wnzfd+gZo01f3h1Llax colleague",
    )
    show = 'echo "--- $(stat -c %a /etc/hpcc/authorized_keys/ubuntu)"; cat /etc/hpcc/authorized_keys/ubuntu'
    script = (
        preamble(tmp_path) + f"HPCC_AUTHORIZED_KEY=()\nuser_keys\n{show}\n"
        f"HPCC_AUTHORIZED_KEY=({shlex.quote(keys[0])} {shlex.quote(keys[1])})\nuser_keys\n{show}\n"
        f"HPCC_AUTHORIZED_KEY=({shlex.quote(keys[1])})\nuser_keys\n{show}\n"
    )
    out = private_run(COMMON + ["ssh"], script, ctx_for(tmp_path, login_user="ubuntu"), env, overlay=["/etc"])
    assert out.returncode == 0, out.stdout + out.stderr
    shown = [part.splitlines() for part in out.stdout.split("--- ")[1:]]
    assert [lines[0] for lines in shown] == ["644"] * 3
    keys_shown = [[line for line in lines[1:] if line.startswith("ssh-")] for lines in shown]
    assert keys_shown == [[], list(keys), [keys[1]]]  # none, both, then the colleague's only: it follows the settings
