"""The `containers:` section (issue 35): on by default with Slurm only, the shared cache's cap against the file system,
the NGC secret named (never given), and the rules that warn rather than refuse. Nothing reads the section yet."""

import pytest

from infra.config.parse import ConfigError, parse
from infra.config.validators.check import check_config
from infra.config.validators.containers import secret_problem, secret_ref
from infra.config.validators.findings import NOT_SHOWN
from tests.config.test_rules import cluster, problems

ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:ngc-api-key-AbCdEf"


def configured(region="us-east-1", **overrides):
    return parse(region, cluster(**overrides)).cluster


def warnings(region="us-east-1", **overrides):
    cfg = parse(region, cluster(**overrides))
    return [(f.field, f.message) for f in check_config(cfg) if f.severity == "warning"]


@pytest.mark.parametrize(
    "overrides,on",
    [
        ({}, False),  # scheduler none: no Slurm, no pyxis
        ({"scheduler": "slurm"}, True),
        ({"scheduler": "slurm", "containers__enabled": False}, False),
        ({"containers__enabled": False}, False),  # off is fine anywhere
    ],
)
def test_containers_are_on_by_default_with_slurm_only(overrides, on):
    assert configured(**overrides).containers_on is on


def test_the_defaults_follow_enroot_and_pyxis_except_where_said():
    c = configured(scheduler="slurm").containers
    assert (c.ecr, c.ngc_secret, c.cache_max_gib) == (True, None, None)
    e = c.enroot
    assert (e.max_processors, e.max_connections, e.connect_timeout_seconds, e.transfer_timeout_seconds) == (
        None,
        10,
        30,
        0,
    )
    assert (e.transfer_retries, e.squash_compression, e.rootfs_writable, e.restrict_dev, e.allow_http) == (
        3,
        "none",
        True,
        False,
        False,
    )
    assert (c.pyxis.container_scope, c.pyxis.execute_entrypoint, c.pyxis.sbatch_support) == ("job", False, True)


@pytest.mark.parametrize("capacity,cap", [(1200, 300), (2400, 600), (4800, 1200)])
def test_the_cache_takes_a_quarter_of_the_file_system_by_default(capacity, cap):
    assert configured(scheduler="slurm", fsx__storageCapacityGiB=capacity).image_cache_gib == cap
    assert configured(scheduler="slurm", containers__cacheMaxGiB=100).image_cache_gib == 100


def test_a_cap_up_to_the_file_system_passes_and_over_half_of_it_warns():
    assert configured(scheduler="slurm", containers__cacheMaxGiB=1200).image_cache_gib == 1200
    found = warnings(scheduler="slurm", containers__cacheMaxGiB=601)
    assert [f for f, _ in found] == ["cluster.containers.cacheMaxGiB"]
    assert not warnings(scheduler="slurm", containers__cacheMaxGiB=600)
    # With containers off the cap is not checked against the file system (it has no effect; another rule warns).
    found = problems(scheduler="slurm", containers__enabled=False, containers__cacheMaxGiB=5000)
    assert not [f for f, _ in found if f == "cluster.containers.cacheMaxGiB"]


def test_every_hpcc_cluster_has_its_file_system():
    """The containers rules lean on this: a cluster without the shared file system cannot be written today. Making
    `fsx` optional must add a rule refusing containers without it (validators/containers.py)."""
    found = problems(scheduler="slurm", fsx=None)
    assert [f for f, _ in found] == ["cluster.fsx"]


@pytest.mark.parametrize(
    "text,name,region",
    [
        ("ngc-api-key", "ngc-api-key", None),
        ("team/ml/ngc_key+1=@.", "team/ml/ngc_key+1=@.", None),
        (ARN, "ngc-api-key-AbCdEf", "us-east-1"),
    ],
)
def test_the_ngc_secret_is_a_name_or_an_arn(text, name, region):
    ref = secret_ref(text)
    assert ref is not None and (ref.name, ref.region) == (name, region)
    assert configured(scheduler="slurm", containers__ngcSecret=text).containers.ngc_secret == text


@pytest.mark.parametrize(
    "text,words",
    [
        ("nvapi-Abc_def-123", "looks like an NGC API key itself"),
        ("a" * 20 + "0123456789" * 3, "looks like an NGC API key itself"),
        ("ngc key", "at most 512 of letters"),
        ("x." * 257, "at most 512 of letters"),
        ("arn:aws:secretsmanager:us-east-1:123:secret:x", "not a Secrets Manager secret's ARN"),
        ("arn:aws-cn:secretsmanager:cn-north-1:123456789012:secret:x", "not a Secrets Manager secret's ARN"),
        ("", "at most 512 of letters"),
    ],
)
def test_a_bad_secret_is_refused_by_name_and_never_echoed(text, words):
    assert words in (secret_problem(text) or "")
    with pytest.raises(ConfigError) as e:
        parse("us-east-1", cluster(scheduler="slurm", containers__ngcSecret=text))
    [(field, message)] = e.value.problems
    assert field == "cluster.containers.ngcSecret" and words in message and NOT_SHOWN in message
    assert "got" not in message and (not text or text not in message)


def test_a_secret_in_another_region_warns():
    found = warnings(region="eu-west-1", scheduler="slurm", containers__ngcSecret=ARN)
    assert [(f, "us-east-1" in m and "eu-west-1" in m) for f, m in found] == [("cluster.containers.ngcSecret", True)]
    assert not warnings(scheduler="slurm", containers__ngcSecret=ARN)


def test_settings_with_containers_off_warn_by_their_keys():
    found = warnings(scheduler="slurm", containers__enabled=False, containers__ngcSecret="ngc", containers__ecr=False)
    assert found == [("cluster.containers", found[0][1])] and found[0][1].startswith("ecr, ngcSecret have no effect")
    assert not warnings(scheduler="slurm", containers__enabled=False)


def test_a_restricted_dev_warns_where_a_group_has_efa():
    found = warnings(scheduler="slurm", containers__enroot__restrictDev=True)
    assert [f for f, _ in found] == ["cluster.containers.enroot.restrictDev"] and "/dev/infiniband" in found[0][1]
    assert not warnings(scheduler="slurm", containers__enroot__restrictDev=True, compute__efa=False)


def test_a_section_without_slurm_is_refused_but_enabled_false_is_not():
    assert [f for f, _ in problems(containers__pyxis__containerScope="global")] == ["cluster.containers"]
    assert not problems(containers__enabled=False)
    assert not problems()


DIGEST = "sha256:" + "0123456789abcdef" * 4


def test_the_release_digests_are_the_pinned_enroots_files_by_name():
    given = {"enroot_4.1.2-1_amd64.deb": DIGEST, "enroot+caps_4.1.2-1_arm64.deb": DIGEST}
    assert configured(scheduler="slurm", containers__releaseDigests=given).containers.release_digests == given
    assert configured(scheduler="slurm").containers.release_digests == {}


@pytest.mark.parametrize(
    "given,words",
    [
        ({"enroot_4.0.0-1_amd64.deb": DIGEST}, "is not a file of enroot 4.1.2, the release hpcc installs"),
        ({"enroot_4.1.2-1_i386.deb": DIGEST}, "the known ones are enroot_4.1.2-1_amd64.deb, enroot+caps_4.1.2-1_amd64"),
        ({"enroot_4.1.2-1_amd64.deb": DIGEST[7:]}, "sha256:<64 lowercase hex digits>"),
        ({"enroot_4.1.2-1_amd64.deb": DIGEST.upper()}, "is not a digest as GitHub's release API gives it"),
        ({"enroot_4.1.2-1_amd64.deb": "sha512:" + "0" * 128}, "hpcc pin containers"),
    ],
)
def test_a_bad_release_digest_is_refused_naming_the_field(given, words):
    with pytest.raises(ConfigError) as e:
        parse("us-east-1", cluster(scheduler="slurm", containers__releaseDigests=given))
    [(field, message)] = e.value.problems
    assert field == "cluster.containers.releaseDigests" and words in message, message
