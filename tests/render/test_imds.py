"""Only root reaches the instance metadata service (issue 12 item 4; docs/security.md, "Instance metadata: root
only"). In the plan: hop limit 1 on the launch templates and on every instance, 2 only with
`security.imdsForContainers`, and the change is made in place (no node replaced). On a node, for real: the
bootstrap's rule (templates/steps/imds.sh.j2, rendered) in a network namespace whose IMDS address is a veth hop
away with an HTTP listener behind it: root gets through, an unprivileged user is refused, a listed user gets
through, a rerun adds no rule, the boot script alone restores it, and a settings change is followed."""

from __future__ import annotations

import copy
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from infra.config.parse import ConfigError, parse
from infra.config.stackfile import read_raw
from infra.plan.previous import PreviousPlan
from infra.plan.runner import plan_config
from infra.program.components.compute import metadata_options
from infra.render.node_settings import parse as parse_settings
from infra.render.node_settings import settings_value
from tests.facts.instance_data import MOTO_ACCOUNT, offline_facts
from tests.ops import support as ops_support
from tests.render.bootstrap_cases import settings
from tests.render.bootstrap_shell import context, partial, run, settings_shell

ROOT = Path(__file__).resolve().parents[2]
INSTANCE, LT = "aws:ec2/instance:Instance", "aws:ec2/launchTemplate:LaunchTemplate"
BASE = {
    "name": "demo",
    "headNode": {"instanceType": "c5n.18xlarge"},
    "compute": {"instanceType": "c6i.16xlarge", "count": 2},
}
NOBODY, STRANGER = 65534, 65533  # `nobody`, and a uid no user has
LISTED, LISTED_UID = "hpccuser", 4242  # a person's account, in the node namespace's own /etc/passwd (on_node)


# --- the config --------------------------------------------------------------------------------------------


def problems(security) -> list[tuple[str, str]]:
    try:
        parse("us-east-1", dict(BASE, security=security))
    except ConfigError as e:
        return e.problems
    return []


@pytest.mark.parametrize(
    "security,field,words",
    [
        ({"imdsForUsers": ["root"]}, "cluster.security.imdsForUsers", "root always reaches"),
        ({"imdsForUsers": ["ubuntu", "ubuntu"]}, "cluster.security.imdsForUsers", "'ubuntu' is listed twice"),
        ({"imdsForUsers": ["Bob; id"]}, "cluster.security.imdsForUsers", "not a Linux user name"),
        ({"imdsForUsers": ["u"] * 11}, "cluster.security.imdsForUsers", "at most 10"),
        ({"imdsForContainers": "yes please"}, "cluster.security.imdsForContainers", "boolean"),
        ({"imdsForEveryone": True}, "cluster.security.imdsForEveryone", "unknown key"),
    ],
)
def test_bad_security_settings_are_refused_naming_the_field(security, field, words):
    found = problems(security)
    assert len(found) == 1 and found[0][0] == field and words in found[0][1], found


def test_metadata_options_are_imdsv2_with_one_hop_unless_containers_are_let_in():
    default = metadata_options(parse("us-east-1", BASE).cluster)
    opted = metadata_options(parse("us-east-1", dict(BASE, security={"imdsForContainers": True})).cluster)
    assert (default["http_put_response_hop_limit"], opted["http_put_response_hop_limit"]) == (1, 2)
    assert default["http_tokens"] == opted["http_tokens"] == "required"
    assert "http_protocol_ipv6" not in default  # AWS's default (disabled): the rule covers IPv4 only


@pytest.mark.parametrize(
    "options,words",
    [
        ({"httpTokens": "required", "httpPutResponseHopLimit": 3}, "httpPutResponseHopLimit is 3; at most 2"),
        ({"httpTokens": "required", "httpProtocolIpv6": "enabled"}, "not fd00:ec2::254"),
    ],
)
def test_the_policy_refuses_imds_that_reaches_past_the_nodes_rule(options, words):
    from policy import node_rules, records

    for rtype in (records.LT, records.INSTANCE):
        assert any(words in m for m in node_rules.imdsv2_resource(rtype, {"metadataOptions": options})), rtype
    for hops in (1, 2):
        assert (
            node_rules.imdsv2_resource(
                records.LT, {"metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": hops}}
            )
            == []
        )


# --- the settings the nodes read ----------------------------------------------------------------------------


def test_listed_users_reach_the_nodes_through_the_settings_and_an_unlisted_cluster_keeps_its_text():
    plain = parse("us-east-1", BASE).cluster
    listed = parse("us-east-1", dict(BASE, security={"imdsForUsers": ["ubuntu", "alice"]})).cluster
    before, after = (
        settings_value(plain, "us-east-1", offline_facts(), MOTO_ACCOUNT),
        settings_value(listed, "us-east-1", offline_facts(), MOTO_ACCOUNT),
    )
    assert "IMDS_USER" not in before  # agents that predate the key do not see it unless it is used
    assert after == before + "IMDS_USER=ubuntu\nIMDS_USER=alice\n"
    assert parse_settings(after).imds_users == ("ubuntu", "alice")
    out = run(["settings"], f"apply_settings {shlex.quote(after)}\nprintf '%s\\n' \"${{HPCC_IMDS_USER[@]}}\"")
    assert out.returncode == 0 and out.stdout.split() == ["ubuntu", "alice"], out.stderr


def test_the_bootstrap_applies_the_rule_after_identify_and_before_anyones_key_is_installed():
    from infra.render.userdata import render

    main = render(context()).split("\nmain() {", 1)[1]
    order = [
        main.index(s)
        for s in (
            "identify_node",
            "run_step os ",
            "run_step imds ",
            "run_step ssh ",
            "run_step launch-env ",
            "run_step sync ",
        )
    ]
    assert order == sorted(order)


def test_the_agent_reapplies_the_rule_with_the_settings_users_unless_the_step_is_skipped(tmp_path):
    from tests.render.test_bootstrap_behaviour import private_run
    from tests.render.test_bootstrap_steps import COMMON, ctx_for

    text = settings()["p5-llm"] + f"IMDS_USER={LISTED}\n"
    script = (
        f"mkdir -p /etc/hpcc\nexec 3>&1\nimds_firewall() {{ echo \"FIREWALL [$*]\" >&3; }}\nHPCC_NAMES=(head "
        "compute-000)\nHPCC_HOSTS=(10.0.0.4 10.0.0.5)\nHPCC_NODE=head\n"
        f"HPCC_IP=10.0.0.4\napply_settings {shlex.quote(text)}\nwrite_membership >/dev/null\n"
        "HPCC_SKIP_STEPS=imds write_membership >/dev/null\n"
    )
    out = private_run(COMMON + ["identify", "ssh", "launch_env"], script, ctx_for(tmp_path), None, overlay=["/etc"])
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"FIREWALL [{LISTED}]"]


# --- the plan, and day 2 ------------------------------------------------------------------------------------


def small(**security) -> dict:
    config = copy.deepcopy(read_raw(ROOT / "examples" / "c6i-oneccl.yaml"))
    config["hpcc:cluster"]["compute"]["count"] = 1
    if security:
        config["hpcc:cluster"]["security"] = security
    return config


def hop_limits(result) -> dict[str, int]:
    return {
        r["name"]: r["inputs"]["metadataOptions"]["httpPutResponseHopLimit"]
        for r in result.resources
        if r["type"] in (INSTANCE, LT)
    }


@pytest.fixture(scope="module")
def first_up(tmp_path_factory):
    return ops_support.first_up(tmp_path_factory, small())


def test_every_template_and_instance_plans_hop_limit_one(first_up):
    limits = hop_limits(first_up[0])
    assert len(limits) == 3 and set(limits.values()) == {1}, limits  # 2 templates and the head (the controller
    # launches the group's nodes from its template)


def test_letting_containers_in_raises_the_hop_limit_in_place_and_replaces_nothing(first_up):
    result = plan_config(small(imdsForContainers=True), previous=PreviousPlan.load(first_up[1]))
    assert set(hop_limits(result).values()) == {2}
    assert [c for c in result.changes if c.action != "update"] == []
    nodes = {c.name: c.properties for c in result.changes if c.type == INSTANCE}
    assert nodes == {"cpu-oneccl-head": ("metadataOptions.httpPutResponseHopLimit",)}
    assert {c.name for c in result.changes if c.type == LT} == {"cpu-oneccl-head-lt", "cpu-oneccl-compute-lt"}


# --- on a node, for real: a network namespace whose 169.254.169.254 is one veth hop away --------------------


def machine_problem() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, iptables)"
    missing = [t for t in ("ip", "iptables", "iptables-restore", "setpriv", "curl", "unshare") if not shutil.which(t)]
    return f"missing {', '.join(missing)}" if missing else None


# The namespaces have fixed names (a crashed run's are removed at setup): under `pytest -n` (make test) the tests
# that use them run on one worker, or one worker's setup would delete another's namespaces mid-test.
ONE_WORKER = pytest.mark.xdist_group("imds-netns")


@pytest.fixture(scope="module")
def node():
    """Namespaces hpcc-imds-node (10.254.0.2, routes 169.254.169.254 over a veth) and hpcc-imds-srv (holds the
    address, an HTTP listener on port 80). Not on lo: a reply to a refused packet would then go to the IMDS
    address itself and be refused too, which never happens on EC2."""
    problem = machine_problem()
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the IMDS firewall test cannot run in CI: {problem}", pytrace=False)
        pytest.skip(f"IMDS firewall test skipped: {problem}")
    ns, srv = "hpcc-imds-node", "hpcc-imds-srv"

    def sh(*cmd, check=True):
        return subprocess.run(cmd, check=check, capture_output=True, text=True)

    def clean():
        sh("ip", "netns", "del", ns, check=False)
        sh("ip", "netns", "del", srv, check=False)

    clean()
    for step in (
        ["ip", "netns", "add", ns],
        ["ip", "netns", "add", srv],
        ["ip", "link", "add", "hpccimds0", "netns", ns, "type", "veth", "peer", "name", "hpccimds1", "netns", srv],
        ["ip", "-n", ns, "addr", "add", "10.254.0.2/24", "dev", "hpccimds0"],
        ["ip", "-n", ns, "link", "set", "hpccimds0", "up"],
        ["ip", "-n", ns, "link", "set", "lo", "up"],
        ["ip", "-n", ns, "route", "add", "169.254.169.254/32", "dev", "hpccimds0"],
        ["ip", "-n", srv, "addr", "add", "169.254.169.254/32", "dev", "hpccimds1"],
        ["ip", "-n", srv, "link", "set", "hpccimds1", "up"],
        ["ip", "-n", srv, "route", "add", "10.254.0.0/24", "dev", "hpccimds1"],
    ):
        sh(*step)
    server = subprocess.Popen(
        ["ip", "netns", "exec", srv, "python3", "-m", "http.server", "--bind", "169.254.169.254", "80"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(50):
            if (
                sh(
                    "ip",
                    "netns",
                    "exec",
                    ns,
                    "curl",
                    "-s",
                    "-m",
                    "1",
                    "-o",
                    "/dev/null",
                    "http://169.254.169.254/",
                    check=False,
                ).returncode
                == 0
            ):
                break
            time.sleep(0.1)
        yield ns
    finally:
        server.kill()
        server.wait()
        clean()


REACH = """reach() {  # reach UID: whether UID's curl gets the listener's answer
  local rc=0
  setpriv --reuid="$1" --regid="$1" --clear-groups curl -s -m 5 -o /dev/null http://169.254.169.254/ || rc=$?
  echo "uid $1: $([ "$rc" -eq 0 ] && echo reached || echo "refused ($rc)")" >&3
}
exec 3>&1  # the test's own output: use_step sends the rest to the log
"""


def on_node(ns: str, tmp_path: Path, script: str, users: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """SCRIPT after the rendered partials, as the bootstrap runs them (root), in the node's namespace with its own
    /usr/local/sbin, /run (systemd "running") and /etc/systemd/system, and a systemctl that only records."""
    ctx = context(log_path=str(tmp_path / "bootstrap.log"))
    ctx = type(ctx)(**{**vars(ctx), "settings": type(ctx.settings)(**{**vars(ctx.settings), "imds_users": users})})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text(f"#!/bin/sh\necho \"$*\" >>{tmp_path}/systemctl.calls\n")
    (bin_dir / "systemctl").chmod(0o755)
    body = "\n".join(partial(p, ctx) for p in ("log", "retry", "settings", "status", "files", "imds"))
    path = tmp_path / "node.sh"
    path.write_text(
        f"#!/bin/bash\nset -euo pipefail\n{body}\n{settings_shell(ctx.settings)}\n"
        f"export PATH={bin_dir}:$PATH\nHPCC_DEADLINE=$(( $(date +%s) + 300 ))\n{REACH}{script}\n"
    )
    passwd = tmp_path / "passwd"
    passwd.write_text(
        Path("/etc/passwd").read_text() + f"{LISTED}:x:{LISTED_UID}:{LISTED_UID}::/nonexistent:/bin/false\n"
    )
    mounts = " && ".join(
        [f"mount -t tmpfs hpcc {d}" for d in ("/usr/local/sbin", "/run", "/etc/systemd/system")]
        + [f"mount --bind {passwd} /etc/passwd"]
    )
    return subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            ns,
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            f"{mounts} && mkdir -p /run/systemd/system && exec bash {path}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def rules() -> str:
    return "{ echo '--- rules'; iptables -S OUTPUT; iptables -S HPCC-IMDS; } >&3\n"


def reset() -> str:  # the netns outlives a test: start each from an empty filter table, as after a reboot
    return "iptables -F OUTPUT; iptables -F HPCC-IMDS 2>/dev/null || true; iptables -X HPCC-IMDS 2>/dev/null || true\n"


@ONE_WORKER
def test_only_root_reaches_imds_and_a_rerun_adds_no_rule(node, tmp_path):
    out = on_node(
        node,
        tmp_path,
        reset() + f"reach {NOBODY}\nuse_step imds\nstep_imds\n{rules()}step_imds\n"
        f"{rules()}flush_log\nreach 0\nreach {NOBODY}\n",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    before, first, second = out.stdout.split("--- rules\n")
    assert before.strip() == f"uid {NOBODY}: reached"  # the listener answers anyone until the rule is in
    assert first == second.split("uid ")[0]  # the second run left the rules as they were
    assert first.splitlines() == [
        "-P OUTPUT ACCEPT",
        "-A OUTPUT -d 169.254.169.254/32 -j HPCC-IMDS",
        "-N HPCC-IMDS",
        "-A HPCC-IMDS -m owner --uid-owner 0 -j RETURN",
        "-A HPCC-IMDS -j REJECT --reject-with icmp-port-unreachable",
    ]
    assert out.stdout.splitlines()[-2:] == ["uid 0: reached", f"uid {NOBODY}: refused (7)"]  # refused at once
    log = (tmp_path / "bootstrap.log").read_text()
    assert (
        log.count("wrote /usr/local/sbin/hpcc-imds\n") == 1
        and log.count("wrote /etc/systemd/system/hpcc-imds.service") == 1
    )
    assert "[imds] instance metadata: root only" in log
    assert (tmp_path / "systemctl.calls").read_text().splitlines()[:2] == [
        "daemon-reload",
        "enable --now -q hpcc-imds.service",
    ]


@ONE_WORKER
def test_a_listed_user_gets_through_others_do_not_and_unlisting_is_followed(node, tmp_path):
    script = (
        reset() + "use_step imds\nstep_imds\n" + f"reach 0\nreach {LISTED_UID}\nreach {STRANGER}\n"
        "echo '--- unlisted' >&3\nimds_firewall\n" + f"reach {LISTED_UID}\n" + rules()
    )
    out = on_node(node, tmp_path, script, users=(LISTED, "no-such-user"))
    assert out.returncode == 0, out.stdout + out.stderr
    listed, unlisted = out.stdout.split("--- unlisted\n")
    assert listed.splitlines() == ["uid 0: reached", f"uid {LISTED_UID}: reached", f"uid {STRANGER}: refused (7)"]
    assert unlisted.splitlines()[0] == f"uid {LISTED_UID}: refused (7)"
    assert unlisted.count("-j HPCC-IMDS") == 1 and f"--uid-owner {LISTED_UID}" not in unlisted
    log = (tmp_path / "bootstrap.log").read_text()
    assert "imds: no user no-such-user here: not let through" in log  # said, and nobody else let in for it


@ONE_WORKER
def test_the_boot_script_alone_puts_the_rule_back_after_a_reboot(node, tmp_path):
    """The unit's own ExecStart, run with an empty environment on an empty table (what a reboot leaves)."""
    script = (
        reset() + "use_step imds\nstep_imds\n" + reset() + f"reach {NOBODY}\n"
        "unit=/etc/systemd/system/hpcc-imds.service\ncat $unit >&3\n"
        "env -i \"$(sed -n 's/^ExecStart=//p' $unit)\"\n" + f"reach 0\nreach {LISTED_UID}\nreach {STRANGER}\n"
    )
    out = on_node(node, tmp_path, script, users=(LISTED,))
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert [lines[0]] + lines[-3:] == [
        f"uid {NOBODY}: reached",
        "uid 0: reached",
        f"uid {LISTED_UID}: reached",
        f"uid {STRANGER}: refused (7)",
    ]
    unit = lines[1:-3]  # before the network (so before sshd and any login), and enabled for every boot
    assert {
        "DefaultDependencies=no",
        "Before=network-pre.target shutdown.target",
        "Type=oneshot",
        "ExecStart=/usr/local/sbin/hpcc-imds",
        "WantedBy=multi-user.target",
    } <= set(unit), unit
