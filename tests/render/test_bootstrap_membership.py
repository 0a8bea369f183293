"""Day 2 on the node, run for real against stand-ins: the settings parser, the one GetParameters read, the
identify step's bounded wait for the node's own hosts line, the membership agent's tick (applies a change
once, then nothing), its single instance, and one pacer shared by every process of a node."""

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcc_contract.settings import OPTIONAL, OPTIONAL_DEFAULTS, PATTERNS, REPEATED, SLURM_KEYS, SettingsError
from infra.render.node_settings import NodeSettings, parse, render, settings_value
from tests.facts.instance_data import MOTO_ACCOUNT, offline_facts
from tests.render.bootstrap_cases import configs, settings
from tests.render.bootstrap_fixtures import tool
from tests.render.bootstrap_shell import context, run
from tests.render.test_bootstrap_behaviour import private_run
from tests.render.test_bootstrap_steps import COMMON, calls, ctx_for, preamble, record_pacer_turns

HOSTS_PARAM, SETTINGS_PARAM = "/hpcc/llm/hosts", "/hpcc/llm/settings"
SETTINGS = settings()["p5-llm"]


# -- the settings, in Python -----------------------------------------------------------------------


def test_settings_render_and_parse_back_for_every_example():
    for stem, cfg in configs():
        text = settings_value(cfg.cluster, cfg.region, offline_facts(), MOTO_ACCOUNT)
        assert render(parse(text)) == text, stem


@pytest.mark.parametrize(
    "field,value",
    [
        ("mount_point", "/fsx;reboot"),
        ("login_user", "$(id)"),
        ("mpirun_options", "--x `id`"),
        ("fabric", (("FI_PROVIDER", "efa'"),)),
    ],
)
def test_the_program_refuses_a_settings_value_the_nodes_would_refuse(field, value):
    good = parse(SETTINGS)
    with pytest.raises(SettingsError, match=field.upper()):
        render(NodeSettings(**{**vars(good), field: value}))


# -- the settings, in bash -------------------------------------------------------------------------


def shell_settings(text: str, after: str = "") -> subprocess.CompletedProcess:
    required = " ".join(k for k in PATTERNS if k not in REPEATED | OPTIONAL)
    dump = (
        f"for v in {required}; do "
        'n=HPCC_$v; echo "$v=${!n}"; done; printf "FABRIC=%s\\n" "${HPCC_FABRIC[@]}"; '
        # The Slurm keys mean something with SCHEDULER=slurm only (a previous text's may linger otherwise).
        f"[ \"$HPCC_SCHEDULER\" != slurm ] || for v in SCHEDULER {' '.join(sorted(SLURM_KEYS))}; do "
        'n=HPCC_$v; echo "$v=${!n}"; done; '
        # Left out at its default (as the program renders it), so a text from before the key reads the same.
        f'[ "$HPCC_HEALTH_DIAG_LEVEL" = {OPTIONAL_DEFAULTS["HEALTH_DIAG_LEVEL"]} ] || '
        'echo "HEALTH_DIAG_LEVEL=$HPCC_HEALTH_DIAG_LEVEL"; '
        # Given with containers on only.
        '[ -z "$HPCC_IMAGE_CACHE_GIB" ] || echo "IMAGE_CACHE_GIB=$HPCC_IMAGE_CACHE_GIB"; '
        'for k in ${HPCC_AUTHORIZED_KEY[@]+"${HPCC_AUTHORIZED_KEY[@]}"}; do echo "AUTHORIZED_KEY=$k"; done'
    )
    return run(["settings"], f"apply_settings {shlex.quote(text)}; rc=$?; {after}\n{dump}", context())


def test_bash_reads_the_settings_the_program_renders_as_python_does():
    texts = dict(settings())
    texts["p5-llm, no DCGM at boot"] = texts["p5-llm"] + "HEALTH_DIAG_LEVEL=0\n"
    for stem, text in texts.items():
        out = shell_settings(text)
        assert out.returncode == 0, out.stderr
        assert parse(out.stdout) == parse(text), stem
    assert parse(texts["p5-llm, no DCGM at boot"]).health_diag_level == 0


@pytest.mark.parametrize(
    "line,why",
    [
        ("REBOOT=1", "unknown key REBOOT"),
        ("SLOTS=08", "SLOTS="),  # bash arithmetic would take it for octal
        ("SLOTS=0", "SLOTS="),
        ("MOUNT_POINT=/fsx$(touch {marker})", "MOUNT_POINT="),
        ("FABRIC=FI_PROVIDER=efa;touch {marker}", "FABRIC="),
        ("LOGIN_USER=ubuntu root", "LOGIN_USER="),
        ("MPIRUN_OPTIONS=--x `touch {marker}`", "MPIRUN_OPTIONS="),
        ("+NODE_COUNT=3", "NODE_COUNT is given twice"),
        ("just words", "is not KEY=VALUE"),
    ],
)
def test_bash_refuses_settings_with_an_unknown_key_or_a_bad_value_and_keeps_the_old_ones(tmp_path, line, why):
    """A line replaces the program's line of its key; one starting with + is added."""
    marker = tmp_path / "ran"
    line = line.format(marker=marker)
    key = line.lstrip("+").split("=", 1)[0]
    kept = [old for old in SETTINGS.splitlines() if line.startswith("+") or not old.startswith(key + "=")]
    text = "\n".join(kept + [line.lstrip("+")]) + "\n"
    out = run(
        ["settings"],
        f"{preamble(tmp_path)}old=$HPCC_SLOTS\nif apply_settings {shlex.quote(text)}; then echo accepted; fi\n"
        '[ "$HPCC_SLOTS" = "$old" ] && echo kept',
        context(),
    )
    assert out.stdout.split() == ["kept"] and why in out.stderr, (out.stdout, out.stderr)
    assert not marker.exists()  # a value never runs as shell


def test_bash_refuses_settings_that_lack_a_key():
    text = "".join(line + "\n" for line in SETTINGS.splitlines() if not line.startswith("JOIN_TIMEOUT_MINUTES="))
    out = run(["settings"], f"apply_settings {shlex.quote(text)} || echo refused", context())
    assert out.stdout.strip() == "refused" and "JOIN_TIMEOUT_MINUTES is missing" in out.stderr


# -- identify: the settings, the name, the membership ------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
ARN = "arn:aws:ec2:us-east-1:123456789012:instance/"


def settings_answer(settings_text: str = SETTINGS) -> str:
    """What `aws ssm get-parameters --query 'Parameters[].[Name,Version,Value]' --output json` prints."""
    return json.dumps([[SETTINGS_PARAM, 1, settings_text]], indent=4)


def members(generation: int, nodes: list[tuple[str, str, str]], head: str = "10.0.0.4") -> str:
    """The controller's membership.json: (name, ip, instance) nodes, booting."""
    return json.dumps(
        {
            "format": 1,
            "generation": generation,
            "groups": {},
            "bundle": {},
            "head": {"name": "head", "ip": head, "instance": "i-0ead"},
            "nodes": [
                {"name": n, "group": n.rsplit("-", 1)[0], "ip": ip, "instance": i, "state": "booting"}
                for n, ip, i in nodes
            ],
        }
    )


def cloud(tmp_path, bin_dir, tags: list[str], memberships: list[str | None], settings_text: str = SETTINGS) -> None:
    """A stand-in `aws` for identify: the settings, the account, the instance's hpcc:node tag (one answer a call,
    the last repeating; "" none yet), membership.json (one a call, None: NoSuchKey) and the statuses it puts."""
    (tmp_path / "settings.json").write_text(settings_answer(settings_text))
    (tmp_path / "tags").write_text("".join(t + "\n" for t in tags))
    for i, doc in enumerate(memberships):
        if doc is not None:
            (tmp_path / f"membership.{i}").write_text(doc)
    tool(
        bin_dir,
        "aws",
        f"""echo "$*" >>{tmp_path}/calls
count() {{ grep -c "^$1" {tmp_path}/calls; }}
case "$1 $2" in
  "ssm get-parameters") cat {tmp_path}/settings.json ;;
  "sts get-caller-identity") echo 123456789012 ;;
  "ec2 describe-tags") n=$(count "ec2 describe-tags"); t=$(sed -n "${{n}}p" {tmp_path}/tags)
                       [ $n -le $(wc -l <{tmp_path}/tags) ] || t=$(tail -n1 {tmp_path}/tags)
                       echo "${{t:-None}}" ;;
  "s3api get-object") n=$(( $(count "s3api get-object") - 1 ))
                      [ $n -lt {len(memberships)} ] || n={len(memberships) - 1}
                      [ -f {tmp_path}/membership.$n ] || {{ echo "An error occurred (NoSuchKey) when calling the" \\
                        "GetObject operation: The specified key does not exist." >&2; exit 254; }}
                      cp {tmp_path}/membership.$n "${{@: -1}}"; echo '{{"ETag": "x"}}' ;;
  "s3api put-object") while [ $# -gt 0 ]; do [ "$1" != --body ] || {{ cat "$2"; echo; }} >>{tmp_path}/statuses
                        [ "$1" != --key ] || echo "$2" >>{tmp_path}/status-keys; shift; done ;;
  *) echo "unexpected aws $*" >&2; exit 1 ;;
esac
""",
    )


def identify(tmp_path, env, script="identify_node", **extra):
    ctx = ctx_for(tmp_path, first_interval_ms=100, first_poll_seconds=1)
    body = (
        preamble(tmp_path)
        .replace("HPCC_INSTANCE_ID=i-0abc\n", "")
        .replace("HPCC_NODE=compute-001\n", "")
        .replace("HPCC_IP=10.0.0.6\n", "")
        .replace("HPCC_ACCOUNT=123456789012\n", "")
        + 'fail() { echo "FAIL: $*"; exit 1; }\n'
        + short_join_timeout()
        + "HPCC_NODE=unknown\n"
        + script
    )
    # hosts.py from this tree; S3 through the stand-in `aws` above, not in process (retry.sh.j2's aws_retry)
    env = {**env, "HPCC_PY_PATH": str(ROOT), "HPCC_AWS_CLIENTS": "cli", **extra}
    return run(COMMON + ["identify"], body, ctx, env=env)


def short_join_timeout() -> str:
    """The settings' join timeout is at least a minute; a test waits seconds: 0 once the settings are applied."""
    return (
        'eval "$(declare -f apply_settings | sed 1s/apply_settings/real_apply_settings/)"\n'
        'apply_settings() { real_apply_settings "$@" && HPCC_JOIN_TIMEOUT_MINUTES=${JOIN:-1}; }\n'
    )


FAST = SETTINGS.replace("POLL_SECONDS=5", "POLL_SECONDS=1")
OUTSIDE_EC2 = {"HPCC_INSTANCE_ID": "i-0b0b", "HPCC_NODE_IP": "10.0.0.6"}


def test_a_node_waits_for_its_name_then_for_the_membership_to_list_it_then_goes_on(fake):
    """Outside EC2 (the box): the name from DescribeTags of HPCC_INSTANCE_ID; the membership from the state bucket,
    whose previous generation may list the name on the predecessor."""
    tmp_path, bin_dir, env = fake
    old = members(3, [("gpu-000", "10.0.0.5", "i-0a"), ("gpu-001", "10.0.0.9", "i-0dd")])
    new = members(
        4, [("gpu-000", "10.0.0.5", "i-0a"), ("gpu-001", "10.0.0.6", "i-0b0b"), ("cpu-1000", "10.0.0.7", "i-0c")]
    )
    cloud(tmp_path, bin_dir, ["", "", "gpu-001"], [None, old, new], FAST)
    out = identify(tmp_path, env, **OUTSIDE_EC2)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("waiting for the controller to name i-0b0b") == 2
    assert out.stdout.count("waiting for the membership to list gpu-001 as i-0b0b") == 2
    assert "this is gpu-001 (10.0.0.6, i-0b0b)" in out.stdout and "membership generation 4" in out.stdout
    c = calls(tmp_path)
    assert (
        c[0].startswith(f"ssm get-parameters --names {SETTINGS_PARAM} ")
        and c[1] == "sts get-caller-identity --query Account --output text"
    )
    assert "ec2 describe-tags --filters Name=resource-id,Values=i-0b0b Name=key,Values=hpcc:node" in c[2]
    assert [x for x in c if x.startswith("s3api get-object")][0].startswith(
        "s3api get-object --bucket hpcc-llm-state-123456789012 --key membership.json "
    )
    out = identify(
        tmp_path,
        env,
        script='identify_node >/dev/null; printf "%s\\n" "${HPCC_NAMES[*]}" "${HPCC_HOSTS[*]}" "$HPCC_STATUS_KEY"',
        **OUTSIDE_EC2,
    )
    assert out.stdout.splitlines()[-3:] == [
        "head cpu-1000 gpu-000 gpu-001",
        "10.0.0.4 10.0.0.7 10.0.0.5 10.0.0.6",
        f"status/{ARN}i-0b0b.json",
    ], out.stdout + out.stderr


def test_a_node_never_listed_fails_after_the_join_timeout_naming_its_instance(fake):
    tmp_path, bin_dir, env = fake
    cloud(tmp_path, bin_dir, ["gpu-001"], [members(3, [("gpu-001", "10.0.0.9", "i-0dd")])], FAST)
    start = time.time()
    out = identify(tmp_path, env, JOIN="0", **OUTSIDE_EC2)
    assert out.returncode == 1 and time.time() - start < 20
    assert "FAIL: after 0 min the membership still does not list gpu-001 as i-0b0b" in out.stdout, out.stdout


def test_a_membership_listing_this_instance_at_another_address_is_refused(fake):
    tmp_path, bin_dir, env = fake
    cloud(tmp_path, bin_dir, ["gpu-001"], [members(3, [("gpu-001", "10.0.0.9", "i-0b0b")])], FAST)
    out = identify(tmp_path, env, **OUTSIDE_EC2)
    assert out.returncode == 1 and "lists gpu-001 at 10.0.0.9, not at this node's 10.0.0.6" in out.stdout


def test_the_head_starts_alone_its_controller_publishes_the_membership(fake):
    tmp_path, bin_dir, env = fake
    cloud(tmp_path, bin_dir, ["head"], [None], FAST)
    out = identify(
        tmp_path,
        env,
        script='identify_node; printf "%s\\n" "${HPCC_NAMES[*]}"',
        HPCC_INSTANCE_ID="i-0ead",
        HPCC_NODE_IP="10.0.0.4",
    )
    assert out.returncode == 0 and out.stdout.splitlines()[-1] == "head", out.stdout + out.stderr
    assert sum(c.startswith("s3api get-object") for c in calls(tmp_path)) == 1  # one look, no wait
    # its bootstrap run again: from the membership its controller published, so it rewrites nothing
    script = 'identify_node; printf "%s\\n" "${HPCC_NAMES[*]} $HPCC_HOSTS_VERSION"'
    cloud(tmp_path, bin_dir, ["head"], [members(7, [("compute-000", "10.0.0.9", "i-09")])], FAST)
    out = identify(tmp_path, env, script=script, HPCC_INSTANCE_ID="i-0ead", HPCC_NODE_IP="10.0.0.4")
    assert out.returncode == 0 and out.stdout.splitlines()[-1] == "head compute-000 7", out.stdout + out.stderr
    # a membership of another head (this one replaced it): alone again, until its controller publishes
    out = identify(tmp_path, env, script=script, HPCC_INSTANCE_ID="i-0eee", HPCC_NODE_IP="10.0.0.4")
    assert out.returncode == 0 and out.stdout.splitlines()[-1] == "head 0", out.stdout + out.stderr


def test_the_name_instance_and_account_come_from_instance_metadata(fake):
    tmp_path, bin_dir, env = fake
    tool(
        bin_dir,
        "curl",
        'case "$*" in *api/token*) echo TOKEN ;; *tags/instance/hpcc:node) echo gpu-001 ;;'
        ' *instance-id) echo i-0abcd ;; *local-ipv4) echo 10.0.0.6 ;;'
        ' *identity-credentials/ec2/info) echo \'{"Code": "Success", "AccountId": "210987654321"}\' ;;'
        ' *) exit 22 ;; esac\n',
    )
    cloud(tmp_path, bin_dir, ["never asked"], [members(2, [("gpu-001", "10.0.0.6", "i-0abcd")])])
    out = identify(tmp_path, env)
    assert out.returncode == 0 and "this is gpu-001 (10.0.0.6, i-0abcd)" in out.stdout, out.stdout + out.stderr
    c = calls(tmp_path)
    assert not any(x.startswith(("ec2 describe-tags", "sts")) for x in c)
    assert any("--bucket hpcc-llm-state-123456789012 " in x for x in c)  # the settings' STATE_BUCKET
    tool(
        bin_dir,
        "curl",
        'case "$*" in *api/token*) echo TOKEN ;; *tags/instance/hpcc:node) echo "../etc" ;; *) echo x ;; esac\n',
    )
    out = identify(tmp_path, env)
    assert out.returncode == 1 and "cannot tell this node's instance id" in out.stdout
    tool(
        bin_dir,
        "curl",
        'case "$*" in *api/token*) echo TOKEN ;; *tags/instance/hpcc:node) echo "../etc" ;;'
        ' *instance-id) echo i-0abcd ;; *local-ipv4) echo 10.0.0.6 ;; *) exit 22 ;; esac\n',
    )
    out = identify(tmp_path, env)
    assert out.returncode == 1 and "is not head or <group>-NNN" in out.stdout, out.stdout


def test_the_state_bucket_is_the_settings_else_the_programs_name_on_both_sides():
    from hpcc_node.settings import state_names

    for text in ("", "STATE_BUCKET=my-bucket\n"):
        out = run(
            ["status"],
            f"HPCC_ACCOUNT=123456789012\nHPCC_STATE_BUCKET={shlex.quote(text[13:].strip())}\nstate_bucket",
            context(cluster="llm"),
        )
        assert out.stdout.strip() == state_names(text, "llm", "123456789012")[0], out.stderr


def test_the_status_key_is_the_controllers_and_the_loaders():
    from hpcc_node.controller import membership

    out = run(["status"], "HPCC_ACCOUNT=123456789012\nHPCC_INSTANCE_ID=i-0abc\nstatus_key", context())
    key = membership.status_key(membership.instance_arn("aws", "us-east-1", "123456789012", "i-0abc"))
    assert out.stdout.strip() == key and membership.key_instance(key) == "i-0abc"


def test_the_hosts_renderer_lists_the_head_then_the_nodes_in_name_order_with_holes(tmp_path):
    from hpcc_node import hosts

    doc = json.loads(
        members(
            9,
            [
                ("gpu-1000", "10.0.0.9", "i-09"),
                ("gpu-999", "10.0.0.8", "i-08"),
                ("cpu-002", "10.0.0.7", "i-07"),
                ("gpu-000", "10.0.0.6", "i-06"),
            ],
        )
    )
    doc["nodes"].append({"name": "gpu-001", "group": "gpu", "ip": "10.0.0.5", "instance": "i-05", "state": "failed"})
    assert hosts.hosts_text(doc) == (
        "head 10.0.0.4\ncpu-002 10.0.0.7\ngpu-000 10.0.0.6\ngpu-999 10.0.0.8\ngpu-1000 10.0.0.9\n"
    )
    assert hosts_schema_ok(hosts.hosts_text(doc))
    assert hosts.lists(doc, "gpu-999", "i-08") and not hosts.lists(doc, "gpu-001", "i-05")  # failed: not listed
    assert hosts.lists(doc, "head", "i-0ead") and not hosts.lists(doc, "gpu-999", "i-07")
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    out = subprocess.run(
        [sys.executable, "-m", "hpcc_node.hosts", str(path), "gpu-999", "i-08"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0 and out.stdout == "9\n" + hosts.hosts_text(doc)
    out = subprocess.run(
        [sys.executable, "-m", "hpcc_node.hosts", str(path), "gpu-999", "i-07"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 3 and "does not list gpu-999 as i-07" in out.stderr
    path.write_text('{"generation": 1}')
    out = subprocess.run(
        [sys.executable, "-m", "hpcc_node.hosts", str(path), "gpu-999", "i-07"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 2 and "no head" in out.stderr


def hosts_schema_ok(text: str) -> bool:
    from hpcc_contract.hosts import hosts_problem

    return hosts_problem(text, "10.0.0.0/16") is None


# -- apply-membership: the role script's part of the node agent (hpcc_node/agent.py decides when) ---------

AGENT_STATE = (
    "mkdir -p /etc/hpcc  # as the bootstrap does "
    "first\nHPCC_NODE=compute-001\nHPCC_INSTANCE_ID=i-0abc\nHPCC_IP=10.0.0.6\nHPCC_APPLIED_VERSION=1\n"
    "HPCC_AGENT=1\nHPCC_API_ATTEMPTS=1\nwrite_state >/dev/null\n"
)
SHOW = (
    'echo "--- $1"; cat /etc/hpcc/hostfile 2>/dev/null || true; cat /etc/hpcc/node\n'
    'echo "wrote=$(grep -c "wrote " "$LOG" || true)"\n'
    'echo "trusted=$(grep -ow 10.0.0.7 /etc/ssh/ssh_config.d/50-hpcc.conf 2>/dev/null | head -1)"'
)


def answers(tmp_path, *lines: str) -> None:
    """The stand-in `aws` (tests/render/test_bootstrap_steps.py fake) answers one `rc|output` per call."""
    (tmp_path / "answers").write_text("".join(line.replace("\n", " ") + "\n" for line in lines))


def hosts_text(ips: list[str], names: list[str] | None = None) -> str:
    """What hpcc_node/hosts.py renders: the head, then compute-000 ... (or `names`)."""
    names = names or ["head"] + [f"compute-{i:03d}" for i in range(len(ips) - 1)]
    return "".join(f"{n} {ip}\n" for n, ip in zip(names, ips, strict=False))


def apply_runs(tmp_path, env, reads: list[tuple[int, str, str]]):
    """apply-membership once per (generation, hosts text, settings) the agent read, as `roles/<role>.sh
    apply-membership`."""
    ctx = ctx_for(tmp_path)
    # as the agent passes them: in the environment (the hosts text in a file), which the script's start (identify's
    # HPCC_READ_*="") cannot reset
    runs = "".join(
        f"printf %s {shlex.quote(h)} >{tmp_path}/apply-hosts.{i}\n"
        f"(export HPCC_APPLY_VERSION={v} HPCC_APPLY_HOSTS_FILE={tmp_path}/apply-hosts.{i} "
        f"HPCC_APPLY_SETTINGS={shlex.quote(text)}; HPCC_READ_HOSTS='' HPCC_READ_VERSION=0 HPCC_READ_SETTINGS=''; "
        f"apply_membership) && echo \"run {i} ok\" >&3 || "
        f"echo \"run {i} rc=$?\" >&3\nshow {i} >&3\n"
        for i, (v, h, text) in enumerate(reads)
    )
    # HPCC_SKIP_STEPS=imds: the firewall would touch this machine's own (tests/render/test_imds.py runs it in a netns)
    # step_slurm (tests/render/test_bootstrap_slurm.py) stands in: it would start this machine's munge
    script = (
        preamble(tmp_path) + f"HPCC_SKIP_STEPS=imds\nLOG={tmp_path}/bootstrap.log\nshow() {{ {SHOW}; }}\nexec 3>&1\n"
        "step_slurm() { log \"slurm followed: $HPCC_SCHEDULER\"; }\nuse_step sync\n" + AGENT_STATE + runs
    )
    return private_run(COMMON + ["identify", "ssh", "launch_env", "sync"], script, ctx, env, overlay=["/etc"])


def test_apply_membership_writes_what_changed_and_leaves_the_status_to_the_agent(fake):
    tmp_path, _, env = fake
    answers(tmp_path, "0|")
    four = ["10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.0.7"]
    text = hosts_text(four)
    out = apply_runs(
        tmp_path, env, [(2, text, SETTINGS), (2, text, SETTINGS), (2, text, SETTINGS.replace("SLOTS=8", "SLOTS=16"))]
    )
    assert out.returncode == 0, out.stdout + out.stderr
    first, second, third = out.stdout.split("--- ")[1:]
    assert "run 0 ok" in out.stdout and [f"{ip} slots=8" for ip in four[1:]] == first.splitlines()[1:4]
    assert "HOSTS_VERSION=2" in first and "trusted=10.0.0.7" in first  # the new peer is trusted by IP

    def wrote(chunk: str) -> str:
        return next(line for line in chunk.splitlines() if line.startswith("wrote="))

    assert wrote(second) == wrote(first) != wrote(third)  # the same membership again writes nothing
    assert [f"{ip} slots=16" for ip in four[1:]] == third.splitlines()[1:4]  # a settings change is applied
    assert not any("put-object" in c for c in calls(tmp_path))  # the agent reports, once
    log = (tmp_path / "bootstrap.log").read_text()
    assert (
        "[sync] applied membership generation 2: 3 compute node(s)" in log and log.count("slurm followed: slurm") == 3
    )


def test_apply_membership_never_applies_a_list_without_this_node_nor_fails_it(fake):
    tmp_path, _, env = fake
    answers(tmp_path, "0|")
    out = apply_runs(
        tmp_path,
        env,
        [
            (5, hosts_text(["10.0.0.4", "10.0.0.5", "10.0.0.9"]), SETTINGS),
            (6, hosts_text(["10.0.0.4", "10.0.0.5"]), SETTINGS),
        ],
    )
    assert "run 0 rc=1" in out.stdout and "run 1 rc=1" in out.stdout, out.stdout + out.stderr
    assert calls(tmp_path) == [] and "HOSTS_VERSION=1" in out.stdout  # nothing applied, nothing reported
    log = (tmp_path / "bootstrap.log").read_text()
    assert "membership generation 5 lists 10.0.0.9 as compute-001, not this node's 10.0.0.6: not applied" in log
    assert "membership generation 6 lists nothing as compute-001" in log
    assert "FAILED" not in log


def test_step_sync_starts_one_python_agent_from_the_bundle(fake, tmp_path):
    from tests.box import bundles
    from tests.node.agent_support import SCRIPTS

    tmp_path, _, env = fake
    answers(tmp_path, "0|")
    bundles.install(tmp_path / "opt", *bundles.build(SCRIPTS))
    script = (
        preamble(tmp_path)
        + f"HPCC_CURRENT={tmp_path}/opt/current\n"
        + AGENT_STATE.replace("HPCC_AGENT=1\nHPCC_API_ATTEMPTS=1\n", "")
        + 'step_sync; first=$(cat /run/hpcc-sync.pid); step_sync; second=$(cat /run/hpcc-sync.pid)\n'
        'cmp -s "${BASH_SOURCE[0]}" /usr/local/sbin/hpcc-node && echo installed\n'
        f'(set -a; mapfile -t e </etc/hpcc/agent.env; env "${{e[@]}}" timeout 10 python3 -m hpcc_node.agent '
        f'2>{tmp_path}/direct.err); echo "direct rc=$?"\n'
        'kill -0 "$first" && [ "$first" = "$second" ] && echo "one agent"\n'
        'grep -q "^PYTHONPATH=.*/opt/current$" /etc/hpcc/agent.env && echo "from the bundle"\n'
        'kill "$first"'
    )
    out = private_run(
        COMMON + ["identify", "ssh", "launch_env", "sync"],
        script,
        ctx_for(tmp_path),
        env,
        over=["/run", "/usr/local/sbin"],
        overlay=["/etc"],
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.split("\n")[-5:-1] == ["installed", "direct rc=0", "one agent", "from the bundle"], out.stdout
    assert "already running" in (tmp_path / "direct.err").read_text()  # the lock turned it away
    assert out.stdout.count("started the node agent") == 1 and "node agent already running (pid" in out.stdout
    assert "agent 1 running bundle" in (tmp_path / "bootstrap.log").read_text()


# -- one pacer per node ----------------------------------------------------------------------------


def test_two_processes_of_a_node_share_one_pacer(fake):
    """The bootstrap and the agent call AWS through the same pacer: together, one call per interval."""
    tmp_path, bin_dir, env = fake
    tool(bin_dir, "aws", "true\n")
    ctx = ctx_for(tmp_path, api_interval_ms=300)
    record = record_pacer_turns(tmp_path / "stamps")
    calls3 = "for i in 1 2 3; do aws_retry sts get-caller-identity >/dev/null; done"
    out = run(COMMON, preamble(tmp_path) + record + f"({calls3}) & ({calls3}) & wait", ctx, env=env)
    assert out.returncode == 0, out.stderr
    stamps = sorted(int(s) for s in (tmp_path / "stamps").read_text().split())
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    assert len(stamps) == 6 and min(gaps) >= 300, gaps


def test_status_names_the_instance_and_the_applied_hosts_version(tmp_path):
    out = run(COMMON, preamble(tmp_path) + "HPCC_STEP=sync\nstatus_json ready true applied", ctx_for(tmp_path))
    status = json.loads(out.stdout)
    assert (status["instanceId"], status["hostsVersion"]) == ("i-0abc", 7) and re.fullmatch(
        r"i-\w+", status["instanceId"]
    )


# -- the head's controller -------------------------------------------------------------------------


def test_the_head_starts_one_controller_with_its_identity_and_the_boxs_timers(fake):
    """Without systemd (the box) a supervised daemon under a lock, started once; its environment names the head's
    instance and address, the account and the scheduler, and passes HPCC_CONTROLLER_* timers on."""
    tmp_path, bin_dir, env = fake
    tool(
        bin_dir,
        "python3",
        'if [ "$1" = -c ]; then exit 0; fi\n'  # `import boto3` works: this python3 runs the controller
        f'echo "$PPID $$" >>{tmp_path}/pids\n'  # its supervisor's and its own, to stop them
        f'echo "$HPCC_INSTANCE_ID $HPCC_NODE_IP $HPCC_CONTROLLER_LOOP_SECONDS $*" >>{tmp_path}/started\n'
        'exec sleep 30\n',
    )
    ctx = ctx_for(tmp_path, role="head")
    script = (
        preamble(tmp_path) + "HPCC_NODE=head\nHPCC_IP=10.0.0.4\nHPCC_CURRENT=/opt/hpcc/current\n"
        "HPCC_CONTROLLER_LOCK=" + str(tmp_path / "ctl.lock") + "\n"
        "start_controller; start_controller; sleep 1\ncat /etc/hpcc/controller.env\n"
        f'kill $(cat {tmp_path}/pids) || true'
    )
    out = private_run(
        COMMON + ["identify", "sync"],
        script,
        ctx,
        {**env, "HPCC_CONTROLLER_LOOP_SECONDS": "5"},
        over=["/run", "/var/log"],
        overlay=["/etc"],
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("started the controller") == 1 and "controller already running" in out.stdout
    lines = out.stdout.splitlines()
    for line in (
        "HPCC_CLUSTER=llm",
        "HPCC_INSTANCE_ID=i-0abc",
        "HPCC_NODE_IP=10.0.0.4",
        "HPCC_ACCOUNT=123456789012",
        "HPCC_SCHEDULER=" + ctx.settings.scheduler,
        "HPCC_CONTROLLER_LOOP_SECONDS=5",
        "PYTHONPATH=/opt/hpcc/current",
    ):
        assert line in lines, line
    assert (tmp_path / "started").read_text().split() == ["i-0abc", "10.0.0.4", "5", "-m", "hpcc_node.controller"]


def test_a_head_without_boto3_gets_an_environment_with_the_pin_else_says_its_calls_go_through_the_cli(fake):
    """controller_python: python3 without boto3 -> a venv with the bundle's hash-pinned wheels
    (hpcc_node/controller/clients.py HEAD_WHEELS, pip's --require-hashes); where pip cannot install them, python3
    itself, said in the log."""
    tmp_path, bin_dir, env = fake
    venv = tmp_path / "controller-env"
    tool(
        bin_dir,
        "python3",
        f'echo "$*" >>{tmp_path}/python3.calls\n'
        'case "$1 $2" in\n'
        '  "-c import boto3") exit 1 ;;\n'
        '  "-m hpcc_node.controller.clients") echo "boto3==1.0.0 --hash=sha256:00" ;;\n'
        f'  "-m venv") mkdir -p "$3/bin"; cp {bin_dir}/venv-python3 "$3/bin/python3" ;;\n'
        "esac\n",
    )
    for pip_works in (True, False):
        tool(
            bin_dir,
            "venv-python3",
            f'echo "$*" >>{tmp_path}/venv.calls\n'
            'if [ "$1" = -c ]; then exit 1; fi\n'  # the new environment has no boto3 before pip
            f'for a; do [ ! -f "$a" ] || cp "$a" {tmp_path}/pins; done\n'  # the requirements file pip is given
            + ("exit 0\n" if pip_works else "exit 1\n"),
        )
        script = preamble(tmp_path) + f"HPCC_CURRENT=/opt/hpcc/current\nHPCC_CONTROLLER_ENV={venv}\ncontroller_python\n"
        out = run(COMMON + ["identify", "sync"], script, ctx_for(tmp_path, role="head"), env=env)
        assert out.returncode == 0, out.stderr
        chosen = out.stdout.strip().splitlines()[-1]
        calls = (tmp_path / "venv.calls").read_text()
        assert "-m pip install --quiet --require-hashes --no-deps --only-binary=:all: -r " in calls
        assert (tmp_path / "pins").read_text() == "boto3==1.0.0 --hash=sha256:00\n"  # what the bundle's module printed
        if pip_works:
            assert chosen == f"{venv}/bin/python3"
        else:
            assert chosen == str(bin_dir / "python3")
            assert "could not install boto3 (hash-pinned)" in out.stdout + out.stderr
        (tmp_path / "venv.calls").unlink()
