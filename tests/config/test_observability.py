"""The `observability:` section (issue 34): its defaults by scheduler, Prometheus's duration grammar and the one
spelling the nodes get, the workspace an ARN names and its endpoint, and the two rules that warn rather than refuse."""

import re

import pytest

from infra.config.parse import parse
from infra.config.validators.check import check_config
from infra.config.validators.metrics import canonical, duration_ms, workspace, workspace_arn_problem
from infra.render import prometheus
from tests.config.test_rules import cluster, problems

ARN = "arn:aws:aps:us-east-1:123456789012:workspace/ws-b226cc2a-a446-46a9-933a-ac50479a5568"


def observed(region="us-east-1", **overrides):
    return parse(region, cluster(**overrides)).cluster


@pytest.mark.parametrize(
    "overrides,on",
    [
        ({}, False),  # scheduler none: a cluster from before the section runs what it ran
        ({"scheduler": "slurm"}, True),
        ({"scheduler": "slurm", "observability__enabled": False}, False),
        ({"observability__enabled": True}, True),  # the exporters and Prometheus need no Slurm
    ],
)
def test_metrics_are_on_by_default_with_slurm_only_and_enabled_decides(overrides, on):
    assert observed(**overrides).metrics_on is on


def test_the_defaults_are_thirty_seconds_and_fifteen_days_and_no_workspace():
    o = observed().observability
    assert (o.scrape_interval, o.retention, o.remote_write) == ("30s", "15d", None)


@pytest.mark.parametrize(
    "text,ms",
    [
        ("30s", 30_000),
        ("1h30m", 5_400_000),
        ("1m", 60_000),
        ("1ms", 1),
        ("1m1ms", 60_001),
        ("2w", 14 * 86_400_000),
        ("1y", 365 * 86_400_000),
        ("0", 0),
        ("", None),
        ("30m1h", None),  # larger units first
        ("1.5h", None),
        ("-1s", None),
        ("1h 30m", None),
        ("30S", None),
        ("1d1d", None),
    ],
)
def test_durations_are_read_as_prometheus_reads_them(text, ms):
    assert duration_ms(text) == ms


@pytest.mark.parametrize(
    "text,spelled",
    [
        ("30s", "30s"),
        ("120s", "2m"),
        ("1h30m", "90m"),
        ("360h", "15d"),
        ("14d", "2w"),
        ("365d", "1y"),
        ("5500ms", "5500ms"),
    ],
)
def test_the_head_gets_one_spelling_its_prometheus_configuration_takes(text, spelled):
    assert canonical(text) == spelled
    assert prometheus.check_duration(spelled, "retention") == spelled and duration_ms(spelled) == duration_ms(text)


def test_the_workspace_arn_gives_its_region_and_remote_write_endpoint():
    ws = workspace(ARN)
    assert ws is not None and (ws.region, ws.account, ws.id) == ("us-east-1", "123456789012", ARN.rsplit("/", 1)[1])
    assert ws.remote_write_url == (
        "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-b226cc2a-a446-46a9-933a-ac50479a5568"
        "/api/v1/remote_write"
    )
    assert re.fullmatch(prometheus.AMP_URL, ws.remote_write_url)  # the endpoint the head's configuration signs for


@pytest.mark.parametrize(
    "arn,words",
    [
        ("https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write", "not a URL"),
        ("arn:aws-cn:aps:cn-north-1:123456789012:workspace/ws-1", "aws-cn partition"),
        ("arn:aws:aps:us-east-1:123456789012:rulegroupsnamespace/ws-1/rules", "resource rulegroupsnamespace"),
        ("arn:aws:amp:us-east-1:123456789012:workspace/ws-1", "service amp"),
        ("arn:aws:aps:us-east-1:1234:workspace/ws-1", "12-digit account"),
        ("arn:aws:aps:us-east-1:123456789012:workspace/ws-1 ; rm -rf /", "ws-..."),
        ("arn:aws:aps:us-east-1:123456789012:workspace/" + "ws-" + "a" * 62, "ws-..."),  # ids are at most 64
    ],
)
def test_an_arn_that_names_no_workspace_says_what_to_give(arn, words):
    problem = workspace_arn_problem(arn)
    assert problem and words in problem and "arn:aws:aps:<region>:<account>:workspace/ws-" in problem
    assert any(
        f == "cluster.observability.remoteWrite.workspaceArn"
        for f, _ in problems(observability__remoteWrite__workspaceArn=arn)
    )


def _warnings(region="us-east-1", **overrides):
    cfg = parse(region, cluster(**overrides))
    return {(f.field, f.severity): f.message for f in check_config(cfg)}


def test_a_workspace_in_another_region_is_a_warning_not_an_error():
    """AMP takes remote writes across Regions (its User Guide, "Use cross Region workspaces"): allowed, said."""
    elsewhere = ARN.replace("us-east-1", "eu-west-1")
    found = _warnings(scheduler="slurm", observability__remoteWrite__workspaceArn=elsewhere)
    message = found[("cluster.observability.remoteWrite.workspaceArn", "warning")]
    assert "eu-west-1" in message and "us-east-1" in message and "cross Regions" in message
    assert not [k for k in found if k[1] == "error"]
    assert not _warnings(scheduler="slurm", observability__remoteWrite__workspaceArn=ARN)


@pytest.mark.parametrize(
    "overrides",
    [{}, {"scheduler": "slurm", "observability__enabled": False}],
    ids=["default without slurm", "enabled false"],
)
def test_a_workspace_with_metrics_off_is_a_warning_and_grants_nothing(overrides):
    found = _warnings(observability__remoteWrite__workspaceArn=ARN, **overrides)
    assert "no effect" in found[("cluster.observability.remoteWrite", "warning")]
    assert observed(observability__remoteWrite__workspaceArn=ARN, **overrides).metrics_workspace_arn is None
    assert observed(scheduler="slurm", observability__remoteWrite__workspaceArn=ARN).metrics_workspace_arn == ARN


def test_the_bundle_carries_the_heads_prometheus_configuration_as_the_section_says():
    """What reaches the head (infra/render/bundle.py metrics_files, the head's flags from roles.py): the interval,
    the workspace's endpoint signed for its Region, the retention; nothing with metrics off."""
    import yaml

    from infra.render.bundle import metrics_files
    from infra.render.roles import head_prometheus_flags

    remote = {"observability__scrapeInterval": "1m", "observability__retention": "720h"}
    cfg = observed(scheduler="slurm", observability__remoteWrite={"workspaceArn": ARN}, **remote)
    files = metrics_files(cfg)
    doc = yaml.safe_load(files["metrics/prometheus.yml"])
    assert doc["global"]["scrape_interval"] == "1m"
    assert doc["remote_write"] == [{"url": workspace(ARN).remote_write_url, "sigv4": {"region": "us-east-1"}}]
    assert yaml.safe_load(files["metrics/rules.yml"]) == yaml.safe_load(prometheus.alert_rules())
    (source,) = yaml.safe_load(files["metrics/grafana/datasources.yaml"])["datasources"]  # Grafana's $__rate_interval
    assert source["jsonData"]["timeInterval"] == "1m" and "metrics/dashboards/hpcc-job.json" in files
    assert "--storage.tsdb.retention.time=30d" in head_prometheus_flags(cfg)
    off = observed(scheduler="slurm", observability__enabled=False)
    assert metrics_files(off) == {} and head_prometheus_flags(off) == ()


def test_the_retention_size_is_forty_percent_of_the_heads_root_volume_unless_given():
    from infra.render.roles import head_prometheus_flags

    assert "--storage.tsdb.retention.size=80GB" in head_prometheus_flags(observed(scheduler="slurm"))
    bigger = observed(scheduler="slurm", headNode__rootVolumeGiB=1000)
    assert "--storage.tsdb.retention.size=400GB" in head_prometheus_flags(bigger)
    given = observed(scheduler="slurm", observability__retentionSize="512MB")
    assert "--storage.tsdb.retention.size=512MB" in head_prometheus_flags(given)
    assert problems(scheduler="slurm", observability__retentionSize="160GB") == []  # 80% of 200 GiB


@pytest.mark.parametrize(
    "size, words",
    [
        ("80", "has no unit: write 80GB"),
        ("80 GB", "is not a size"),
        ("80GiB", "is not a size"),
        ("1.5TB", "is not a size"),
        ("161GB", "more than 160GB, 80% of the head's root volume (headNode.rootVolumeGiB: 200)"),
        ("1TB", "raise headNode.rootVolumeGiB"),
    ],
)
def test_a_retention_size_that_is_no_size_or_would_fill_the_head_says_what_to_give(size, words):
    found = problems(scheduler="slurm", observability__retentionSize=size)
    assert [f for f, m in found if f.endswith("observability.retentionSize") and words in m], found


def test_the_real_prometheus_takes_the_rendered_command_line(tmp_path):
    """Debian's Prometheus started with the head's flags but its address: it serves, and says the size it keeps."""
    import json
    import socket
    import subprocess
    import time
    import urllib.request

    from infra.render.roles import head_prometheus_flags
    from tests.node.metrics_support import tool

    config = tmp_path / "prometheus.yml"
    config.write_text("global: {scrape_interval: 30s}\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    flags = [
        f"--config.file={config}" if f.startswith("--config.file=") else
        f"--storage.tsdb.path={tmp_path / 'data'}" if f.startswith("--storage.tsdb.path=") else f
        for f in head_prometheus_flags(observed(scheduler="slurm", observability__retentionSize="3GB"))
    ]  # fmt: skip
    proc = subprocess.Popen(
        [tool("prometheus"), *flags, f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline, got = time.monotonic() + 60, None
        while got is None and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else "prometheus exited"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/status/flags", timeout=5) as r:
                    got = json.loads(r.read())["data"]
            except OSError:
                time.sleep(0.3)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    # it reads the size as powers of 2, as the flag's help says: 3GB is 3GiB
    assert got and (got["storage.tsdb.retention.size"], got["storage.tsdb.retention.time"]) == ("3GiB", "15d"), got


def test_metrics_on_amazon_linux_are_refused_at_plan_time_naming_the_images_that_have_the_packages():
    al2023 = {"image__family": "base-oss-nvidia-driver-gpu-amazon-linux-2023"}
    found = problems(observability__enabled=True, **al2023)
    assert [m for f, m in found if f == "cluster.observability.enabled" and "ubuntu-22.04" in m], found
    assert not [f for f, _ in problems(observability__enabled=False, **al2023) if "observability" in f]
    assert not [f for f, _ in problems(observability__enabled=True) if "observability" in f]  # Ubuntu's have them
