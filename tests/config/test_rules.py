"""Every config rule: bad input is rejected with a message that names the field and says what would be right."""

import subprocess
import sys

import pytest

from infra.config.parse import ConfigError, parse
from infra.config.stackfile import load
from infra.config.validators.check import CONFIG_RULES, check_config
from infra.config.validators.type_rules import TYPE_RULES
from tests.facts.instance_data import offline_facts

BASE = {
    "name": "demo",
    "headNode": {"instanceType": "c5n.18xlarge"},
    "compute": {"instanceType": "p4d.24xlarge", "count": 2},
}


def cluster(**overrides):
    c = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    for path, value in overrides.items():
        node = c
        *parents, leaf = path.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return c


def problems(region="us-east-1", **overrides):
    """What parsing refuses (no AWS), else what the type rules refuse with moto's instance data (as the program)."""
    try:
        cfg = parse(region, cluster(**overrides))
    except ConfigError as e:
        return e.problems
    return [(f.field, f.message) for f in check_config(cfg, offline_facts()) if f.is_error]


CASES = [
    # (overrides, field, words the message must contain)
    ({"compute__instanceType": "p9.huge"}, "cluster.compute.instanceType", "DescribeInstanceTypes does not list it"),
    ({"headNode__instanceType": "t9.nano"}, "cluster.headNode.instanceType", "aws ec2 describe-instance-types"),
    (
        {"compute__instanceType": "hpc7a.96xlarge", "compute__market": "spot"},
        "cluster.compute.market",
        "on-demand only",
    ),
    (
        {"compute__instanceType": "vt1.24xlarge"},
        "cluster.compute.instanceType",
        "cannot join a cluster placement group",
    ),
    # One image serves the cluster: an arm64 compute type with the (x86_64) default head is refused on the head.
    (
        {"compute__instanceType": "hpc7g.16xlarge"},
        "cluster.headNode.instanceType",
        "runs x86_64 but cluster.compute.instanceType hpc7g.16xlarge runs arm64",
    ),
    (
        {
            "compute__instanceType": "hpc7g.16xlarge",
            "headNode__instanceType": "c7g.2xlarge",
            "image__family": "base-oss-nvidia-driver-gpu-amazon-linux-2023",
        },
        "cluster.image.family",
        "AWS builds no arm64 image",
    ),
    ({"compute__market": "capacity-block"}, "cluster.compute.capacityReservationId", "give its id"),
    ({"fsx__storageType": "HDD"}, "cluster.fsx.storageType", "PERSISTENT_1 only, not SCRATCH_2"),
    ({"compute__instanceType": "c6i.16xlarge", "compute__efa": True}, "cluster.compute.efa", "has no EFA"),
    (
        {"fsx__storageCapacityGiB": 1000},
        "cluster.fsx.storageCapacityGiB",
        "SCRATCH_2 needs 1200, 2400 or a multiple of 2400; got 1000",
    ),
    (
        {"fsx__deploymentType": "SCRATCH_1", "fsx__storageCapacityGiB": 4800},
        "cluster.fsx.storageCapacityGiB",
        "multiple of 3600",
    ),
    (
        {
            "fsx__deploymentType": "PERSISTENT_1",
            "fsx__storageType": "HDD",
            "fsx__perUnitStorageThroughput": 12,
            "fsx__storageCapacityGiB": 1800,
        },
        "cluster.fsx.storageCapacityGiB",
        "multiple of 6000",
    ),
    ({"fsx__perUnitStorageThroughput": 125}, "cluster.fsx.perUnitStorageThroughput", "fixed throughput"),
    ({"fsx__deploymentType": "PERSISTENT_2"}, "cluster.fsx.perUnitStorageThroughput", "125, 250, 500, 1000"),
    (
        {"fsx__deploymentType": "PERSISTENT_2", "fsx__perUnitStorageThroughput": 200},
        "cluster.fsx.perUnitStorageThroughput",
        "got 200",
    ),
    (
        {"fsx__deploymentType": "PERSISTENT_2", "fsx__storageType": "HDD", "fsx__perUnitStorageThroughput": 125},
        "cluster.fsx.storageType",
        "PERSISTENT_1 only",
    ),
    (
        {"fsx__deploymentType": "PERSISTENT_2", "fsx__perUnitStorageThroughput": 125, "fsx__lustreVersion": "2.10"},
        "cluster.fsx.lustreVersion",
        "2.12 or 2.15",
    ),
    (
        {"fsx__deploymentType": "SCRATCH_1", "fsx__dataRepositoryPath": "s3://bucket/x"},
        "cluster.fsx.dataRepositoryPath",
        "SCRATCH_1",
    ),
    (
        {"fsx__lustreVersion": "2.10", "fsx__dataRepositoryPath": "s3://bucket/x"},
        "cluster.fsx.dataRepositoryPath",
        "2.12 or 2.15",
    ),
    ({"fsx__mountPoint": "/etc"}, "cluster.fsx.mountPoint", "/etc is in /etc, a system"),
    (
        {"compute__market": "spot", "compute__capacityReservationId": "cr-0123456789abcdef0"},
        "cluster.compute.capacityReservationId",
        "market: on-demand",
    ),
    ({"availabilityZone": "eu-west-1a"}, "cluster.availabilityZone", "not in aws:region us-east-1"),
    ({"ssh__allowedCidrs": ["0.0.0.0/0"]}, "cluster.ssh.allowedCidrs[0]", "whole internet"),
    ({"ssh__allowedCidrs": ["0.0.0.0/1", "128.0.0.0/1"]}, "cluster.ssh.allowedCidrs", "4,294,967,296 IPv4 addresses"),
    ({"ssh__allowedCidrs": ["2001:db8::/32"]}, "cluster.ssh.allowedCidrs[0]", "VPC has no IPv6"),
    ({"ssh__allowedCidrs": ["203.0.113.5"]}, "cluster.ssh.allowedCidrs", "write 203.0.113.5/32"),
    ({"ssh__allowedCidrs": ["10.0.0.300/24"]}, "cluster.ssh.allowedCidrs", "CIDR form"),
    (
        {"ssh__allowedCidrs": ["203.0.113.0/24"], "headNode__instanceType": "p4d.24xlarge"},
        "cluster.headNode.instanceType",
        "public IP",
    ),
    ({"name": "Bad_Name"}, "cluster.name", "lower-case letters"),
    ({"compute__count": 0}, "cluster.compute.count", "greater than or equal to 1"),
    ({"compute__count": 10000}, "cluster.compute.count", "less than or equal to 4096"),
    ({"compute__count": "eight"}, "cluster.compute.count", "valid integer"),
    ({"fsx__storageCapacityGiB": -5}, "cluster.fsx.storageCapacityGiB", "greater than or equal to 1"),
    ({"compute__gpus": 8}, "cluster.compute.gpus", "unknown key"),
    ({"fsx__deploymentType": "SCRATCH_3"}, "cluster.fsx.deploymentType", "SCRATCH_3"),
    (
        {"image__family": "base-oss-nvidia-driver-gpu-ubuntu-22.04", "image__amiId": "ami-0123456789abcdef0"},
        "cluster.image",
        "not family and amiId",
    ),
    ({"image__family": "windows"}, "cluster.image", "family must be one of"),
    ({"tags": {"aws:owner": "x"}}, "cluster.tags", "may not start with 'aws:'"),
    (
        {"compute__capacityReservationId": "reservation-1"},
        "cluster.compute.capacityReservationId",
        "String should match",
    ),
    (
        {"scheduler": "slurm", "image__family": "base-oss-nvidia-driver-gpu-amazon-linux-2023"},
        "cluster.scheduler",
        "Amazon Linux 2023 does not have",
    ),
    ({"scheduler": "pbs"}, "cluster.scheduler", "'none' or 'slurm'"),
    ({"hooks__onNodeReady": ["/nonexistent/hpcc-hook.sh"]}, "cluster.hooks.onNodeReady[0]", "does not exist"),
    ({"observability__scrapeInterval": "30 s"}, "cluster.observability.scrapeInterval", "is not a Prometheus duration"),
    ({"observability__scrapeInterval": 30}, "cluster.observability.scrapeInterval", "has no unit: write 30s"),
    ({"observability__retention": "15days"}, "cluster.observability.retention", "is not a Prometheus duration"),
    ({"observability__scrapeInterval": "1s"}, "cluster.observability.scrapeInterval", "outside 5s-2m"),
    ({"observability__scrapeInterval": "5m"}, "cluster.observability.scrapeInterval", "5-minute lookback"),
    ({"observability__retention": "30m"}, "cluster.observability.retention", "give 2h to 10y"),
    ({"observability__retention": "20y"}, "cluster.observability.retention", "remoteWrite workspace"),
    (
        {"observability__remoteWrite__workspaceArn": "arn:aws:s3:::my-bucket"},
        "cluster.observability.remoteWrite.workspaceArn",
        "not an Amazon Managed Service for Prometheus workspace",
    ),
    (
        {"observability__remoteWrite__workspaceArn": "ws-b226cc2a-a446-46a9-933a-ac50479a5568"},
        "cluster.observability.remoteWrite.workspaceArn",
        "is not an ARN",
    ),
    ({"observability__enabled": "sometimes"}, "cluster.observability.enabled", "valid boolean"),
    (
        {"scheduler": "slurm", "observability__retentionSize": "199GB"},
        "cluster.observability.retentionSize",
        "80% of the head's root volume",
    ),
    (
        {"observability__enabled": True, "image__family": "base-oss-nvidia-driver-gpu-amazon-linux-2023"},
        "cluster.observability.enabled",
        "prometheus-node-exporter packages, which Amazon Linux 2023 does not have",
    ),
    ({"containers__ecr": False}, "cluster.containers", "this cluster has no Slurm (scheduler: none)"),
    ({"containers__enabled": True}, "cluster.containers.enabled", "set scheduler: slurm"),
    (
        {"scheduler": "slurm", "containers__cacheMaxGiB": 1300},
        "cluster.containers.cacheMaxGiB",
        "more than the file system holds (fsx.storageCapacityGiB: 1200)",
    ),
    (
        {"scheduler": "slurm", "containers__ngcSecret": "nvapi-0123456789abcdef"},
        "cluster.containers.ngcSecret",
        "looks like an NGC API key itself",
    ),
    ({"containers__ngcSecret": "ngc key"}, "cluster.containers.ngcSecret", "Secrets Manager secret's name"),
    ({"containers__pyxis__containerScope": "node"}, "cluster.containers.pyxis.containerScope", "'job' or 'global'"),
    ({"containers__enroot__maxConnections": 0}, "cluster.containers.enroot.maxConnections", "greater than or equal"),
]


@pytest.mark.parametrize("overrides,field,words", CASES, ids=[c[1] + ":" + c[2][:20] for c in CASES])
def test_bad_field_is_named_with_the_fix(overrides, field, words):
    found = problems(**overrides)
    assert any(path == field and words in msg for path, msg in found), found


def test_every_config_rule_has_a_case():
    """A new rule without a case above fails here."""
    messages = " ".join(c[2] for c in CASES)
    for rule in CONFIG_RULES + TYPE_RULES:
        assert rule.__name__ in RULE_CASES, f"{rule.__name__} has no test case"
    assert messages


RULE_CASES = {
    "architecture",
    "efa_matches_type",
    "market_supported",
    "cluster_placement",
    "fsx_capacity",
    "fsx_hdd_deployment",
    "fsx_throughput",
    "fsx_lustre_version",
    "fsx_data_repository",
    "fsx_mount_point",
    "spot_and_reservation",
    "az_in_region",
    "ssh_not_open_to_world",
    "ssh_ipv4_only",
    "ssh_address_space_capped",
    "head_public_needs_single_interface",
    "image_supports_type",
    "slurm_has_a_package",
    "slurm_node_defined",  # the second: tests/program/test_slurm.py
    "hook_files",  # also tests/config/test_hooks.py
    "subnet_holds_the_nodes",  # tests/facts/test_subnets.py (the node cap lifted)
    "group_names_unique",
    "node_cap",
    "spares_need_slurm",
    "roll_bound",
    "metrics_scrape_interval",
    "metrics_retention",
    "metrics_workspace_region",  # a warning: tests/config/test_observability.py
    "metrics_remote_write_unused",  # likewise
    "metrics_retention_size",
    "metrics_have_packages",
    "head_holds_the_metrics",  # a warning: tests/facts/test_prometheus_sizing.py
    "containers_need_slurm",
    "containers_cache_fits",
    "containers_secret_region",  # a warning: tests/config/test_containers.py
    "containers_settings_unused",  # likewise
    "containers_restrict_dev",  # likewise
}  # tests/config/test_groups.py


def test_parsing_needs_no_instance_facts():
    """`hpcc up` parses the config before anything reaches AWS: a type EC2 does not list passes parsing, and only
    the type rules (with facts) refuse it."""
    cfg = parse("us-east-1", cluster(compute__instanceType="p9.huge"))
    assert not [f for f in check_config(cfg) if f.is_error]
    assert [f.field for f in check_config(cfg, offline_facts()) if f.is_error] == ["cluster.compute.instanceType"]


def test_missing_region_and_cluster_are_named():
    with pytest.raises(ConfigError) as e:
        parse(None, BASE)
    assert e.value.problems[0][0] == "aws:region"
    with pytest.raises(ConfigError) as e:
        parse("us-east-1", None)
    assert e.value.problems[0][0] == "hpcc:cluster"


def test_warnings_do_not_stop_the_plan():
    cfg = parse("us-east-1", cluster(compute__instanceType="p3dn.24xlarge", compute__efa=False))
    found = {(f.severity, f.field) for f in check_config(cfg, offline_facts())}
    assert found == {("warning", "cluster.image"), ("warning", "cluster.compute.efa")}


def test_examples_are_valid():
    for name in ("p3dn-bert", "c6i-oneccl", "p5-llm", "p5-capacity-block"):
        assert load(f"examples/{name}.yaml").cluster.name


@pytest.mark.parametrize(
    "text,field",
    [
        ("config: [unclosed", "is not valid YAML at line 1"),
        ("just a string", "needs a top-level `config:` map"),
        ("config:\n  aws:region: us-east-1\n  hpcc:clustr: {}\n", "hpcc:clustr: unknown key"),
        (
            "config:\n  aws:region: us-east-1\n  hpcc:cluster:\n    name: demo\n    compute: {instanceType: "
            "p4d.24xlarge, count: 2}\n"
            "    fsx: {storageCapacityGiB: 1000}\n",
            "cluster.fsx.storageCapacityGiB: SCRATCH_2 needs",
        ),
    ],
)
def test_cli_rejects_bad_files_with_a_message_and_no_traceback(tmp_path, text, field):
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(text)
    run = subprocess.run(
        [sys.executable, "-m", "infra.ops.cli", "plan", str(path), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert field in " ".join(run.stderr.split()) and "Traceback" not in run.stderr + run.stdout


def test_cli_plans_an_example_and_writes_the_files(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "infra.ops.cli", "plan", "examples/c6i-oneccl.yaml", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert {p.name for p in tmp_path.iterdir()} == {
        "resources.json",
        "outputs.json",
        "user-data",
        "bundle",
        "bundle.sha256",
    }
    assert (tmp_path / "bundle" / "roles" / "compute.sh").is_file()
    assert sorted(p.name for p in (tmp_path / "user-data").iterdir()) == ["cpu-oneccl-compute-lt", "cpu-oneccl-head-lt"]
    assert "Estimated cost" in run.stdout and "compute-003" in run.stdout


def readme_config_keys() -> list[str]:
    """Every key the README's config table and its day-2 table name: `a.b`, `.c` continuing `a.`, alternatives."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    rows = []
    for section in ("## Config reference", "## Changing a running cluster"):
        table = next(b for b in text.split(section)[1].split("\n\n") if b.startswith("| key"))
        rows += table.splitlines()[2:]
    keys = []
    for row in rows:
        prefix = ""
        for name in re.findall(r"`([A-Za-z.*]+)`", row.split("|")[1]):
            full = prefix + name[1:] if name.startswith(".") else name
            if full.endswith(".*"):  # `bootstrap.*`: the config table names each
                continue
            prefix = full.rsplit(".", 1)[0] + "." if "." in full else ""
            keys.append(full)
    return keys


def test_every_key_the_readme_names_is_read_in_that_spelling():
    keys = readme_config_keys()
    assert {
        "headNode.rootVolumeGiB",
        "compute.rootVolumeGiB",
        "fsx.perUnitStorageThroughput",
        "bootstrap.joinTimeoutMinutes",
        "security.imdsForContainers",
        "tags",
    } <= set(keys)
    for key in keys:
        overrides = {key.replace(".", "__"): [["probe"]]}  # a value no key takes: a type error, never "unknown"
        found = problems(**overrides)
        assert found and all(msg != "" for _, msg in found), key
        assert not [m for f, m in found if "unknown key" in m], (key, found)


@pytest.mark.parametrize("spelling", ["rootVolumeGiB", "rootVolumeGib"])
def test_root_volume_takes_the_readmes_spelling_and_the_first_one(spelling):
    cfg = parse("us-east-1", cluster(**{f"headNode__{spelling}": 300, f"compute__{spelling}": 400}))
    assert (cfg.cluster.head_node.root_volume_gib, cfg.cluster.compute.root_volume_gib) == (300, 400)
    assert ("cluster.compute." + spelling, "Input should be greater than or equal to 35; got 1") in problems(
        **{f"compute__{spelling}": 1}
    )
