"""Property-based input fuzzing of the stack config.

- 1,000 generated stack configs per run through `infra.config.parse.parse` (what `pulumi up` and `hpcc plan` both
  call): valid ones, and ones with wrong types, unknown keys, 0 or 10,000 nodes, negative or absurd capacities,
  names AWS would reject and odd unicode. Each is accepted, or rejected with a ConfigError whose every problem
  names a field path and says what is wrong; nothing else may escape. An accepted config must also give names
  and tags AWS accepts, checked against AWS's own patterns (IAM role, launch template, SSM parameter, secret,
  tag), not against config.py's. The test also checks that the run saw plenty of both outcomes, so a generator
  that drifted to all-valid or all-junk fails.
- 300 stack files (YAML dumps of generated configs, corrupted copies of a valid file, raw text) through
  `infra.config.stackfile.load`, with the same contract.
- The `hpcc plan` CLI on a handful of bad files, as a subprocess: exit code 2, a message naming the field,
  no traceback.
- A full offline plan costs about a second, so only a small sample of accepted configs (10, with 1-3 small
  nodes) is planned end to end; each of those plans must also pass every policy rule.
The whole file runs in well under two minutes on two cores.
"""

import os
import re
import string
import subprocess
import sys
from collections import Counter
from pathlib import Path

import regex
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcc_contract import names
from infra.config.parse import ConfigError, parse
from infra.config.stackfile import load

ROOT = Path(__file__).resolve().parents[2]
FIELD_ROOTS = ("cluster", "aws:region", "hpcc:cluster")
TYPES = ["p3dn.24xlarge", "p4d.24xlarge", "p5.48xlarge", "c6i.16xlarge", "c5n.18xlarge", "c6i.xlarge"]
BAD_TYPES = ["t2.micro", "", "p5.48XLARGE", "m7g.large", "x" * 300]
ODD = "éß漢🙂\u200b\u202e\x00\n\t'\"{}[]:#&*!|>%@`"

junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True),
    st.text(alphabet=string.printable + ODD, max_size=20),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
good_names = st.from_regex(r"[a-z][a-z0-9-]{1,20}[a-z0-9]", fullmatch=True)
bad_names = st.one_of(
    st.text(alphabet=string.printable + ODD, max_size=70),
    st.sampled_from(["ab", "-abc", "abc-", "ABC", "a" * 33, "hpcc_1", "名前", "abc\n", "abc-def\n", " abc"]),
)


def valid_cluster():
    fsx = st.one_of(
        st.just({}),
        st.fixed_dictionaries(
            {"deploymentType": st.just("SCRATCH_2"), "storageCapacityGiB": st.sampled_from([1200, 2400, 4800])}
        ),
        st.fixed_dictionaries(
            {
                "deploymentType": st.just("PERSISTENT_2"),
                "storageCapacityGiB": st.sampled_from([1200, 2400]),
                "perUnitStorageThroughput": st.sampled_from([125, 250, 500, 1000]),
                "dataRepositoryPath": st.just("s3://my-bucket/data"),
            }
        ),
    )
    return st.fixed_dictionaries(
        {
            "name": good_names,
            "compute": st.fixed_dictionaries(
                {"instanceType": st.sampled_from(TYPES), "count": st.integers(1, 512)},
                optional={"market": st.sampled_from(["spot", "on-demand"])},
            ),
        },
        optional={
            "headNode": st.fixed_dictionaries({"instanceType": st.sampled_from(["c5n.18xlarge", "c6i.xlarge"])}),
            "availabilityZone": st.sampled_from(["us-east-1a", "us-east-1d"]),
            "fsx": fsx,
            "ssh": st.fixed_dictionaries(
                {"allowedCidrs": st.lists(st.sampled_from(["203.0.113.0/24", "198.51.100.7/32"]), max_size=2)}
            ),
            "tags": st.dictionaries(
                st.from_regex(r"[A-Za-z0-9+\-=._:@]{1,20}", fullmatch=True).filter(
                    lambda k: k not in (".", "..", "_index") and not k.lower().startswith(("aws:", "hpcc:"))
                ),
                st.text(alphabet=string.ascii_letters + "éß漢🙂 ", max_size=30),
                max_size=3,
            ),
        },
    )


# Breaks applied to a valid config: (path to the field, strategy for the bad value). None as value deletes it.
BREAKS = [
    (("name",), bad_names),
    (("name",), junk),
    (("compute", "count"), st.sampled_from([0, -1, 513, 10_000, 10**9, "8", 2.5, True, None])),
    (("compute", "instanceType"), st.one_of(st.sampled_from(BAD_TYPES), junk)),
    (("compute", "market"), st.one_of(st.sampled_from(["cheap", "SPOT", ""]), junk)),
    (("compute", "capacityReservationId"), st.one_of(st.sampled_from(["cr-0123456789abcdef0", "cr-x"]), junk)),
    (("compute", "efa"), st.one_of(st.booleans(), junk)),
    (("compute",), junk),
    (("fsx", "storageCapacityGiB"), st.sampled_from([-1200, 0, 1, 1000, 3600, 10**9, "1200", None])),
    (("fsx", "deploymentType"), st.one_of(st.sampled_from(["SCRATCH_1", "PERSISTENT_1", "scratch_2", "X"]), junk)),
    (("fsx", "perUnitStorageThroughput"), st.one_of(st.sampled_from([7, 50, 125, 0, -250]), junk)),
    (
        ("fsx", "mountPoint"),
        st.one_of(
            st.sampled_from(
                [
                    "/",
                    "relative",
                    "/etc",
                    "/a/../etc",
                    "/fsx/",
                    "/data x",
                    "/.",
                    "//etc",
                    "/etc/.",
                    "/usr/bin",
                    "/run",
                    "/var/log",
                    "/root/.ssh",
                    "/home/ubuntu",
                ]
            ),
            st.text(alphabet="/.a-", max_size=200).map(lambda t: "/" + t),
            junk,
        ),
    ),
    (
        ("fsx", "dataRepositoryPath"),
        st.one_of(
            st.sampled_from(
                [
                    "http://x",
                    "s3://B",
                    "s3://",
                    "s3://a",
                    "s3://b/\x00",
                    "s3://b/\u202e",
                    "s3://bkt/" + "k" * 5000,
                    "s3://1.2.3.4/x",
                ]
            ),
            st.text(alphabet=string.printable + ODD, max_size=40).map(lambda t: "s3://bucket/" + t),
            junk,
        ),
    ),
    (("fsx", "exportDeletions"), st.one_of(st.booleans(), junk)),
    (("fsx", "lustreVersion"), st.one_of(st.sampled_from(["2.10", "2.16", 2.15]), junk)),
    (
        ("ssh", "allowedCidrs"),
        st.one_of(
            st.lists(
                st.sampled_from(
                    [
                        "0.0.0.0/0",
                        "::/0",
                        "10.0.0.300/8",
                        "x",
                        "10.0.0.1/8",
                        "0.0.0.0/1",
                        "128.0.0.0/1",
                        "203.0.113.5",
                        "2001:db8::/64",
                        "10.0.0.0/16",
                        "10.1.0.0/16",
                    ]
                ),
                min_size=1,
                max_size=3,
            ),
            junk,
        ),
    ),
    (
        ("tags",),
        st.one_of(
            st.dictionaries(
                st.text(alphabet=string.printable + ODD, max_size=140),
                st.one_of(st.text(max_size=300), junk),
                max_size=3,
            ),
            junk,
        ),
    ),
    (("availabilityZone",), st.one_of(st.sampled_from(["eu-west-1b", "moon-1a", "us-east-1"]), junk)),
    (
        ("image",),
        st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "family": junk,
                    "amiId": st.sampled_from(["ami-12345678", "ami-x"]),
                    "nameFilter": junk,
                    "loginUser": junk,
                },
            ),
            junk,
        ),
    ),
    (("bootstrap", "timeoutMinutes"), st.one_of(st.integers(-10, 1000), junk)),
    (("unknownKey",), junk),
    (("compute", "gpus"), junk),
    (("headNode", "rootVolumeGiB"), st.one_of(st.integers(-100, 100_000), junk)),
]


@st.composite
def stack_configs(draw):
    """(region, cluster): a valid cluster with 0-3 breaks, or pure junk now and then."""
    if draw(st.integers(0, 19)) == 0:
        return draw(st.one_of(st.just("us-east-1"), junk)), draw(junk)
    cluster = draw(valid_cluster())
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 1, 2, 3]))):
        path, values = draw(st.sampled_from(BREAKS))
        value = draw(values)
        node = cluster
        for key in path[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[path[-1]] = value
    region = draw(
        st.one_of(
            st.just("us-east-1"),
            st.just("us-east-1"),
            st.just("us-east-1"),
            st.sampled_from(["eu-west-1", "US-EAST-1", "", "us-east"]),
            junk,
        )
    )
    return region, cluster


def assert_names_fields(err: ConfigError, roots=FIELD_ROOTS):
    assert err.problems, "a ConfigError with no problems"
    for path, message in err.problems:
        assert isinstance(path, str) and path and isinstance(message, str) and message.strip(), err.problems
        if roots:
            assert path.split(".")[0].split("[")[0] in roots, path


# AWS's published name patterns for what hpcc names after the cluster (IAM CreateRole, EC2 CreateLaunchTemplate,
# SSM PutParameter, Secrets Manager CreateSecret) and for tags on the services that restrict them. Tag keys also
# follow EC2's rule for instances with instance metadata tags enabled (EC2 User Guide, "View tags for your EC2
# instances using instance metadata"): a-z A-Z 0-9 and + - = . , _ : @ only, not ".", ".." or "_index".
AWS_NAMES = [
    ("IAM role", lambda c: names.role_name(c, "compute"), r"[\w+=,.@-]{1,64}"),
    ("launch template", lambda c: names.launch_template_name(c, "compute"), r"[a-zA-Z0-9().\-/_]{3,128}"),
    ("SSM parameter", lambda c: names.Paths(c).node("compute-000"), r"[a-zA-Z0-9_.\-/]{1,1011}"),
    ("secret", lambda c: names.Paths(c).ssh_secret, r"[a-zA-Z0-9/_+=.@-]{1,512}"),
]
AWS_TAG = regex.compile(r"[\p{L}\p{Z}\p{N}_.:/=+\-@]*")
IMDS_TAG_KEY = re.compile(r"[a-zA-Z0-9+\-=.,_:@]+")


def assert_aws_would_accept(cfg):
    name = cfg.cluster.name
    for what, make, pattern in AWS_NAMES:
        assert re.fullmatch(pattern, make(name), re.ASCII), f"accepted name {name!r} makes a {what} name AWS refuses"
    for key, value in cfg.cluster.tags.items():
        assert 1 <= len(key) <= 128 and len(value) <= 256 and not key.lower().startswith("aws:"), (key, value)
        assert AWS_TAG.fullmatch(key) and AWS_TAG.fullmatch(value), f"accepted tag {key!r}: {value!r} AWS refuses"
        assert IMDS_TAG_KEY.fullmatch(key) and key not in (".", "..", "_index"), (
            f"accepted tag key {key!r} IMDS refuses"
        )
    fsx = cfg.cluster.fsx
    if fsx.data_repository_path:
        bucket, _, prefix = fsx.data_repository_path[5:].partition("/")
        assert re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket) and ".." not in bucket, (
            fsx.data_repository_path
        )
        assert prefix.isprintable() and len(prefix.encode()) <= 1024 and len(fsx.data_repository_path) <= 900, prefix
    parts = fsx.mount_point.split("/")
    assert parts[0] == "" and all(p not in ("", ".", "..") for p in parts[1:]), fsx.mount_point
    assert parts[1] not in ("etc", "usr", "var", "home", "root", "run", "proc", "sys", "dev", "tmp", "boot"), (
        fsx.mount_point
    )


def test_names_and_tags_aws_would_refuse_are_config_errors():
    """Found by this file's fuzzing: `$` let a trailing newline into the cluster name; tag characters were not
    checked at all. Both were accepted by parse and would have failed only in `pulumi up`."""
    base = {"name": "abc", "compute": {"instanceType": "c6i.16xlarge", "count": 1}}
    for cluster, field in (
        (dict(base, name="abc\n"), "cluster.name"),
        (dict(base, tags={"a*b": "x"}), "cluster.tags"),
        (dict(base, tags={"équipe": "x"}), "cluster.tags"),
        (dict(base, tags={"cost center": "x"}), "cluster.tags"),
        (dict(base, tags={"team": "ml\x00"}), "cluster.tags"),
        (dict(base, tags={"k": "line\nbreak"}), "cluster.tags"),
    ):
        try:
            parse("us-east-1", cluster)
        except ConfigError as e:
            assert [p for p, _ in e.problems] == [field], e.problems
        else:
            raise AssertionError(f"accepted {cluster}")
    assert_aws_would_accept(parse("us-east-1", dict(base, tags={"equipe": "Zürich 漢 a+b=c@d:e/f"})))


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    name=st.one_of(good_names, bad_names),
    tags=st.dictionaries(
        st.text(alphabet=string.printable + ODD, max_size=20),
        st.text(alphabet=string.printable + ODD, max_size=20),
        max_size=2,
    ),
)
def test_accepted_names_and_tags_are_ones_aws_accepts(name, tags):
    """Names and tags alone, so the odd ones are drawn often (the 1,000-config run mixes them with other breaks)."""
    try:
        cfg = parse("us-east-1", {"name": name, "tags": tags, "compute": {"instanceType": "c6i.16xlarge", "count": 1}})
    except ConfigError as e:
        assert_names_fields(e)
    else:
        assert_aws_would_accept(cfg)


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    mount_point=st.one_of(
        st.text(alphabet="/.aetcusrvbinhomt-", max_size=40).map(lambda t: "/" + t),
        st.text(alphabet=string.printable + ODD, max_size=20),
    ),
    data_path=st.text(alphabet=string.printable + ODD, max_size=30).map(lambda t: "s3://" + t),
)
def test_accepted_mount_points_and_s3_paths_are_ones_the_nodes_and_aws_take(mount_point, data_path):
    """Mount points and S3 paths alone, so odd ones are drawn often."""
    fsx = {
        "deploymentType": "PERSISTENT_2",
        "perUnitStorageThroughput": 125,
        "mountPoint": mount_point,
        "dataRepositoryPath": data_path,
    }
    try:
        cfg = parse("us-east-1", {"name": "abc", "compute": {"instanceType": "c6i.16xlarge", "count": 1}, "fsx": fsx})
    except ConfigError as e:
        assert_names_fields(e)
        assert {p for p, _ in e.problems} <= {"cluster.fsx.mountPoint", "cluster.fsx.dataRepositoryPath"}, e.problems
    else:
        assert_aws_would_accept(cfg)


def test_1000_generated_configs_are_accepted_or_name_their_bad_fields():
    seen = Counter()

    @settings(max_examples=1000, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(stack_configs())
    def run(config):
        region, cluster = config
        try:
            cfg = parse(region, cluster)
            assert_aws_would_accept(cfg)
            seen["accepted"] += 1
        except ConfigError as e:
            assert_names_fields(e)
            seen["rejected"] += 1

    run()
    assert sum(seen.values()) >= 1000, seen
    assert seen["accepted"] >= 100 and seen["rejected"] >= 300, seen


def _corrupt(text: str, edits: list[tuple[int, str]]) -> str:
    for pos, ch in edits:
        pos %= max(len(text), 1)
        text = text[:pos] + ch + text[pos + 1 :] if ch != "DEL" else text[:pos] + text[pos + 1 :]
    return text


VALID_FILE = (ROOT / "examples" / "p5-llm.yaml").read_text()
stack_files = st.one_of(
    stack_configs().map(
        lambda rc: yaml.safe_dump({"config": {"aws:region": rc[0], "hpcc:cluster": rc[1]}}, allow_unicode=True)
    ),
    stack_configs().map(
        lambda rc: yaml.safe_dump({"config": {"aws:region": rc[0], "hpcc:cluster": rc[1], "hpcc:extra": 1}})
    ),
    st.lists(
        st.tuples(st.integers(0, 10**6), st.sampled_from(list(":-[]{}#&*!|>'\"\t\n ") + ["DEL", "\x00", "🙂"])),
        min_size=1,
        max_size=4,
    ).map(lambda edits: _corrupt(VALID_FILE, edits)),
    st.text(alphabet=string.printable + ODD, max_size=200),
    st.sampled_from(
        [
            "",
            "config:",
            "config: [unclosed",
            "config: 3",
            "- a\n- b",
            "config:\n  hpcc:cluster: {name: ok}\n\t- x",
            "config:\n  aws:region: us-east-1\n  hpcc:cluster: &a [*a]",
            "config: {? [a, b]: 1}",
            "config: " + "[" * 3000 + "]" * 3000,
        ]
    ),
)


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(text=stack_files)
def test_stack_files_load_or_name_the_file_or_field(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fuzz") / "Pulumi.fuzz.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        load(path)
    except ConfigError as e:
        assert_names_fields(e, roots=None)
        for p, why in e.problems:  # a file-level problem names the file; anything else a config key or field
            assert (
                p == str(path)
                or p.split(".")[0].split("[")[0] in FIELD_ROOTS
                or p.startswith(("aws:", "hpcc:"))
                or ":" not in p
                or why.startswith("unknown key;")
            ), e.problems  # a mangled key, named as written


def test_non_utf8_file_names_the_file(tmp_path):
    path = tmp_path / "Pulumi.bin.yaml"
    path.write_bytes(b"\xff\xfeconfig:\n")
    try:
        load(path)
    except ConfigError as e:
        assert e.problems[0][0] == str(path) and "UTF-8" in e.problems[0][1]
    else:
        raise AssertionError("a non-UTF-8 file was accepted")


CLI_CASES = [
    ("count0", {"name": "abc", "compute": {"instanceType": "c6i.16xlarge", "count": 0}}, "cluster.compute.count"),
    (
        "count10000",
        {"name": "abc", "compute": {"instanceType": "p5.48xlarge", "count": 10000}},
        "cluster.compute.count",
    ),
    (
        "negative-capacity",
        {"name": "abc", "compute": {"instanceType": "c6i.16xlarge", "count": 2}, "fsx": {"storageCapacityGiB": -1200}},
        "cluster.fsx.storageCapacityGiB",
    ),
    (
        "unknown-key",
        {"name": "abc", "compute": {"instanceType": "c6i.16xlarge", "count": 2}, "nodes": 3},
        "cluster.nodes",
    ),
    ("bad-name", {"name": "My_Cluster!", "compute": {"instanceType": "c6i.16xlarge", "count": 2}}, "cluster.name"),
    (
        "wrong-type",
        {"name": "abc", "compute": {"instanceType": ["p5.48xlarge"], "count": "two"}},
        "cluster.compute.count",
    ),
    (
        "world-ssh",
        {"name": "abc", "compute": {"instanceType": "c6i.16xlarge", "count": 2}, "ssh": {"allowedCidrs": ["::/0"]}},
        "cluster.ssh.allowedCidrs[0]",
    ),
]


def test_cli_rejects_bad_files_with_exit_2_and_no_traceback(tmp_path):
    files = []
    for name, cluster, _ in CLI_CASES:
        path = tmp_path / f"Pulumi.{name}.yaml"
        path.write_text(yaml.safe_dump({"config": {"aws:region": "us-east-1", "hpcc:cluster": cluster}}))
        files.append(path)
    malformed = tmp_path / "Pulumi.malformed.yaml"
    malformed.write_text("config:\n  aws:region: us-east-1\n  hpcc:cluster: {name: [unclosed\n")
    cases = [(p, field) for p, (_, _, field) in zip(files, CLI_CASES, strict=True)] + [(malformed, str(malformed))]
    env = dict(os.environ, COLUMNS="400")  # keep rich from wrapping a field path across lines
    for path, field in cases:
        run = subprocess.run(
            [sys.executable, "-m", "infra.ops.cli", "plan", str(path), "--out", str(tmp_path / "out")],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        output = run.stdout + run.stderr
        assert run.returncode == 2, (path.name, run.returncode, output)
        assert f"{field}:" in output, (path.name, output)
        assert "Traceback" not in output, output


@settings(max_examples=10, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    cluster=st.fixed_dictionaries(
        {
            "name": st.from_regex(r"[a-z][a-z0-9]{2,8}", fullmatch=True),
            "compute": st.fixed_dictionaries(
                {
                    "instanceType": st.sampled_from(["p4d.24xlarge", "c6i.16xlarge", "c5n.18xlarge", "p5.48xlarge"]),
                    "count": st.integers(1, 3),
                    "market": st.sampled_from(["spot", "on-demand"]),
                }
            ),
            "fsx": st.sampled_from(
                [
                    {},
                    {
                        "deploymentType": "PERSISTENT_2",
                        "perUnitStorageThroughput": 250,
                        "storageCapacityGiB": 2400,
                        "dataRepositoryPath": "s3://bucket/data",
                    },
                ]
            ),
            "ssh": st.sampled_from([{}, {"allowedCidrs": ["203.0.113.0/24"]}]),
        }
    )
)
def test_accepted_configs_plan_end_to_end_and_pass_the_policy(cluster):
    from infra.plan.runner import plan_config
    from policy.rules import check

    result = plan_config({"aws:region": "us-east-1", "hpcc:cluster": cluster})
    assert [g["count"] for g in result.outputs["nodeGroups"]] == [cluster["compute"]["count"]]
    assert check([dict(r) for r in result.resources]) == {}
