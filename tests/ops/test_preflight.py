"""Preflight against moto, with faults injected where AWS would refuse (capacity, quota) and answers
injected where moto does not model the API (Service Quotas for EC2, capacity reservations)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from infra.config.stackfile import load
from infra.config.validators.findings import ERROR, INFO, WARNING
from infra.ops.aws import Aws, Backoff
from infra.ops.cli import app
from infra.ops.preflight.rules import has_errors, preflight
from infra.plan.embedded_aws import embedded_aws
from tests.ops.support import EXAMPLES, edit_response, inject_errors, inject_response, stack_file


@pytest.fixture
def aws():
    with embedded_aws("us-east-1"):
        yield Aws("us-east-1", backoff=Backoff(sleep=lambda _: None))


def run(aws, path):
    return preflight(aws, load(path))


def by(findings, severity, field=None):
    return [f for f in findings if f.severity == severity and (field is None or f.field == field)]


def test_clean_cpu_cluster_passes_and_says_the_quota_was_not_read(aws):
    findings = run(aws, EXAMPLES / "c6i-oneccl.yaml")
    assert not has_errors(findings), findings
    quota = [f for f in by(findings, WARNING) if "vCPU quota" in f.message]
    # moto has no EC2 quotas: the check must say it could not read them, never pass silently.
    assert quota and all("could not read" in f.message and "L-" in f.message for f in quota)
    dry = [f.message for f in by(findings, INFO) if f.message.startswith("dry run")]
    assert len(dry) == 2 and "4 x c6i.16xlarge in us-east-1a" in dry[1]


def test_capacity_error_on_dry_run_becomes_advice(aws):
    inject_errors(aws.client("ec2"), "RunInstances", ["DryRunOperation", "InsufficientInstanceCapacity"])
    findings = run(aws, EXAMPLES / "p3dn-bert.yaml")
    [err] = [f for f in by(findings, ERROR, "cluster.compute.instanceType")]
    assert "InsufficientInstanceCapacity" in err.message
    assert "no p3dn.24xlarge capacity for 8 instance(s) in us-east-1c" in err.message
    assert "us-east-1c, us-east-1d" in err.message and "capacityReservationId" in err.message


@pytest.mark.parametrize("code, quota", [("VcpuLimitExceeded", "L-417A185B"), ("InstanceLimitExceeded", "L-417A185B")])
def test_quota_error_on_dry_run_names_the_quota(aws, code, quota):
    inject_errors(aws.client("ec2"), "RunInstances", ["DryRunOperation", code])
    findings = run(aws, EXAMPLES / "p5-llm.yaml")
    [err] = by(findings, ERROR, "cluster.compute.instanceType")
    assert code in err.message and quota in err.message and "increase" in err.message


@pytest.mark.parametrize(
    "code, words", [("Unsupported", "AZs offering it"), ("InsufficientFreeAddressesInSubnet", "free addresses")]
)
def test_other_dry_run_refusals_become_advice(aws, code, words):
    inject_errors(aws.client("ec2"), "RunInstances", [code])
    findings = run(aws, EXAMPLES / "c6i-oneccl.yaml")
    [err] = by(findings, ERROR, "cluster.headNode.instanceType")
    assert code in err.message and words in err.message


def test_vcpu_quota_read_and_too_small(aws):
    inject_response(
        aws.client("service-quotas"), "GetServiceQuota", {"Quota": {"QuotaCode": "L-417A185B", "Value": 192.0}}
    )
    findings = run(aws, EXAMPLES / "p5-llm.yaml")
    errs = [f for f in by(findings, ERROR) if "vCPUs" in f.message]
    assert len(errs) == 1 and "needs 384 vCPUs" in errs[0].message and "quota is 192" in errs[0].message
    assert "request-service-quota-increase" in errs[0].message


def test_no_az_configured_picks_one_offering_every_type_and_says_why(aws):
    findings = run(aws, EXAMPLES / "p3dn-bert.yaml")
    [info] = by(findings, INFO, "cluster.availabilityZone")
    assert "goes to us-east-1c" in info.message and "c5n.18xlarge, p3dn.24xlarge" in info.message
    assert "EFA" in info.message and "us-east-1d" in info.message


def test_az_that_does_not_offer_the_type(aws, tmp_path):
    findings = run(aws, stack_file(tmp_path, "p3dn-bert", availabilityZone="us-east-1a"))
    [err] = by(findings, ERROR, "cluster.compute.instanceType")
    assert "not offered in us-east-1a" in err.message and "us-east-1c, us-east-1d" in err.message


BASE_OSS = {"family": "base-oss-nvidia-driver-gpu-ubuntu-22.04"}  # the example's proprietary-driver image swapped out


def test_base_oss_image_does_not_support_p3dn(aws, tmp_path):
    findings = run(aws, stack_file(tmp_path, "p3dn-bert", image=BASE_OSS))
    [err] = by(findings, ERROR, "cluster.image")
    assert "p3dn.24xlarge" in err.message and "amiId" in err.message
    assert not by(findings, WARNING, "cluster.image")  # the live finding replaces the config rule's guess


def test_missing_image_is_an_error(aws, tmp_path):
    findings = run(aws, stack_file(tmp_path, "c6i-oneccl", image={"amiId": "ami-0123456789abcdef0"}))
    [err] = by(findings, ERROR, "cluster.image")
    assert "no such image" in err.message


def test_efa_supported_but_off_is_a_warning(aws, tmp_path):
    findings = run(
        aws, stack_file(tmp_path, "p5-llm", compute={"instanceType": "p5.48xlarge", "count": 2, "efa": False})
    )
    assert [f for f in by(findings, WARNING, "cluster.compute.efa") if "supports EFA but it is turned off" in f.message]


def test_placement_strategy_unsupported(aws):
    def no_cluster(parsed):
        for t in parsed.get("InstanceTypes", []):
            t["PlacementGroupInfo"] = {"SupportedStrategies": ["partition", "spread"]}

    edit_response(aws.client("ec2"), "DescribeInstanceTypes", no_cluster)
    findings = run(aws, EXAMPLES / "c6i-oneccl.yaml")
    assert len([f for f in by(findings, ERROR) if "`cluster` placement strategy" in f.message]) == 2


def test_capacity_reservation_mismatch(aws, tmp_path):
    path = stack_file(
        tmp_path,
        "p5-llm",
        compute={"instanceType": "p5.48xlarge", "count": 2, "capacityReservationId": "cr-0123456789abcdef0"},
    )
    inject_response(
        aws.client("ec2"),
        "DescribeCapacityReservations",
        {
            "CapacityReservations": [
                {
                    "CapacityReservationId": "cr-0123456789abcdef0",
                    "InstanceType": "p4d.24xlarge",
                    "AvailabilityZone": "us-east-1b",
                    "AvailableInstanceCount": 1,
                    "TotalInstanceCount": 4,
                    "State": "active",
                }
            ]
        },
    )
    errs = by(run(aws, path), ERROR, "cluster.compute.capacityReservationId")
    text = " | ".join(e.message for e in errs)
    assert len(errs) == 3 and "reserves p4d.24xlarge" in text and "us-east-1b" in text and "1 of 4" in text


def test_capacity_reservation_unreadable_is_a_warning(aws, tmp_path):
    path = stack_file(
        tmp_path,
        "p5-llm",
        compute={"instanceType": "p5.48xlarge", "count": 2, "capacityReservationId": "cr-0123456789abcdef0"},
    )
    warns = by(run(aws, path), WARNING, "cluster.compute.capacityReservationId")
    assert warns and "not checked" in warns[0].message


def test_cli_exit_status(tmp_path):
    runner = CliRunner()
    ok = runner.invoke(app, ["preflight", str(EXAMPLES / "c6i-oneccl.yaml"), "--emulate"])
    assert ok.exit_code == 0, ok.output
    bad = runner.invoke(app, ["preflight", str(stack_file(tmp_path, "p3dn-bert", image=BASE_OSS)), "--emulate"])
    assert bad.exit_code == 1 and "error" in bad.output and "Traceback" not in bad.output
    missing = runner.invoke(app, ["preflight", str(tmp_path / "nope.yaml"), "--emulate"])
    assert missing.exit_code == 2 and "Traceback" not in missing.output


def _keep_az(aws, cluster: str, zone: str) -> None:
    from hpcc_contract.names import Paths

    aws.client("ssm").put_parameter(Name=Paths(cluster).pinned_az, Value=zone, Type="String")


def test_a_cluster_stays_in_the_az_its_first_up_kept(aws):
    cfg = load(EXAMPLES / "p3dn-bert.yaml")
    assert cfg.cluster.availability_zone is None  # the program chose the AZ at the first up
    _keep_az(aws, cfg.cluster.name, "us-east-1d")  # not the first AZ offering both types today (1c)
    findings = run(aws, EXAMPLES / "p3dn-bert.yaml")
    # (but the unpinned containers downloads: test_containers_on_are_refused_while_...)
    assert [f for f in by(findings, ERROR) if f.field != "cluster.containers.releaseDigests"] == [], findings
    assert [f.message for f in by(findings, INFO, "cluster.availabilityZone")] == [
        "none configured: the cluster stays in us-east-1d, kept since its first `pulumi up`"
    ]
    dry = [f.message for f in by(findings, INFO) if f.message.startswith("dry run")]
    assert dry and all(m.endswith("in us-east-1d") for m in dry)


def test_a_new_type_the_kept_az_does_not_offer_is_an_error_naming_both(aws):
    cfg = load(EXAMPLES / "p3dn-bert.yaml")
    _keep_az(aws, cfg.cluster.name, "us-east-1a")  # p3dn.24xlarge: us-east-1c/1d only
    [err] = by(run(aws, EXAMPLES / "p3dn-bert.yaml"), ERROR, "cluster.compute.instanceType")
    assert err.message.startswith(
        "p3dn.24xlarge is not offered in us-east-1a, the availability zone this cluster "
        "has used since its first `pulumi up` (offered in: us-east-1c, us-east-1d)"
    )


def test_containers_on_are_refused_until_the_stack_pins_enroots_digests(aws, tmp_path, monkeypatch):
    """The containers step checks each .deb against its pinned sha256: none pinned would fail every node's boot, so
    preflight (and `hpcc up`) refuses the deploy, naming the files, the field and the way to fill it; the stack's
    containers.releaseDigests for the cluster's architecture let it through."""
    import yaml

    from infra.facts import containers as facts

    monkeypatch.setattr(facts, "SHA256", dict.fromkeys(facts.SHA256))  # the project's own pins: none assumed
    field = "cluster.containers.releaseDigests"
    raw = yaml.safe_load((EXAMPLES / "c6i-oneccl.yaml").read_text())
    off = run(aws, EXAMPLES / "c6i-oneccl.yaml")  # no Slurm: no containers
    assert not [f for f in off if f.field == field]
    raw["config"]["hpcc:cluster"]["scheduler"] = "slurm"
    path = tmp_path / "Pulumi.slurm.yaml"
    path.write_text(yaml.safe_dump(raw))
    [err] = [f for f in run(aws, path) if f.field == field]
    assert err.severity == ERROR and f"enroot_{facts.ENROOT_VERSION}-1_amd64.deb" in err.message
    assert "`hpcc pin containers STACK_FILE`" in err.message and field in err.message
    assert "containers.enabled: false" in err.message and "arm64" not in err.message
    digests = {n: "sha256:" + "ab" * 32 for n in facts.enroot_asset_names(("x86_64",))}
    raw["config"]["hpcc:cluster"]["containers"] = {"releaseDigests": digests}
    path.write_text(yaml.safe_dump(raw))
    assert [f for f in run(aws, path) if f.field == field] == []
