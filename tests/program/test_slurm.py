"""Slurm, the program side: the compute type's Slurm node (infra/facts/slurm.py) in the settings, the munge-key secret
and its IAM, the refusal on Amazon Linux, and turning Slurm on for a running cluster (a second `pulumi up`
against the first plan: examples/p3dn-bert.yaml without, then with, `scheduler: slurm`)."""

from __future__ import annotations

import copy
import fnmatch
import json
import re

import pytest
from typer.testing import CliRunner

from hpcc_contract.names import Paths, role_name
from hpcc_contract.settings import OPTIONAL, PATTERNS, SETTINGS_LIMIT, SettingsError, check
from infra.config.parse import parse
from infra.config.stackfile import read_raw
from infra.config.validators.check import check_config
from infra.config.validators.inputs import PUBLIC_KEYS_BYTES
from infra.facts.instance_types import DescribedFacts, from_description
from infra.facts.slurm import REAL_MEMORY_PERCENT, SlurmFactsError, gres_gpus, slurm_node
from infra.ops.cli import app
from infra.plan.previous import PreviousPlan
from infra.plan.runner import plan_config
from infra.render.node_settings import node_settings, render, settings_value
from infra.render.node_settings import parse as parse_settings
from tests.facts.instance_data import MOTO_ACCOUNT, all_descriptions, facts_for, offline_facts
from tests.ops import support as ops_support
from tests.ops.support import EXAMPLES, stack_file

SECRET, SECRET_VERSION = "aws:secretsmanager/secret:Secret", "aws:secretsmanager/secretVersion:SecretVersion"
ROLE_POLICY, INSTANCE = "aws:iam/rolePolicy:RolePolicy", "aws:ec2/instance:Instance"


# --- the node definition, from EC2's published facts --------------------------------------------------------


@pytest.mark.parametrize(
    "name, vcpus, cores, memory_gib, gpus",
    [
        ("p5.48xlarge", 192, 96, 2048, 8),  # 8 x H100
        ("p4d.24xlarge", 96, 48, 1152, 8),  # 8 x A100
        ("p3dn.24xlarge", 96, 48, 768, 8),  # 8 x V100
        ("c6i.16xlarge", 64, 32, 128, 0),
        # 16 Trainium devices, but no Gres=gpu: Slurm has no GRES plugin for /dev/neuron*, jobs take whole nodes.
        ("trn1.32xlarge", 128, 64, 512, 0),
    ],
)
def test_the_slurm_node_of_a_type_follows_ec2_s_facts(name, vcpus, cores, memory_gib, gpus):
    node = slurm_node(facts_for(name))
    real = memory_gib * 1024 * REAL_MEMORY_PERCENT // 100
    words = dict(w.split("=", 1) for w in node.attributes().split(" "))
    assert words == {
        "CPUs": str(vcpus),
        "Boards": "1",
        "SocketsPerBoard": "1",
        "CoresPerSocket": str(cores),
        "ThreadsPerCore": str(vcpus // cores),
        "RealMemory": str(real),
        **({"Gres": f"gpu:{gpus}"} if gpus else {}),
    }
    assert real < memory_gib * 1024 and node.gpus == gpus
    check("SLURM_NODE", node.attributes())  # the pattern the nodes parse it with


def _described(name: str, edit) -> dict:
    d = copy.deepcopy(all_descriptions()[name])
    edit(d)
    return d


def test_only_nvidia_gpus_are_a_gres():
    amd = _described("g5.xlarge", lambda d: d["GpuInfo"]["Gpus"][0].update(Manufacturer="AMD", Name="Radeon Pro V520"))
    assert gres_gpus(facts_for("g5.xlarge")) == 1 and gres_gpus(from_description(amd)) == 0


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda d: d["VCpuInfo"].update(DefaultVCpus=0), "no vCPU, core or thread count"),
        (lambda d: d["VCpuInfo"].update(DefaultCores=30), "30 cores x 2 threads is not 64 vCPUs"),
        (lambda d: d["MemoryInfo"].update(SizeInMiB=0), "no memory size (MemoryInfo.SizeInMiB)"),
    ],
)
def test_facts_that_make_no_node_are_refused_at_plan_time_naming_the_field(edit, words):
    facts = DescribedFacts({**all_descriptions(), "c6i.16xlarge": _described("c6i.16xlarge", edit)}, "us-east-1")
    cfg = parse("us-east-1", {**read_raw(EXAMPLES / "c6i-oneccl.yaml")["hpcc:cluster"], "scheduler": "slurm"})
    [finding] = [f for f in check_config(cfg, facts) if f.is_error]
    assert finding.field == "cluster.compute.instanceType" and words in finding.message
    assert "scheduler: none" in finding.message
    with pytest.raises(SlurmFactsError, match=re.escape(words)):
        slurm_node(facts.get("c6i.16xlarge"))


# --- the settings -----------------------------------------------------------------------------------------------


def _cluster(example: str, **changes):
    return parse("us-east-1", {**read_raw(EXAMPLES / f"{example}.yaml")["hpcc:cluster"], **changes}).cluster


def test_settings_carry_the_scheduler_and_the_slurm_node_only_with_slurm():
    """Without Slurm no scheduler key at all: nodes booted before the key existed refuse a text that has one."""
    slurm = parse_settings(settings_value(_cluster("p5-llm"), "us-east-1", offline_facts(), MOTO_ACCOUNT))
    assert (slurm.scheduler, slurm.slurm_gpus) == ("slurm", 8)
    assert slurm.slurm_node == slurm_node(facts_for("p5.48xlarge")).attributes()
    text = settings_value(_cluster("p5-llm", scheduler="none"), "us-east-1", offline_facts(), MOTO_ACCOUNT)
    assert "SCHEDULER" not in text and "SLURM_" not in text and parse_settings(text).scheduler is None
    assert (
        parse_settings(
            settings_value(_cluster("c6i-oneccl", scheduler="slurm"), "us-east-1", offline_facts(), MOTO_ACCOUNT)
        ).slurm_gpus
        == 0
    )


@pytest.mark.parametrize(
    "text_edit, words",
    [
        (lambda t: t.replace("SLURM_GPUS=8\n", ""), "SCHEDULER=slurm lack SLURM_GPUS"),
        (lambda t: t.replace("SCHEDULER=slurm", "SCHEDULER=none"), "SCHEDULER=none give SLURM_GPUS, SLURM_NODE"),
        (lambda t: t.replace("SCHEDULER=slurm\n", ""), "SCHEDULER=none give SLURM_GPUS, SLURM_NODE"),
        (lambda t: t.replace("SCHEDULER=slurm", "SCHEDULER=pbs"), "SCHEDULER: 'pbs' does not match"),
        (lambda t: t.replace("Gres=gpu:8", "Gres=gpu:8;reboot"), "SLURM_NODE"),
        (lambda t: t.replace("CPUs=192 Boards", "CPUs=192  Boards"), "SLURM_NODE"),
    ],
)
def test_slurm_settings_the_nodes_would_refuse_are_refused(text_edit, words):
    text = text_edit(settings_value(_cluster("p5-llm"), "us-east-1", offline_facts(), MOTO_ACCOUNT))
    with pytest.raises(SettingsError, match=words):
        parse_settings(text)


def test_the_largest_settings_leave_room_for_every_public_key_the_config_allows():
    """SETTINGS_LIMIT arithmetic: the config bounds the keys (PUBLIC_KEYS_BYTES, counting a newline each); the
    rest, at its largest over every type EC2 lists with Slurm on, plus each key line's `AUTHORIZED_KEY=`, fits."""
    base = read_raw(EXAMPLES / "c6i-oneccl.yaml")["hpcc:cluster"]
    largest = 0
    for name in all_descriptions():
        cfg = parse(
            "us-east-1",
            {
                **base,
                "compute": {"instanceType": name, "count": 512},
                "scheduler": "slurm",
                "bootstrap": {"timeoutMinutes": 240, "joinTimeoutMinutes": 120},
                "fsx": {**base["fsx"], "mountPoint": "/" + "m" * 60},
            },
        ).cluster
        largest = max(largest, len(render(node_settings(cfg, "us-east-1", offline_facts(), MOTO_ACCOUNT)).encode()))
    most_keys = 10  # Ssh.authorized_keys max_length
    assert largest + PUBLIC_KEYS_BYTES + most_keys * len("AUTHORIZED_KEY=") <= SETTINGS_LIMIT, largest
    assert set(OPTIONAL) < set(PATTERNS)


# --- Amazon Linux: refused before anything is planned ----------------------------------------------------------


@pytest.mark.parametrize(
    "image",
    [
        {"family": "base-oss-nvidia-driver-gpu-amazon-linux-2023"},
        {"nameFilter": "Deep Learning Base OSS Nvidia Driver GPU AMI (Amazon Linux 2023) *"},
        {"amiId": "ami-0123456789abcdef0", "loginUser": "ec2-user"},
    ],
)
def test_slurm_on_amazon_linux_is_refused_by_plan_and_preflight(tmp_path, image):
    path = stack_file(tmp_path, "p5-llm", image=image)
    for command in (["plan", str(path), "--out", str(tmp_path / "out")], ["preflight", str(path), "--emulate"]):
        run = CliRunner().invoke(app, command, env={"COLUMNS": "300"})
        assert run.exit_code == 2 and "Traceback" not in run.output, run.output
        assert "cluster.scheduler: slurm needs the distribution's slurm-wlm packages" in run.output
        assert "base-oss-nvidia-driver-gpu-ubuntu-22.04" in run.output and "scheduler: none" in run.output
    assert not (tmp_path / "out").exists()


def test_amazon_linux_without_slurm_and_ubuntu_with_it_pass():
    al = {"family": "base-oss-nvidia-driver-gpu-amazon-linux-2023"}
    assert _cluster("p5-llm", scheduler="none", image=al).scheduler == "none"
    assert _cluster("p5-llm", image={"amiId": "ami-0123456789abcdef0"}).scheduler == "slurm"  # the os step decides


# --- the munge key and IAM, and Slurm turned on for a running cluster --------------------------------------------


def _without_scheduler() -> dict:
    config = copy.deepcopy(read_raw(EXAMPLES / "p3dn-bert.yaml"))
    config["hpcc:cluster"].pop("scheduler")
    return config


@pytest.fixture(scope="module")
def first_up(tmp_path_factory):
    """A cluster made before `scheduler` existed: its config has no such field."""
    return ops_support.first_up(tmp_path_factory, _without_scheduler())


@pytest.fixture(scope="module")
def with_slurm(first_up):
    config = _without_scheduler()
    config["hpcc:cluster"]["scheduler"] = "slurm"
    return plan_config(config, previous=PreviousPlan.load(first_up[1]))


def statements(result, role: str) -> dict[str, dict]:
    [policy] = [r for r in result.of_type(ROLE_POLICY) if r["inputs"]["role"] == role_name("bert", role)]
    return {s["Sid"]: s for s in json.loads(policy["inputs"]["policy"])["Statement"]}


def allowed(stmts: dict[str, dict], action: str, arn: str) -> bool:
    """IAM's answer for one action on one resource, for these statements (Allow and Deny with Resource or
    NotResource, no conditions): an explicit Deny wins, else some Allow must match."""

    def matches(s):
        on = any(fnmatch.fnmatchcase(arn, r) for r in s.get("Resource", s.get("NotResource", [])))
        return action in s["Action"] and (on if "Resource" in s else not on)

    return not any(s["Effect"] == "Deny" and matches(s) for s in stmts.values()) and any(
        s["Effect"] == "Allow" and "Condition" not in s and matches(s) for s in stmts.values()
    )


def test_without_slurm_there_is_no_munge_secret_and_no_grant_for_it(first_up):
    result, _ = first_up
    paths = Paths("bert")
    assert sorted(r["inputs"]["name"] for r in result.of_type(SECRET)) == sorted(
        [paths.ssh_secret, paths.user_secret, paths.host_ca_secret]
    )  # no munge key
    for role in ("head", "compute"):
        assert "ClusterMungeKey" not in statements(result, role)


def test_only_the_head_writes_the_munge_key_and_every_node_reads_it(with_slurm):
    [munge] = [r for r in with_slurm.of_type(SECRET) if r["inputs"]["name"] == Paths("bert").munge_secret]
    arn = munge["outputs"]["arn"]
    head, compute = statements(with_slurm, "head"), statements(with_slurm, "compute")
    for stmts in (head, compute):
        assert allowed(stmts, "secretsmanager:GetSecretValue", arn)
    assert allowed(head, "secretsmanager:PutSecretValue", arn)
    assert not allowed(compute, "secretsmanager:PutSecretValue", arn)
    assert compute["ClusterMungeKey"]["Resource"] == [arn]  # this one secret, not the cluster's prefix


def test_the_head_reads_every_compute_node_s_status_to_drain_failed_ones(with_slurm):
    region, account = "us-east-1", with_slurm.named("bert-munge-key")["outputs"]["arn"].split(":")[4]
    status = f"arn:aws:ssm:{region}:{account}:parameter{Paths('bert').node('compute-003')}"
    assert allowed(statements(with_slurm, "head"), "ssm:GetParameters", status)
    other = f"arn:aws:ssm:{region}:{account}:parameter{Paths('other').node('compute-003')}"
    assert not allowed(statements(with_slurm, "head"), "ssm:GetParameters", other)


def test_no_key_passes_through_the_program(with_slurm):
    """The secrets are created empty: no value in their inputs, no SecretVersion, nothing about them in the outputs."""
    assert not with_slurm.of_type(SECRET_VERSION)
    for secret in with_slurm.of_type(SECRET):
        assert not {"secretString", "secretBinary"} & set(secret["inputs"]), secret["name"]
    assert "munge" not in json.dumps(with_slurm.outputs)
    for script in with_slurm.role_scripts().values():
        # the keys come from Secrets Manager at boot: the bundle's script names the secrets, it holds no key
        assert "PRIVATE KEY" not in script and Paths("bert").munge_secret in script
    assert not any("PRIVATE KEY" in f.decode(errors="replace") for f in with_slurm.bundle_files.values())
    assert not any("PRIVATE KEY" in loader for loader in with_slurm.user_data.values())


def test_turning_slurm_on_for_a_running_cluster_replaces_nothing(with_slurm):
    changes = {(c.name, c.action) for c in with_slurm.changes}
    bundle = {(c.name, c.action) for c in with_slurm.changes if c.name.startswith("bert-bundle-")}
    assert changes - bundle == {
        ("bert-munge-key", "create"),
        ("bert-head-policy", "update"),
        ("bert-node-policy", "update"),
        ("bert-settings-param", "update"),
        ("bert-groups-param", "update"),
    }  # the groups' Slurm nodes
    # metrics come on with Slurm (observability's default): a new bundle (the head's Prometheus configuration and
    # every role's metrics step) and its pointer moved
    assert {a for _, a in bundle} == {"create", "delete", "update"} and ("bert-bundle-param", "update") in bundle
    assert not [c for c in with_slurm.changes if c.type == INSTANCE]


def test_a_config_without_the_field_plans_as_it_did(first_up):
    result, out = first_up
    assert plan_config(_without_scheduler(), previous=PreviousPlan.load(out)).changes == []
    [settings] = [
        r for r in result.of_type("aws:ssm/parameter:Parameter") if r["inputs"]["name"] == Paths("bert").settings
    ]
    assert "SCHEDULER" not in settings["inputs"]["value"] and "SLURM_" not in settings["inputs"]["value"]
