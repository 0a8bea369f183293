"""Day 2 on the node, run for real against stand-ins: the settings parser, the one GetParameters read, the
identify step's bounded wait for the node's own hosts line, the membership agent's tick (applies a change
once, then nothing), its single instance, and one pacer shared by every process of a node."""

import json
import re
import shlex
import subprocess
import time

import pytest

from tests.instance_data import MOTO_ACCOUNT
from infra.node_settings import OPTIONAL, PATTERNS, REPEATED, NodeSettings, SettingsError, parse, render, settings_value
from tests.bootstrap_cases import configs, settings
from tests.instance_data import offline_facts
from tests.bootstrap_shell import context, run
from tests.test_bootstrap_behaviour import private_run
from tests.test_bootstrap_steps import COMMON, calls, ctx_for, fake, preamble, tool  # noqa: F401 - fake is a fixture

HOSTS_PARAM, SETTINGS_PARAM = "/hpcc/llm/hosts", "/hpcc/llm/settings"
SETTINGS = settings()["p5-llm"]


# -- the settings, in Python -----------------------------------------------------------------------

def test_settings_render_and_parse_back_for_every_example():
    for stem, cfg in configs():
        text = settings_value(cfg.cluster, cfg.region, offline_facts(), MOTO_ACCOUNT)
        assert render(parse(text)) == text, stem


@pytest.mark.parametrize("field,value", [("mount_point", "/fsx;reboot"), ("login_user", "$(id)"),
                                         ("mpirun_options", "--x `id`"), ("fabric", (("FI_PROVIDER", "efa'"),))])
def test_the_program_refuses_a_settings_value_the_nodes_would_refuse(field, value):
    good = parse(SETTINGS)
    with pytest.raises(SettingsError, match=field.upper()):
        render(NodeSettings(**{**vars(good), field: value}))


# -- the settings, in bash -------------------------------------------------------------------------

def shell_settings(text: str, after: str = "") -> subprocess.CompletedProcess:
    required = " ".join(k for k in PATTERNS if k not in REPEATED | OPTIONAL)
    dump = (f"for v in {required}; do "
            'n=HPCC_$v; echo "$v=${!n}"; done; printf "FABRIC=%s\\n" "${HPCC_FABRIC[@]}"; '
            # The Slurm keys mean something with SCHEDULER=slurm only (a previous text's may linger otherwise).
            f"[ \"$HPCC_SCHEDULER\" != slurm ] || for v in {' '.join(sorted(OPTIONAL))}; do "
            'n=HPCC_$v; echo "$v=${!n}"; done; '
            'for k in ${HPCC_AUTHORIZED_KEY[@]+"${HPCC_AUTHORIZED_KEY[@]}"}; do echo "AUTHORIZED_KEY=$k"; done')
    return run(["settings"], f"apply_settings {shlex.quote(text)}; rc=$?; {after}\n{dump}", context())


def test_bash_reads_the_settings_the_program_renders_as_python_does():
    for stem, text in settings().items():
        out = shell_settings(text)
        assert out.returncode == 0, out.stderr
        assert parse(out.stdout) == parse(text), stem


@pytest.mark.parametrize("line,why", [
    ("REBOOT=1", "unknown key REBOOT"),
    ("SLOTS=08", "SLOTS="),  # bash arithmetic would take it for octal
    ("SLOTS=0", "SLOTS="),
    ("MOUNT_POINT=/fsx$(touch {marker})", "MOUNT_POINT="),
    ("FABRIC=FI_PROVIDER=efa;touch {marker}", "FABRIC="),
    ("LOGIN_USER=ubuntu root", "LOGIN_USER="),
    ("MPIRUN_OPTIONS=--x `touch {marker}`", "MPIRUN_OPTIONS="),
    ("+NODE_COUNT=3", "NODE_COUNT is given twice"),
    ("just words", "is not KEY=VALUE"),
])
def test_bash_refuses_settings_with_an_unknown_key_or_a_bad_value_and_keeps_the_old_ones(tmp_path, line, why):
    """A line replaces the program's line of its key; one starting with + is added."""
    marker = tmp_path / "ran"
    line = line.format(marker=marker)
    key = line.lstrip("+").split("=", 1)[0]
    kept = [old for old in SETTINGS.splitlines() if line.startswith("+") or not old.startswith(key + "=")]
    text = "\n".join(kept + [line.lstrip("+")]) + "\n"
    out = run(["settings"], f"{preamble(tmp_path)}old=$HPCC_SLOTS\nif apply_settings {shlex.quote(text)}; then echo accepted; fi\n"
              '[ "$HPCC_SLOTS" = "$old" ] && echo kept', context())
    assert out.stdout.split() == ["kept"] and why in out.stderr, (out.stdout, out.stderr)
    assert not marker.exists()  # a value never runs as shell


def test_bash_refuses_settings_that_lack_a_key():
    text = "".join(line + "\n" for line in SETTINGS.splitlines() if not line.startswith("JOIN_TIMEOUT_MINUTES="))
    out = run(["settings"], f"apply_settings {shlex.quote(text)} || echo refused", context())
    assert out.stdout.strip() == "refused" and "JOIN_TIMEOUT_MINUTES is missing" in out.stderr


# -- reading hosts and settings --------------------------------------------------------------------

def answer(hosts: list[str], version: int, settings_text: str = SETTINGS, compact: bool = False) -> str:
    """What `aws ssm get-parameters --query 'Parameters[].[Name,Version,Value]' --output json` prints."""
    rows = [[HOSTS_PARAM, version, "\n".join(hosts)], [SETTINGS_PARAM, 1, settings_text]]
    return json.dumps(rows, separators=(",", ":")) if compact else json.dumps(rows, indent=4)


def answers(tmp_path, *lines: str) -> None:
    """The stand-in `aws` answers one `rc|output` per call; an output here is one line (JSON made compact)."""
    (tmp_path / "answers").write_text("".join(line.replace("\n", " ") + "\n" for line in lines))


@pytest.mark.parametrize("compact", [False, True])
def test_one_call_reads_both_parameters_and_the_hosts_version(fake, compact):
    tmp_path, _, env = fake
    answers(tmp_path, "0|" + answer(["10.0.0.4", "10.0.0.5", "10.0.0.6"], 7, compact=compact))
    out = run(COMMON + ["identify"], preamble(tmp_path) + 'read_cluster; echo "v=$HPCC_READ_VERSION"\n'
              'printf "%s\\n" "$HPCC_READ_HOSTS"; echo ---; printf "%s\\n" "$HPCC_READ_SETTINGS"', ctx_for(tmp_path), env=env)
    assert out.returncode == 0, out.stderr
    head, settings_text = out.stdout.split("---\n")
    assert head.splitlines() == ["v=7", "10.0.0.4", "10.0.0.5", "10.0.0.6"]
    assert parse(settings_text) == parse(SETTINGS)
    assert calls(tmp_path) == [f"ssm get-parameters --names {HOSTS_PARAM} {SETTINGS_PARAM} "
                               "--query Parameters[].[Name,Version,Value] --output json"]
    answers(tmp_path, "0|" + json.dumps([[HOSTS_PARAM, 1, "10.0.0.4"]]))  # the settings do not exist yet
    out = run(COMMON + ["identify"], preamble(tmp_path) + "read_cluster || echo rc=$?", ctx_for(tmp_path), env=env)
    assert out.stdout.strip() == "rc=3"


# -- identify: the node's own line -----------------------------------------------------------------

def short_join_timeout() -> str:
    """The settings' join timeout is at least a minute; a test waits seconds: 0 once the settings are applied."""
    return ('eval "$(declare -f apply_settings | sed 1s/apply_settings/real_apply_settings/)"\n'
            'apply_settings() { real_apply_settings "$@" && HPCC_JOIN_TIMEOUT_MINUTES=${JOIN:-1}; }\n')


def identify(tmp_path, env, script="identify_node", **extra):
    ctx = ctx_for(tmp_path, first_interval_ms=100, first_poll_seconds=1)
    body = (preamble(tmp_path).replace("HPCC_INSTANCE_ID=i-0abc\n", "") + 'fail() { echo "FAIL: $*"; exit 1; }\n' +
            short_join_timeout() + "HPCC_NODE=unknown\n" + script)
    return run(COMMON + ["identify"], body, ctx, env={**env, **extra})


def test_a_node_waits_for_its_own_line_then_goes_on(fake):
    tmp_path, _, env = fake
    old = ["10.0.0.4", "10.0.0.5", "10.0.0.9"]  # day 2: compute-001's predecessor is still listed
    fast = SETTINGS.replace("POLL_SECONDS=5", "POLL_SECONDS=1")
    answers(tmp_path, "0|" + answer(old, 3, fast), "0|" + answer(old, 3, fast),
            "0|" + answer(["10.0.0.4", "10.0.0.5", "10.0.0.6"], 4, fast))
    out = identify(tmp_path, env, HPCC_NODE_NAME="compute-001", HPCC_INSTANCE_ID="i-0new", HPCC_NODE_IP="10.0.0.6")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("waiting for /hpcc/llm/hosts to list compute-001 at 10.0.0.6 (line 3 holds 10.0.0.9") == 2
    assert "this is compute-001 (10.0.0.6, i-0new)" in out.stdout and "hosts version 4" in out.stdout
    assert len(calls(tmp_path)) == 3


def test_a_node_never_listed_fails_after_the_join_timeout_naming_both(fake):
    tmp_path, _, env = fake
    fast = SETTINGS.replace("POLL_SECONDS=5", "POLL_SECONDS=1")
    answers(tmp_path, "0|" + answer(["10.0.0.4", "10.0.0.5", "10.0.0.9"], 3, fast))
    start = time.time()
    out = identify(tmp_path, env, HPCC_NODE_NAME="compute-001", HPCC_INSTANCE_ID="i-0new", HPCC_NODE_IP="10.0.0.6",
                      JOIN="0")
    assert out.returncode == 1 and time.time() - start < 20
    assert ("FAIL: this node is compute-001 (10.0.0.6), but after 0 min line 3 of /hpcc/llm/hosts (version 3) "
            "holds 10.0.0.9") in out.stdout


def test_the_name_and_instance_come_from_instance_metadata(fake):
    tmp_path, bin_dir, env = fake
    tool(bin_dir, "curl", 'case "$*" in *api/token*) echo TOKEN ;; *tags/instance/hpcc:node) echo compute-001 ;;'
                          ' *instance-id) echo i-0imds ;; *local-ipv4) echo 10.0.0.6 ;; *) exit 22 ;; esac\n')
    answers(tmp_path, "0|" + answer(["10.0.0.4", "10.0.0.5", "10.0.0.6"], 2))
    out = identify(tmp_path, env)
    assert out.returncode == 0 and "this is compute-001 (10.0.0.6, i-0imds)" in out.stdout, out.stdout + out.stderr
    tool(bin_dir, "curl", 'case "$*" in *api/token*) echo TOKEN ;; *tags/instance/hpcc:node) echo "../etc" ;; *) echo x ;; esac\n')
    out = identify(tmp_path, env)
    assert out.returncode == 1 and "is not head or compute-NNN" in out.stdout


# -- apply-membership: the role script's part of the node agent (hpcc_node/agent.py decides when) ---------

AGENT_STATE = ("mkdir -p /etc/hpcc  # as the bootstrap does first\nHPCC_NODE=compute-001\nHPCC_INSTANCE_ID=i-0abc\nHPCC_IP=10.0.0.6\nHPCC_APPLIED_VERSION=1\n"
               "HPCC_AGENT=1\nHPCC_API_ATTEMPTS=1\nwrite_state >/dev/null\n")
SHOW = ('echo "--- $1"; cat /etc/hpcc/hostfile 2>/dev/null || true; cat /etc/hpcc/node\n'
        'echo "wrote=$(grep -c "wrote " "$LOG" || true)"\n'
        'echo "trusted=$(grep -ow 10.0.0.7 /etc/ssh/ssh_config.d/50-hpcc.conf 2>/dev/null | head -1)"')


def apply_runs(tmp_path, env, reads: list[tuple[int, list[str], str]]):
    """apply-membership once per (version, hosts, settings) the agent read, as `roles/<role>.sh apply-membership`."""
    ctx = ctx_for(tmp_path)
    # as the agent passes them: in the environment, which the script's start (identify's HPCC_READ_*="") cannot reset
    runs = "".join(f"(export HPCC_APPLY_VERSION={v} HPCC_APPLY_HOSTS={shlex.quote(chr(10).join(h))} "
                   f"HPCC_APPLY_SETTINGS={shlex.quote(text)}; HPCC_READ_HOSTS='' HPCC_READ_VERSION=0 HPCC_READ_SETTINGS=''; "
                   f"apply_membership) && echo \"run {i} ok\" >&3 || "
                   f"echo \"run {i} rc=$?\" >&3\nshow {i} >&3\n" for i, (v, h, text) in enumerate(reads))
    # HPCC_SKIP_STEPS=imds: the firewall would touch this machine's own (tests/test_imds.py runs it in a netns)
    # step_slurm (tests/test_bootstrap_slurm.py) stands in: it would start this machine's munge
    script = (preamble(tmp_path) + f"HPCC_SKIP_STEPS=imds\nLOG={tmp_path}/bootstrap.log\nshow() {{ {SHOW}; }}\nexec 3>&1\n"
              "step_slurm() { log \"slurm followed: $HPCC_SCHEDULER\"; }\nuse_step sync\n" + AGENT_STATE + runs)
    return private_run(COMMON + ["identify", "ssh", "launch_env", "sync"], script, ctx, env, overlay=["/etc"])


def test_apply_membership_writes_what_changed_and_leaves_the_status_to_the_agent(fake):
    tmp_path, _, env = fake
    answers(tmp_path, "0|")
    four = ["10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.0.7"]
    out = apply_runs(tmp_path, env, [(2, four, SETTINGS), (2, four, SETTINGS), (2, four, SETTINGS.replace("SLOTS=8", "SLOTS=16"))])
    assert out.returncode == 0, out.stdout + out.stderr
    first, second, third = out.stdout.split("--- ")[1:]
    assert "run 0 ok" in out.stdout and [f"{ip} slots=8" for ip in four[1:]] == first.splitlines()[1:4]
    assert "HOSTS_VERSION=2" in first and "trusted=10.0.0.7" in first  # the new peer is trusted by IP

    def wrote(chunk: str) -> str:
        return next(line for line in chunk.splitlines() if line.startswith("wrote="))
    assert wrote(second) == wrote(first) != wrote(third)  # the same membership again writes nothing
    assert [f"{ip} slots=16" for ip in four[1:]] == third.splitlines()[1:4]  # a settings change is applied
    assert not any("put-parameter" in c for c in calls(tmp_path))  # the agent reports, once
    log = (tmp_path / "bootstrap.log").read_text()
    assert "[sync] applied hosts version 2: 3 compute node(s)" in log and log.count("slurm followed: slurm") == 3


def test_apply_membership_never_applies_a_list_without_this_node_nor_fails_it(fake):
    tmp_path, _, env = fake
    answers(tmp_path, "0|")
    out = apply_runs(tmp_path, env, [(5, ["10.0.0.4", "10.0.0.5", "10.0.0.9"], SETTINGS)])
    assert "run 0 rc=1" in out.stdout, out.stdout + out.stderr
    assert calls(tmp_path) == [] and "HOSTS_VERSION=1" in out.stdout  # nothing applied, nothing reported
    log = (tmp_path / "bootstrap.log").read_text()
    assert "hosts version 5 holds 10.0.0.9 at compute-001's line, not this node's 10.0.0.6: not applied" in log
    assert "FAILED" not in log


def test_step_sync_starts_one_python_agent_from_the_bundle(fake, tmp_path):
    from tests.agent_support import SCRIPTS
    from tests.box import bundles
    tmp_path, _, env = fake
    answers(tmp_path, "0|")
    bundles.install(tmp_path / "opt", *bundles.build(SCRIPTS))
    script = (preamble(tmp_path) + f"HPCC_CURRENT={tmp_path}/opt/current\n" + AGENT_STATE.replace("HPCC_AGENT=1\nHPCC_API_ATTEMPTS=1\n", "") +
              'step_sync; first=$(cat /run/hpcc-sync.pid); step_sync; second=$(cat /run/hpcc-sync.pid)\n'
              'cmp -s "${BASH_SOURCE[0]}" /usr/local/sbin/hpcc-node && echo installed\n'
              f'(set -a; mapfile -t e </etc/hpcc/agent.env; env "${{e[@]}}" timeout 10 python3 -m hpcc_node.agent 2>{tmp_path}/direct.err); echo "direct rc=$?"\n'
              'kill -0 "$first" && [ "$first" = "$second" ] && echo "one agent"\n'
              'grep -q "^PYTHONPATH=.*/opt/current$" /etc/hpcc/agent.env && echo "from the bundle"\n'
              'kill "$first"')
    out = private_run(COMMON + ["identify", "ssh", "launch_env", "sync"], script, ctx_for(tmp_path), env,
                      over=["/run", "/usr/local/sbin"], overlay=["/etc"])
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.split("\n")[-5:-1] == ["installed", "direct rc=0", "one agent", "from the bundle"], out.stdout
    assert "already running" in (tmp_path / "direct.err").read_text()  # the lock turned it away
    assert out.stdout.count("started the node agent") == 1 and "node agent already running (pid" in out.stdout
    assert "agent 1 running bundle" in (tmp_path / "bootstrap.log").read_text()


# -- one pacer per node ----------------------------------------------------------------------------

def test_two_processes_of_a_node_share_one_pacer(fake):
    """The bootstrap and the agent call AWS through the same pacer: together, one call per interval."""
    tmp_path, bin_dir, env = fake
    tool(bin_dir, "aws", f"date +%s%3N >>{tmp_path}/stamps\n")
    ctx = ctx_for(tmp_path, api_interval_ms=300)
    calls3 = "for i in 1 2 3; do aws_retry sts get-caller-identity >/dev/null; done"
    out = run(COMMON, preamble(tmp_path) + f"({calls3}) & ({calls3}) & wait", ctx, env=env)
    assert out.returncode == 0, out.stderr
    stamps = sorted(int(s) for s in (tmp_path / "stamps").read_text().split())
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert len(stamps) == 6 and min(gaps) >= 300, gaps


def test_status_names_the_instance_and_the_applied_hosts_version(tmp_path):
    out = run(COMMON, preamble(tmp_path) + "HPCC_STEP=sync\nstatus_json ready true applied", ctx_for(tmp_path))
    status = json.loads(out.stdout)
    assert (status["instanceId"], status["hostsVersion"]) == ("i-0abc", 7) and re.fullmatch(r"i-\w+", status["instanceId"])
