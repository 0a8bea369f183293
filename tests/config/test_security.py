"""The adversarial review's reproductions, each refused with the field named (or, for the S3 link, planned safely):
SSH sources that add up to the internet, IPv6 sources in a VPC without IPv6, bare addresses, mount points that
hide system trees, S3 paths with control characters or beyond S3's limits, tag keys that instance metadata tags
refuse, and deletions exported to the user's bucket."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hpcc_contract.settings import canonical_path
from infra.config.parse import ConfigError, parse

ROOT = Path(__file__).resolve().parents[2]
BASE = {
    "name": "demo",
    "headNode": {"instanceType": "c5n.18xlarge"},
    "compute": {"instanceType": "c6i.16xlarge", "count": 2},
}


def problems(**sections) -> list[tuple[str, str]]:
    cluster = dict(BASE, **sections)
    try:
        parse("us-east-1", cluster)
    except ConfigError as e:
        return e.problems
    return []


# --- 1. SSH sources ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cidrs,field,words",
    [
        (["0.0.0.0/1", "128.0.0.0/1"], "cluster.ssh.allowedCidrs", "4,294,967,296 IPv4 addresses"),
        (["10.0.0.0/16", "10.1.0.0/24"], "cluster.ssh.allowedCidrs", "65,792 IPv4 addresses"),
        (["10.0.0.0/15"], "cluster.ssh.allowedCidrs", "at most 65,536"),
        ([f"198.{i}.0.0/16" for i in range(18, 20)], "cluster.ssh.allowedCidrs", "131,072"),
        (["2001:db8::/64"], "cluster.ssh.allowedCidrs[0]", "VPC has no IPv6"),
        (["203.0.113.0/24", "2001:db8::/48"], "cluster.ssh.allowedCidrs[1]", "VPC has no IPv6"),
        (["::/0"], "cluster.ssh.allowedCidrs[0]", "whole internet"),
        (["203.0.113.5"], "cluster.ssh.allowedCidrs", "'203.0.113.5' has no prefix length; write 203.0.113.5/32"),
        (["2001:db8::1"], "cluster.ssh.allowedCidrs", "write 2001:db8::1/128"),
    ],
)
def test_ssh_sources_beyond_your_own_networks_are_refused(cidrs, field, words):
    found = problems(ssh={"allowedCidrs": cidrs})
    assert any(path == field and words in msg for path, msg in found), found


@pytest.mark.parametrize(
    "cidrs",
    [
        ["203.0.113.0/24"],
        ["10.0.0.0/16"],
        ["10.0.0.0/16", "10.0.0.0/17", "10.0.128.0/24"],
        ["203.0.113.5/32", "198.51.100.0/24"],
        [f"192.0.{i}.0/24" for i in range(50)],
    ],
)
def test_ssh_sources_within_the_limit_are_accepted(cidrs):
    """Exactly a /16, and overlapping entries counted once, pass."""
    assert problems(ssh={"allowedCidrs": cidrs}) == []


# --- 2. the mount point ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mount_point,words",
    [
        ("/.", "write it as '/'"),
        ("//etc", "write it as '/etc'"),
        ("/etc/.", "write it as '/etc'"),
        ("/usr/bin", "in /usr"),
        ("/run", "in /run"),
        ("/var/log", "in /var"),
        ("/root/.ssh", "in /root"),
        ("/home/ubuntu", "in /home"),
        ("/", "/ already holds"),
        ("/a/../etc", "write it as '/etc'"),
        ("/fsx/", "write it as '/fsx'"),
        ("/fsx//data", "write it as '/fsx/data'"),
        ("/tmp/fsx", "in /tmp"),
        ("/opt/amazon/efa", "in /opt/amazon"),
        ("/lib64", "in /lib64"),
        ("/snap/x", "in /snap"),
        ("/boot", "in /boot"),
        ("/mnt", "/mnt already holds"),
        ("/opt", "/opt already holds"),
        ("fsx", "not an absolute path"),
        ("/" + "d" * 128, "at most 128 characters"),
        ("/data x", "String should match"),
    ],
)
def test_mount_points_that_hide_system_trees_or_are_not_canonical_are_refused(mount_point, words):
    found = problems(fsx={"mountPoint": mount_point})
    assert found and all(path == "cluster.fsx.mountPoint" for path, _ in found), found
    assert any(words in msg for _, msg in found), found


@pytest.mark.parametrize(
    "mount_point", ["/fsx", "/data/fsx", "/mnt/fsx", "/opt/fsx", "/scratch", "/lustre/a.b-c_d", "/" + "d" * 127]
)
def test_new_directories_outside_system_trees_are_accepted(mount_point):
    assert problems(fsx={"mountPoint": mount_point}) == []


def test_canonical_path_resolves_like_the_kernel():
    assert [canonical_path(p) for p in ("/.", "//etc", "/a/../../etc", "/a/./b/", "/x")] == [
        "/",
        "/etc",
        "/etc",
        "/a/b",
        "/x",
    ]


# --- 10. the S3 data repository path ---------------------------------------------------------------------------

PERSISTENT = {"deploymentType": "PERSISTENT_2", "perUnitStorageThroughput": 125}


@pytest.mark.parametrize(
    "path,words",
    [
        ("s3://bucket/data\x00", "U+0000"),
        ("s3://bucket/\u202egnp.exe", "U+202E"),
        ("s3://bucket/a\u200bb", "U+200B"),
        ("s3://bucket/a\nb", "U+000A"),
        ("s3://bucket/" + "k" * 5000, "at most 900"),
        ("s3://bucket/" + "é" * 520, "1024 bytes"),
        ("s3://B/x", "not a valid S3 bucket name"),
        ("s3://ab/x", "not a valid S3 bucket name"),
        ("s3://" + "b" * 64, "not a valid S3 bucket name"),
        ("s3://my..bucket/x", "two adjacent periods"),
        ("s3://192.168.5.4/x", "IP address"),
        ("s3://xn--bucket/x", "reserves"),
        ("s3://data-s3alias", "reserves"),
        ("s3://b--x-s3/x", "reserves"),
        ("https://bucket/x", "must be an S3 URL"),
        ("s3://-bucket/x", "not a valid S3 bucket name"),
    ],
)
def test_bad_data_repository_paths_name_the_field(path, words):
    found = problems(fsx=dict(PERSISTENT, dataRepositoryPath=path))
    assert [p for p, _ in found] == ["cluster.fsx.dataRepositoryPath"], found
    assert words in found[0][1], found
    assert len(found[0][1]) < 400 and "\x00" not in found[0][1] and "\u202e" not in found[0][1], found


@pytest.mark.parametrize(
    "path",
    ["s3://my-llm-datasets/tokenized", "s3://my.bucket.name", "s3://abc/a/b c/ü/+=@!", "s3://bucket/" + "é" * 400],
)
def test_good_data_repository_paths_are_accepted(path):
    assert problems(fsx=dict(PERSISTENT, dataRepositoryPath=path)) == []


# --- tag keys under instance metadata tags ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "key", ["cost center", "team/ml", ".", "..", "_index", "équipe", "a,b", "a*b", "漢字", "k\x00"]
)
def test_tag_keys_instance_metadata_refuses_are_config_errors(key):
    found = problems(tags={key: "x"})
    assert [p for p, _ in found] == ["cluster.tags"], found
    assert repr(key) in found[0][1] and "instance metadata" in found[0][1], found


@pytest.mark.parametrize("key", ["team", "Cost-Center", "a.b", "a:b", "k=v", "x+y", "me@corp", "_links", "..."])
def test_tag_keys_instance_metadata_takes_are_accepted_with_any_value(key):
    assert problems(tags={key: "Zürich 漢 a b/c"}) == []


# --- 9. deletions under the S3 link ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "export_deletions,events",
    [(None, ["NEW", "CHANGED"]), (False, ["NEW", "CHANGED"]), (True, ["NEW", "CHANGED", "DELETED"])],
)
def test_deletions_reach_the_bucket_only_when_asked(export_deletions, events):
    from infra.plan.runner import plan_config

    fsx = dict(PERSISTENT, storageCapacityGiB=1200, dataRepositoryPath="s3://my-bucket/data")
    if export_deletions is not None:
        fsx["exportDeletions"] = export_deletions
    result = plan_config({"aws:region": "us-east-1", "hpcc:cluster": dict(BASE, fsx=fsx)})
    dra = next(
        r for r in result.resources if r["type"] == "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
    )
    assert dra["inputs"]["s3"]["autoExportPolicy"]["events"] == events
    assert dra["inputs"]["s3"]["autoImportPolicy"]["events"] == ["NEW", "CHANGED", "DELETED"]


def test_export_deletions_without_a_link_is_a_warning():
    from infra.config.validators.check import check_config

    cfg = parse("us-east-1", dict(BASE, fsx={"exportDeletions": True}))
    assert [(f.severity, f.field) for f in check_config(cfg)] == [("warning", "cluster.fsx.exportDeletions")]


# --- the CLI: exit 2, the field, no traceback ------------------------------------------------------------------

CLI_CASES = [
    ("ssh-halves", {"ssh": {"allowedCidrs": ["0.0.0.0/1", "128.0.0.0/1"]}}, "cluster.ssh.allowedCidrs"),
    ("ssh-bare", {"ssh": {"allowedCidrs": ["203.0.113.5"]}}, "cluster.ssh.allowedCidrs"),
    ("mount-slashes", {"fsx": {"mountPoint": "//etc"}}, "cluster.fsx.mountPoint"),
    (
        "s3-nul",
        {"fsx": dict(PERSISTENT, dataRepositoryPath="s3://bucket/\x00\u202e")},
        "cluster.fsx.dataRepositoryPath",
    ),
    ("tag-space", {"tags": {"cost center": "1"}}, "cluster.tags"),
]


def test_cli_refuses_each_reproduction_with_exit_2(tmp_path):
    env = dict(os.environ, COLUMNS="400")
    for name, sections, field in CLI_CASES:
        path = tmp_path / f"Pulumi.{name}.yaml"
        path.write_text(yaml.safe_dump({"config": {"aws:region": "us-east-1", "hpcc:cluster": dict(BASE, **sections)}}))
        run = subprocess.run(
            [sys.executable, "-m", "infra.ops.cli", "plan", str(path), "--out", str(tmp_path / "out")],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        output = run.stdout + run.stderr
        assert run.returncode == 2, (name, output)
        assert f"{field}:" in output and "Traceback" not in output, (name, output)


# --- 8. logins from outside: the users' own keys, never root ------------------------------------------------

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAdecSRFR0wnzfd+gZo01f3h1LlaxXbHdtb4hdt4DXiz me@laptop"


def test_login_as_root_is_refused():
    [(field, message)] = problems(image={"loginUser": "root"})
    assert field == "cluster.image.loginUser" and message.startswith("root is refused")


@pytest.mark.parametrize(
    "key,index",
    [
        ("-----BEGIN OPENSSH PRIVATE KEY-----", 0),  # a private key pasted by mistake
        ('from="0.0.0.0/0" ' + KEY, 0),  # options are not the user's to set
        (KEY + " two words", 0),
        (
            "ssh-dss AAAAB3NzaC1kc3MAAACBAOu3xVm2vdTHcCzEtBq5vGtMRS9JB3ABvVqW9Q4Zx7AbcdEfGhIjKlMnOp",
            0,
        ),  # DSA: sshd refuses it
        (KEY.replace(" me@laptop", "\n" + KEY), 0),  # two lines in one
    ],
)
def test_a_public_key_that_is_not_one_plain_key_line_is_refused(key, index):
    [(field, message)] = problems(ssh={"authorizedKeys": [key]})
    assert field == "cluster.ssh.authorizedKeys" and f"[{index}]" in message and "OpenSSH public key line" in message


def test_the_users_keys_reach_the_nodes_through_the_settings_and_fit_the_parameter():
    from hpcc_contract.settings import SETTINGS_LIMIT, SettingsError
    from infra.render.node_settings import parse as parse_settings
    from infra.render.node_settings import settings_value as with_facts
    from tests.facts.instance_data import offline_facts

    facts = offline_facts()

    def settings_value(cfg, region):
        return with_facts(cfg, region, facts, "123456789012")

    cfg = parse("us-east-1", dict(BASE, ssh={"authorizedKeys": [KEY]})).cluster
    text = settings_value(cfg, "us-east-1")
    assert f"AUTHORIZED_KEY={KEY}\n" in text and parse_settings(text).authorized_keys == (KEY,)
    rsa = "ssh-rsa " + "A" * 1400 + " me"
    [(field, message)] = problems(ssh={"authorizedKeys": [rsa] * 4})
    assert field == "cluster.ssh.authorizedKeys" and "at most 5000 fit the settings parameter" in message
    many = parse("us-east-1", dict(BASE, ssh={"authorizedKeys": [rsa] * 3})).cluster
    assert len(settings_value(many, "us-east-1").encode()) <= SETTINGS_LIMIT  # the config's bound keeps it within
    with pytest.raises(SettingsError, match=f"the parameter holds {SETTINGS_LIMIT}: give fewer or shorter"):
        from dataclasses import replace

        from infra.render.node_settings import node_settings, render

        render(replace(node_settings(many, "us-east-1", facts, "123456789012"), authorized_keys=(rsa,) * 6))


# --- 5. user text is never read as terminal markup -------------------------------------------------------


def test_a_pattern_in_a_message_is_printed_as_it_is(tmp_path):
    from typer.testing import CliRunner

    from infra.ops.cli import app

    path = tmp_path / "Pulumi.demo.yaml"
    path.write_text(
        yaml.safe_dump(
            {"config": {"aws:region": "us-east-1", "hpcc:cluster": dict(BASE, image={"loginUser": "Bad-User"})}}
        )
    )
    run = CliRunner().invoke(app, ["plan", str(path), "--out", str(tmp_path / "out")])
    assert run.exit_code == 2 and run.exception is None or isinstance(run.exception, SystemExit)
    assert "cluster.image.loginUser: String should match pattern '^[a-z_][a-z0-9_-]{0,31}$'" in " ".join(
        run.output.split()
    )


@pytest.mark.parametrize("image", [{"nameFilter": "[/]bad"}, {"nameFilter": "[bold]x[/bold]"}])
def test_markup_in_a_name_filter_is_an_error_message_not_a_traceback(tmp_path, image):
    from typer.testing import CliRunner

    from infra.ops.cli import app

    path = tmp_path / "Pulumi.demo.yaml"
    path.write_text(yaml.safe_dump({"config": {"aws:region": "us-east-1", "hpcc:cluster": dict(BASE, image=image)}}))
    run = CliRunner().invoke(app, ["plan", str(path), "--out", str(tmp_path / "out")])
    assert run.exit_code == 2 and (run.exception is None or isinstance(run.exception, SystemExit)), run.output
    assert f"no image matches name={image['nameFilter']}" in " ".join(run.output.split())
