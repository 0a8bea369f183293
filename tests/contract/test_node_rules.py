"""Nodes trust nothing the config would refuse (issue 22 items 2, 3, 7, 8): the settings values, the hosts text,
the node names and the FSx endpoint are judged by one definition (hpcc_contract/settings.py, hpcc_contract/hosts.py),
which the program calls and the bootstrap renders; each test runs both sides on the same cases."""

from __future__ import annotations

import re
import shlex

import pytest

from hpcc_contract import hosts as contract_hosts
from hpcc_contract import settings as contract_settings
from hpcc_contract.settings import SettingsError, value_problem
from infra.config.parse import ConfigError, parse
from infra.render.node_settings import parse as parse_settings
from infra.render.node_settings import render
from tests.render.bootstrap_cases import settings
from tests.render.bootstrap_shell import context, run

VPC = "10.0.0.0/16"
# The review's reproductions (each accepted by the nodes before) and their near misses the program writes or allows.
REFUSED = [
    ("LOGIN_USER", "root"),
    ("LOGIN_USER", "nobody"),
    ("LOGIN_USER", "daemon"),
    ("LOGIN_USER", "sshd"),
    ("LOGIN_USER", "munge"),
    ("LOGIN_USER", "slurm"),
    ("IMDS_USER", "nobody"),
    ("IMDS_USER", "www-data"),
    ("FABRIC", "LD_PRELOAD=x.so"),
    ("FABRIC", "BASH_ENV=x"),
    ("FABRIC", "ENV=x"),
    ("FABRIC", "PATH=x"),
    ("FABRIC", "PROMPT_COMMAND=id"),
    ("FABRIC", "PYTHONPATH=x"),
    ("FABRIC", "LD_LIBRARY_PATH=x"),
    ("FABRIC", "FI_PROVIDER_PATH=x"),
    ("FABRIC", "NCCL_NET_PLUGIN=x"),
    ("FABRIC", "NCCL_DEBUG_FILE=x"),
    ("FABRIC", "I_MPI_OFI_LIBRARY=x"),
    ("FABRIC", "I_MPI_HYDRA_BOOTSTRAP_EXEC=x"),
    ("FABRIC", "OMPI_MCA_plm_rsh_agent=x"),
    ("FABRIC", "FI_PROVIDER=/tmp/x"),
    ("FABRIC", "GLIBC_TUNABLES=x"),
    ("MOUNT_POINT", "/"),
    ("MOUNT_POINT", "/etc/../root/.ssh"),
    ("MOUNT_POINT", "/etc"),
    ("MOUNT_POINT", "/fsx/"),
    ("MOUNT_POINT", "//fsx"),
    ("MOUNT_POINT", "/fsx/./a"),
    ("MOUNT_POINT", "/opt"),
    ("MOUNT_POINT", "/opt/aws/neuron"),
    ("MOUNT_POINT", "/opt/nvidia"),
    ("MOUNT_POINT", "/opt/conda/envs"),
    ("MOUNT_POINT", "/home/ubuntu"),
    ("MOUNT_POINT", "/" + "a" * 128),
    ("MPIRUN_OPTIONS", "-x LD_PRELOAD=x.so"),
    ("MPIRUN_OPTIONS", "--mca plm_rsh_agent x"),
    ("MPIRUN_OPTIONS", "--mca btl tcp,self --launch-agent x"),
    ("MPIRUN_OPTIONS", "--mca orte_rsh_agent x"),
    ("MPIRUN_OPTIONS", "--mca btl_tcp_param_files x"),
    ("MPIRUN_OPTIONS", "--prefix /tmp"),
    ("MPIRUN_OPTIONS", "--mca pml"),
    ("MPIRUN_OPTIONS", "--bind-to"),
    ("MPIRUN_OPTIONS", "--mca btl /tmp/x"),
    ("MPIRUN_OPTIONS", "--tune x"),
    ("MPIRUN_OPTIONS", "--am x"),
    # observability: (issue 34): only what the program writes, nothing a shell or Prometheus' flags would read more in
    ("METRICS", "yes"),
    ("METRICS", "on "),
    ("METRICS", ""),
    ("METRICS_SCRAPE_INTERVAL", ""),
    ("METRICS_SCRAPE_INTERVAL", "0s"),
    ("METRICS_SCRAPE_INTERVAL", "30"),
    ("METRICS_SCRAPE_INTERVAL", "1h30m"),  # valid Prometheus, but never the program's canonical spelling
    ("METRICS_RETENTION", "15d --web.enable-admin-api"),
    ("METRICS_RETENTION", "15d;reboot"),
    ("METRICS_RETENTION", "1234567890123d"),
    ("METRICS_REMOTE_WRITE_URL", "https://evil.example.com/api/v1/remote_write"),
    ("METRICS_REMOTE_WRITE_URL", "http://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write"),
    (
        "METRICS_REMOTE_WRITE_URL",
        "https://aps-workspaces.us-east-1.amazonaws.com.evil.io/workspaces/ws-1/api/v1/remote_write",
    ),
    (
        "METRICS_REMOTE_WRITE_URL",
        "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/../api/v1/remote_write",
    ),
    ("METRICS_REMOTE_WRITE_URL", "https://aps-workspacesXus-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write"),
    ("METRICS_REMOTE_WRITE_URL", "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/query"),
]
ACCEPTED = [
    ("LOGIN_USER", "ubuntu"),
    ("LOGIN_USER", "ec2-user"),
    ("LOGIN_USER", "alice"),
    ("IMDS_USER", "alice"),
    ("FABRIC", "FI_PROVIDER=efa"),
    ("FABRIC", "NCCL_SOCKET_IFNAME=^lo,docker"),
    ("FABRIC", "I_MPI_OFI_LIBRARY_INTERNAL=0"),
    ("FABRIC", "CCL_WORKER_COUNT=1"),
    ("FABRIC", "I_MPI_OFI_PROVIDER=efa"),
    ("MOUNT_POINT", "/fsx"),
    ("MOUNT_POINT", "/opt/fsx"),
    ("MOUNT_POINT", "/mnt/data"),
    ("MOUNT_POINT", "/scratch/a.b-c"),
    ("MPIRUN_OPTIONS", "--mca pml ^cm --mca btl tcp,self --mca btl_tcp_if_exclude lo,docker0 --bind-to none"),
    ("MPIRUN_OPTIONS", ""),
    ("MPIRUN_OPTIONS", "--map-by ppr:8:node --report-bindings --tag-output"),
    ("METRICS", "on"),
    ("METRICS", "off"),
    ("METRICS_SCRAPE_INTERVAL", "30s"),
    ("METRICS_SCRAPE_INTERVAL", "5500ms"),
    ("METRICS_RETENTION", "90m"),
    ("METRICS_RETENTION", "2w"),
    ("METRICS_RETENTION", "10y"),
    ("METRICS_REMOTE_WRITE_URL", "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write"),
    (
        "METRICS_REMOTE_WRITE_URL",
        "https://aps-workspaces.us-gov-west-1.amazonaws.com/workspaces/ws-b226cc2a-a446-46a9-933a-ac50479a5568/api/v1/remote_write",
    ),
]


def with_value(key: str, value: str) -> str:
    """The p5-llm example's settings text with `key` given `value` (a repeated key's lines replaced too)."""
    kept = [line for line in settings()["p5-llm"].splitlines() if not line.startswith(key + "=")]
    return "".join(line + "\n" for line in kept) + f"{key}={value}\n"


def test_the_nodes_refuse_what_the_config_would_refuse_and_both_sides_agree():
    cases = REFUSED + ACCEPTED
    python = [value_problem(k, v) is None for k, v in cases]
    assert python == [False] * len(REFUSED) + [True] * len(ACCEPTED), [c for c, ok in zip(cases, python, strict=True)]
    texts = [with_value(k, v) for k, v in cases]  # bash: the example's text with the case in it, whole
    assert [contract_settings.text_problem(t) is None for t in texts] == python
    out = run(
        ["settings"],
        "".join(f"apply_settings {shlex.quote(t)} 2>/dev/null && echo ok || echo refused\n" for t in texts),
        context(),
        timeout=600,
    )  # ~15 s alone; a loaded CI is slower
    assert [line == "ok" for line in out.stdout.splitlines()] == python, out.stderr


def test_a_text_the_program_would_never_write_is_refused_whole_by_bash_and_python(tmp_path):
    base = settings()["p5-llm"]
    for key, value in [
        ("LOGIN_USER", "root"),
        ("MOUNT_POINT", "/etc/../root/.ssh"),
        ("MPIRUN_OPTIONS", "-x LD_PRELOAD=x"),
    ]:
        text = with_value(key, value)
        with pytest.raises(SettingsError, match=key):
            parse_settings(text)
        assert contract_settings.text_problem(text) and key in contract_settings.text_problem(text)
        out = run(
            ["settings"],
            f"old=$HPCC_LOGIN_USER\nif apply_settings {shlex.quote(text)}; then echo accepted; fi\n"
            '[ "$HPCC_LOGIN_USER" = "$old" ] && echo kept',
            context(),
        )
        assert out.stdout.split() == ["kept"] and f"settings: {key}" in out.stderr, (key, out.stdout, out.stderr)
    extra = base + "FABRIC=LD_PRELOAD=/tmp/x.so\n"
    assert contract_settings.text_problem(extra)
    assert "FABRIC" in run(["settings"], f"apply_settings {shlex.quote(extra)} || echo refused", context()).stderr


@pytest.mark.parametrize(
    "field,value",
    [
        ("login_user", "nobody"),
        ("mount_point", "/opt/aws"),
        ("fabric", (("LD_PRELOAD", "x"),)),
        ("mpirun_options", "--mca plm_rsh_agent x"),
    ],
)
def test_the_program_never_renders_what_the_nodes_refuse(field, value):
    good = parse_settings(settings()["p5-llm"])
    with pytest.raises(SettingsError, match=field.upper()):
        render(type(good)(**{**vars(good), field: value}))


BASE = {
    "name": "demo",
    "headNode": {"instanceType": "c5n.18xlarge"},
    "compute": {"instanceType": "c6i.16xlarge", "count": 2},
}


@pytest.mark.parametrize(
    "section,value,field",
    [
        ({"image": {"loginUser": "nobody"}}, "nobody", "cluster.image.loginUser"),
        ({"image": {"loginUser": "sshd"}}, "sshd", "cluster.image.loginUser"),
        ({"security": {"imdsForUsers": ["alice", "munge"]}}, "munge", "cluster.security.imdsForUsers"),
        ({"fsx": {"mountPoint": "/opt/aws/neuron"}}, "/opt/aws", "cluster.fsx.mountPoint"),
    ],
)
def test_the_config_refuses_system_accounts_and_the_dlami_trees(section, value, field):
    with pytest.raises(ConfigError) as e:
        parse("us-east-1", {**BASE, **section})
    assert any(f == field and value in msg for f, msg in e.value.problems), e.value.problems


# -- the hosts text, the node names and the FSx endpoint ------------------------------------------------------------

ADDRESSES = [
    "10.0.16.9",
    "10.0.0.1",
    "10.0.255.254",
    "0.0.0.0",
    "999.999.999.999",
    "10.0.16.256",
    "169.254.169.254",
    "127.0.0.1",
    "10.1.0.5",
    "192.168.0.1",
    "010.0.16.9",
    "224.0.0.1",
    "10.0.16",
    " 10.0.16.9",
    "10.0.16.9 x",
    "255.255.255.255",
]


@pytest.mark.parametrize("vpc", [VPC, "10.200.0.8/29"])  # the program's, the box's
def test_the_hosts_addresses_are_judged_alike_on_both_sides(vpc):
    python = [contract_hosts.address_problem(ip, vpc) is None for ip in ADDRESSES]
    assert python == [vpc == VPC] * 3 + [False] * (len(ADDRESSES) - 3)
    calls = [(ip,) for ip in ADDRESSES]
    out = run(
        ["identify"],
        f"HPCC_VPC_CIDR={vpc}\n"
        + "".join(
            f"if [ -z \"$(address_problem {shlex.quote(ip)})\" ]; then echo ok; else echo refused; fi\n"
            for (ip,) in calls
        ),
        context(),
    )
    assert [line == "ok" for line in out.stdout.splitlines()] == python, out.stderr


def test_no_reserved_range_can_be_inside_the_clusters_vpc():
    """Inside the VPC is the whole address rule because the VPC overlaps no reserved range (AWS allows none)."""
    from infra.facts.subnets import VPC_CIDR
    from tests.box.cloud import FLEET_CIDR as BOX_VPC

    assert contract_hosts.vpc_problem(VPC_CIDR) is None and contract_hosts.vpc_problem(BOX_VPC) is None
    assert contract_hosts.vpc_problem("169.254.0.0/16") and contract_hosts.vpc_problem("0.0.0.0/0")


@pytest.mark.parametrize(
    "text,ok",
    [
        ("head 10.0.0.4\ngpu-000 10.0.16.5\ngpu-001 10.0.16.6\n", True),
        ("head 10.0.0.4\n\ncpu-000 10.0.16.5\n", True),
        ("head 10.0.0.4\n", True),  # a head alone: no node named yet
        ("head 10.0.0.4\ngpu-000 10.0.16.5\ngpu-007 10.0.16.9\ncpu-1000 10.0.16.7\n", True),  # holes, two groups
        ("head 10.0.0.4\ngpu-000 10.0.16.5\ngpu-001 10.0.0.4\n", False),  # the head's address as a node's
        ("head 10.0.0.4\ngpu-000 10.0.16.5\ngpu-001 10.0.16.5\n", False),
        ("head 10.0.0.4\ngpu-000 10.0.16.5\ngpu-000 10.0.16.6\n", False),  # a name twice
        ("gpu-000 10.0.16.5\nhead 10.0.0.4\n", False),  # the head not first
        ("head 10.0.0.4\nhead 10.0.16.5\n", False),
        ("head 10.0.0.4\ngpu-0000 10.0.16.5\n", False),  # a second spelling of gpu-000
        ("head 10.0.0.4\ngpu-000  10.0.16.5\n", False),  # two spaces
        ("head 10.0.0.4\ngpu-000 10.0.16.5 x\n", False),
        ("head 10.0.0.4\n10.0.16.5\n", False),  # yesterday's format
        ("head 10.0.0.4\ngpu-000 169.254.169.254\n", False),
        ("head 10.0.0.4\ngpu-000 0.0.0.0\n", False),
        ("head 10.0.0.4\nGPU-000 10.0.16.5\n", False),
        ("", False),
    ],
)
def test_the_hosts_text_is_judged_alike_on_both_sides(text, ok):
    assert (contract_hosts.hosts_problem(text, VPC) is None) == ok
    out = run(
        ["identify"],
        f"HPCC_VPC_CIDR={VPC}\nif parse_hosts {shlex.quote(text)}; then echo ok "
        '"${HPCC_NAMES[*]}" "${HPCC_HOSTS[*]}"; else echo refused; fi',
        context(),
    )
    if ok:
        pairs = contract_hosts.parse_hosts(text, VPC)
        assert out.stdout.split() == ["ok"] + [n for n, _ in pairs] + [a for _, a in pairs], out.stderr
    else:
        assert out.stdout.split() == ["refused"], out.stderr


def test_every_node_name_has_one_spelling_on_both_sides():
    names = [
        "head",
        "compute-000",
        "compute-511",
        "gpu-999",
        "gpu-1000",
        "a-000",
        "abcdefghijkl-123",
        "compute-0000",
        "compute-00",
        "gpu-01000",
        "gpu-10000",
        "Head",
        "compute-0x1",
        "abcdefghijklm-000",
        "1gpu-000",
        "gpu_a-000",
        "gpu-",
        "-000",
    ]
    python = [contract_hosts.valid_name(n) for n in names]
    assert python == [True] * 7 + [False] * (len(names) - 7)
    out = run(["identify"], "".join(f"valid_name {shlex.quote(n)} && echo yes || echo no\n" for n in names), context())
    assert out.stdout.split() == ["yes" if ok else "no" for ok in python]
    groups = [contract_hosts.group_of(n) for n in names[:7]]
    out = run(["identify"], "".join(f"echo \"[$(group_of {n})]\"\n" for n in names[:7]), context())
    assert out.stdout.split() == [f"[{g}]" for g in groups] and groups[:2] == ["", "compute"]


def test_the_node_names_are_the_controllers_names():
    """The controller names slots (hpcc_contract/names.py node_name); the nodes accept exactly those."""
    from hpcc_contract.names import node_name

    for group, index in [("gpu", 0), ("gpu", 999), ("gpu", 1000), ("gpu", 4095), ("abcdefghijkl", 7)]:
        assert (
            contract_hosts.valid_name(node_name(group, index))
            and contract_hosts.group_of(node_name(group, index)) == group
        )


@pytest.mark.parametrize(
    "dns,mount,ok",
    [
        ("fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com", "abcdefgh", True),
        ("fs-1.fsx.us-east-1.amazonaws.com", "fsx", True),
        ("lustre.evil.example", "abcdefgh", False),  # a Lustre server of the parameter writer's choosing
        ("fs-1.fsx.us-west-2.amazonaws.com", "abcdefgh", False),  # another region's
        ("x.fs-1.fsx.us-east-1.amazonaws.com", "abcdefgh", False),
        ("fs-1.fsx.us-east-1.amazonaws.com.evil.example", "abcdefgh", False),
        ("fs-1.fsx.us-east-1.amazonaws.com", "a/b", False),
    ],
)
def test_the_fsx_endpoint_must_be_a_file_system_of_fsx_in_the_clusters_region(dns, mount, ok):
    assert (contract_hosts.fsx_endpoint_problem(dns, mount, "us-east-1") is None) == ok
    out = run(
        ["mount"],
        f"if fsx_endpoint_ok {shlex.quote(dns)} {shlex.quote(mount)}; then echo ok; else echo refused; fi",
        context(),
    )
    assert out.stdout.split() == (["ok"] if ok else ["refused"]), out.stderr


def test_the_denied_expressions_say_what_the_worded_rules_say():
    """DENIED (what bash and value_problem apply) and the functions behind the config's messages agree."""
    paths = [
        "/fsx",
        "/",
        "/etc",
        "/etc/x",
        "/etcx",
        "/opt",
        "/opt/fsx",
        "/opt/aws",
        "/opt/aws/neuron",
        "/opt/awsx",
        "/lost+found",
        "/fsx/",
        "//fsx",
        "/fsx/.",
        "/fsx/..",
        "/fsx/../etc",
        "/fsx/..x",
        "/fsx/.x",
        "/a/./b",
        "/mnt",
        "/mnt/data",
        "/opt/dlami/nvme",
        "/home",
        "/srv/x",
        "/usr/local/x",
    ]
    for path in paths:
        denied = re.fullmatch(contract_settings.DENIED["MOUNT_POINT"], path) is not None
        assert denied == bool(contract_settings.mount_point_problems(path)), path
    for user in ["root", "nobody", "ubuntu", "alice", "sshd", "munge", "slurmx"]:
        assert (re.fullmatch(contract_settings.DENIED["LOGIN_USER"], user) is not None) == bool(
            contract_settings.account_problem(user)
        ), user
    for pair in [
        "FI_PROVIDER=efa",
        "FI_PROVIDER_PATH=x",
        "NCCL_NET_PLUGIN=x",
        "I_MPI_OFI_LIBRARY_INTERNAL=0",
        "NCCL_TOPO_FILE=x",
        "CCL_WORKER_COUNT=1",
    ]:
        refused = value_problem("FABRIC", pair) is not None
        assert refused == bool(contract_settings.fabric_problem(pair)), pair


def test_lustre_is_mounted_nosuid_and_nodev_now_and_at_boot():
    out = run(["mount"], 'echo "$LUSTRE_OPTIONS"; fstab_line fs-1.fsx.us-east-1.amazonaws.com@tcp:/abcd', context())
    options, fstab = out.stdout.splitlines()
    assert {"nosuid", "nodev"} <= set(options.split(",")) and {"nosuid", "nodev"} <= set(fstab.split()[3].split(","))


ID_STUB = (
    'id() { case "$3" in nobody) echo 65534 ;; daemon) echo 1 ;; slurm) echo 64030 ;; alice) echo 1001 ;; *) '
    'return 1 ;; esac; }\n'
)


def test_a_node_lets_no_account_outside_the_regular_uids_reach_imds_or_take_the_login_keys():
    """Whatever name the image gives a system account, its uid gives it away (login.defs UID_MIN..UID_MAX)."""
    out = run(["settings", "imds"], ID_STUB + "imds_rules nobody daemon slurm alice", context())
    assert [line for line in out.stdout.splitlines() if "RETURN" in line] == [
        "-A HPCC-IMDS -m owner --uid-owner 0 -j RETURN",
        "-A HPCC-IMDS -m owner --uid-owner 1001 -j RETURN",
    ]
    assert out.stderr.count("is a system account") == 3
    out = run(
        ["settings"],
        ID_STUB + "for u in nobody daemon slurm alice ghost; do regular_user $u && echo yes || echo no; done",
        context(),
    )
    assert out.stdout.split() == ["no", "no", "no", "yes", "yes"]  # ghost: no such user, the step says so itself
