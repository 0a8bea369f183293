"""Property-based input fuzzing: every generated stack config (1,000+ per run) either parses or is rejected with
a ConfigError whose every problem names a field; nothing else escapes. Full plans cost ~1 s each, so only a small
sample of accepted small configs (15) is also planned end to end."""

import string

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.config import ConfigError, parse
from infra.stackfile import read_raw

TYPES = ["p3dn.24xlarge", "p4d.24xlarge", "p5.48xlarge", "c6i.16xlarge", "c5n.18xlarge", "c6i.xlarge", "t2.micro", ""]
junk = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                 st.text(max_size=12), st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))


def maybe(strategy):
    return st.one_of(strategy, junk)


names = st.one_of(st.from_regex(r"[a-z][a-z0-9-]{1,30}[a-z0-9]", fullmatch=True),
                  st.text(alphabet=string.printable + "éß漢🙂", max_size=70))
clusters = st.fixed_dictionaries(
    {"name": maybe(names),
     "compute": maybe(st.fixed_dictionaries({"instanceType": maybe(st.sampled_from(TYPES)),
                                             "count": maybe(st.sampled_from([0, 1, 2, 8, 512, 513, 10000, -1]))},
                                            optional={"efa": maybe(st.booleans()), "market": maybe(st.sampled_from(["spot", "on-demand", "cheap"])),
                                                      "gpus": st.integers()}))},
    optional={"headNode": maybe(st.fixed_dictionaries({"instanceType": maybe(st.sampled_from(TYPES))})),
              "availabilityZone": maybe(st.sampled_from(["us-east-1a", "eu-west-1b", "moon-1a"])),
              "fsx": maybe(st.fixed_dictionaries({}, optional={
                  "deploymentType": maybe(st.sampled_from(["SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2", "X"])),
                  "storageCapacityGiB": maybe(st.sampled_from([-1200, 0, 1000, 1200, 2400, 3600, 4800, 10**9])),
                  "perUnitStorageThroughput": maybe(st.sampled_from([50, 125, 250, 7])),
                  "mountPoint": maybe(st.sampled_from(["/fsx", "/", "relative", "/etc", "/data/x"])),
                  "dataRepositoryPath": maybe(st.sampled_from(["s3://bucket/x", "http://x", "s3://B"]))})),
              "ssh": maybe(st.fixed_dictionaries({"allowedCidrs": maybe(st.lists(st.sampled_from(
                  ["203.0.113.0/24", "0.0.0.0/0", "::/0", "10.0.0.300/8", "x"]), max_size=3))})),
              "tags": maybe(st.dictionaries(st.text(max_size=140), st.text(max_size=300), max_size=3)),
              "unknownKey": st.integers()})
regions = st.one_of(st.just("us-east-1"), junk)


def _named(problems):
    assert problems
    for path, message in problems:
        assert isinstance(path, str) and path and message, problems
        assert path.split(".")[0].split("[")[0] in ("cluster", "aws:region", "hpcc:cluster"), path


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
@given(region=regions, cluster=st.one_of(clusters, junk))
def test_every_config_parses_or_names_its_bad_fields(region, cluster):
    try:
        parse(region, cluster)
    except ConfigError as e:
        _named(e.problems)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=st.one_of(st.text(max_size=200), st.just("config: [unclosed"), st.just("config:\n  hpcc:cluster: {name: ok}\n\t- x")))
def test_malformed_yaml_files_are_rejected_with_a_message(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("yaml") / "Pulumi.fuzz.yaml"
    path.write_text(text)
    try:
        read_raw(path)
    except ConfigError as e:
        assert e.problems and all(msg for _, msg in e.problems)


small = st.fixed_dictionaries({
    "name": st.from_regex(r"[a-z][a-z0-9]{2,8}", fullmatch=True),
    "compute": st.fixed_dictionaries({"instanceType": st.sampled_from(["p4d.24xlarge", "c6i.16xlarge", "c5n.18xlarge", "p5.48xlarge"]),
                                      "count": st.integers(1, 3), "market": st.sampled_from(["spot", "on-demand"])}),
    "fsx": st.sampled_from([{}, {"deploymentType": "PERSISTENT_2", "perUnitStorageThroughput": 250, "storageCapacityGiB": 2400,
                                 "dataRepositoryPath": "s3://bucket/data"}]),
})


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(cluster=small)
def test_accepted_configs_plan_end_to_end(cluster):
    from infra.plan.runner import plan_config

    result = plan_config({"aws:region": "us-east-1", "hpcc:cluster": cluster})
    assert len(result.outputs["computeNodes"]) == cluster["compute"]["count"]


def test_yaml_dump_of_an_example_round_trips(tmp_path):
    doc = {"config": read_raw("examples/p5-llm.yaml")}
    path = tmp_path / "Pulumi.rt.yaml"
    path.write_text(yaml.safe_dump(doc))
    parse(read_raw(path)["aws:region"], read_raw(path)["hpcc:cluster"])
