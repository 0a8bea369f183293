"""The controller as the head runs it: `python -m hpcc_node.controller` with boto3's clients in process and with
boto3-shaped clients over the real AWS CLI (hpcc_node/awscli.py; HPCC_AWS_CLIENTS), against moto's server. The
clients' errors carry botocore's codes, S3's conditional requests work through them, and a loop launches a group,
names its instances, publishes the membership with the head, and accepts a node's status
only from the key of its own instance."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import boto3
import pytest

from hpcc_contract import groups as groups_format
from hpcc_contract import metrics
from hpcc_contract.ledger import table_definition
from hpcc_contract.names import Paths, ledger_table, state_bucket
from hpcc_node import awscli
from hpcc_node.controller import __main__ as main_mod
from hpcc_node.controller import membership
from hpcc_node.controller.ledger import read_name
from hpcc_node.settings import state_names
from tests.node.controller_fakes import moto_launch_template

CLUSTER, ACCOUNT, REGION = "c", "123456789012", "us-east-1"
BUCKET, TABLE = state_bucket(CLUSTER, ACCOUNT), ledger_table(CLUSTER)


def test_the_clis_error_text_is_botocores_error_code():
    e = awscli.parse_error(
        "\nAn error occurred (PreconditionFailed) when calling the PutObject operation: At least "
        "one of the pre-conditions you specified did not hold\n",
        "put_object",
    )
    assert e.response["Error"]["Code"] == "PreconditionFailed" and e.operation_name == "PutObject"
    e = awscli.parse_error("An error occurred (304) when calling the GetObject operation: Not Modified", "get_object")
    assert e.response["Error"]["Code"] == "304"
    e = awscli.parse_error(
        "An error occurred (RequestLimitExceeded) when calling the CreateFleet operation (reached "
        "max retries: 0): Request limit exceeded.",
        "create_fleet",
    )
    assert (
        e.response["Error"]["Code"] == "RequestLimitExceeded"
        and e.response["Error"]["Message"] == "Request limit exceeded."
    )
    e = awscli.parse_error(
        "Unable to locate credentials. You can configure credentials by running \"aws configure\".",
        "describe_instances",
    )
    assert e.response["Error"]["Code"] == "CliError" and "credentials" in e.response["Error"]["Message"]
    assert awscli.option("IfNoneMatch") == "--if-none-match" and awscli.option("Key") == "--key"


def test_the_state_names_come_from_the_settings_else_the_programs_names():
    assert state_names("SCHEDULER=slurm\n", "c", ACCOUNT) == (BUCKET, TABLE)
    assert state_names("STATE_BUCKET=b-1\nLEDGER_TABLE=t-1\n", "c", ACCOUNT) == ("b-1", "t-1")


@pytest.fixture(scope="module")
def server():
    from moto.server import ThreadedMotoServer

    srv = ThreadedMotoServer(port=0, verbose=False)
    srv.start()
    host, port = srv.get_host_and_port()
    url = f"http://{host}:{port}"
    env = {
        "AWS_ENDPOINT_URL": url,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_MAX_ATTEMPTS": "1",
        "AWS_PAGER": "",
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield url
    finally:
        srv.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def boto(service: str, url: str):
    return boto3.client(service, region_name=REGION, endpoint_url=url)


def test_s3s_conditional_requests_work_through_the_cli(server):
    s3 = awscli.client("s3")
    s3.create_bucket(Bucket="hpcc-cli-test")
    assert membership.head(s3, "hpcc-cli-test") == (0, "")
    etag = membership.publish(s3, "hpcc-cli-test", {"nodes": []}, 1, "")
    doc, read_etag = membership.read(s3, "hpcc-cli-test")
    assert doc["generation"] == 1 and read_etag == etag
    assert membership.read(s3, "hpcc-cli-test", etag) == (None, etag)  # 304: nothing transferred
    with pytest.raises(membership.Conflict):
        membership.publish(s3, "hpcc-cli-test", {"nodes": []}, 2, "")  # If-None-Match "*" on an existing key
    with pytest.raises(membership.Conflict):
        membership.publish(s3, "hpcc-cli-test", {"nodes": []}, 2, '"0000"')  # If-Match on another version
    membership.publish(s3, "hpcc-cli-test", {"nodes": [1]}, 2, etag)
    assert membership.read(s3, "hpcc-cli-test", etag)[0]["generation"] == 2
    for i in range(3):
        s3.put_object(Bucket="hpcc-cli-test", Key=f"status/{i}.json", Body=b"{}")
    pages = list(
        s3.get_paginator("list_objects_v2").paginate(
            Bucket="hpcc-cli-test", Prefix="status/", PaginationConfig={"PageSize": 2}
        )
    )
    assert [len(p["Contents"]) for p in pages] == [2, 1]
    with pytest.raises(awscli.ClientError) as e:
        s3.get_object(Bucket="hpcc-cli-test", Key="nothing")
    assert e.value.response["Error"]["Code"] == "NoSuchKey"


def groups_value(subnet: str, count: int) -> str:
    return groups_format.dumps(
        [
            {
                "name": "gpu",
                "instance_type": "p5.48xlarge",
                "count": count,
                "launch_template": "hpcc-c-gpu-lt",
                "subnet_id": subnet,
                "market": "on-demand",
                "efa": False,
                "root_volume_gib": 200,
                "slurm": {"cpus": 192, "real_memory": 1000, "gres": "gpu:8"},
            }
        ]
    )


def controller_env(**extra: str) -> dict:
    return {
        **os.environ,
        "HPCC_CLUSTER": CLUSTER,
        "HPCC_INSTANCE_ID": "i-0head",
        "HPCC_NODE_IP": "10.0.0.4",
        "HPCC_ACCOUNT": ACCOUNT,
        "HPCC_CONTROLLER_LOG": os.devnull,
        **extra,
    }


@pytest.fixture(params=["boto3", "cli"])
def clients_kind(request):
    return request.param


def test_the_controller_process_launches_names_and_publishes_with_the_head(server, clients_kind, caplog):
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(f"{server}/moto-api/reset", method="POST"), timeout=30)
    ec2, ssm = boto("ec2", server), boto("ssm", server)
    boto("dynamodb", server).create_table(**table_definition(TABLE))
    boto("s3", server).create_bucket(Bucket=BUCKET)
    subnet = moto_launch_template(ec2, "hpcc-c-gpu-lt", {"InstanceType": "p5.48xlarge"})["subnet"]
    ssm.put_parameter(Name=Paths(CLUSTER).groups, Type="String", Value=groups_value(subnet, 2))
    ssm.put_parameter(Name=Paths(CLUSTER).settings, Type="String", Value="SCHEDULER=none\n")
    env = controller_env(HPCC_CONTROLLER_ORPHAN_TIMEOUT_SECONDS="3600", HPCC_AWS_CLIENTS=clients_kind)
    caplog.set_level("INFO", logger=main_mod.LOG.name)
    assert main_mod.main(["--once"], env) == 0  # launches 2
    said = "in process (boto3)" if clients_kind == "boto3" else "through the AWS CLI"
    assert f"AWS calls {said}" in caplog.text
    assert main_mod.main(["--once"], env) == 0  # names them, tags them, publishes
    ids = [
        i["InstanceId"]
        for r in ec2.describe_instances(Filters=[{"Name": "tag:hpcc:group", "Values": ["gpu"]}])["Reservations"]
        for i in r["Instances"]
    ]
    assert len(ids) == 2
    ddb = awscli.client("dynamodb")
    names = sorted(read_name(ddb, TABLE, i) for i in ids)
    assert names == ["gpu-000", "gpu-001"]
    doc, _ = membership.read(awscli.client("s3"), BUCKET)
    assert doc["head"] == {"name": "head", "ip": "10.0.0.4", "instance": "i-0head"}
    assert sorted(n["name"] for n in doc["nodes"]) == names and doc["groups"] == {"gpu": 2}
    import hashlib  # the nodes read the settings from SSM only when this changes

    assert doc["bundle"] == {"settings_sha256": hashlib.sha256(b"SCHEDULER=none\n").hexdigest()}
    tags = {
        t["ResourceId"]: t["Value"]
        for t in ec2.describe_tags(Filters=[{"Name": "key", "Values": ["hpcc:node"]}])["Tags"]
    }
    assert sorted(tags[i] for i in ids) == names
    # The nodes report as the bootstrap and the agent do (hpcc_node/status.py): gpu-000 at its own key; gpu-001's
    # report under another instance's key is no report. The next loop takes gpu-000 for ready, gpu-001 boots on.
    from hpcc_node import status

    by_name = {read_name(ddb, TABLE, i): i for i in ids}
    s3 = awscli.client("s3")
    for name, key_instance in (("gpu-000", by_name["gpu-000"]), ("gpu-001", "i-0ffffffffffffffff")):
        body = status.status(
            {"node": name, "ip": "10.0.0.9", "instanceId": by_name[name], "hostsVersion": 1},
            "ready",
            True,
            "bootstrap finished",
            bundle="",
            log_tail=[],
            step="ready",
        )
        s3.put_object(
            Bucket=BUCKET,
            Key=membership.status_key(membership.instance_arn("aws", REGION, ACCOUNT, key_instance)),
            Body=body.encode(),
        )
    assert main_mod.main(["--once"], env) == 0
    doc, _ = membership.read(s3, BUCKET)
    assert {n["name"]: n["state"] for n in doc["nodes"]} == {"gpu-000": "ready", "gpu-001": "booting"}
    # its series go to node_exporter's textfile directory unless the environment names another
    made = os.path.isdir(metrics.TEXTFILE_DIR)  # by the metrics step, where observability is on; else none
    assert main_mod.build(env)[0].series.directory == (metrics.TEXTFILE_DIR if made else None)
    assert main_mod.build({**env, "HPCC_METRICS_DIR": "/run/m"})[0].series.directory == "/run/m"


def test_the_controller_refuses_to_start_without_its_settings_naming_what_is_missing(server, caplog):
    env = controller_env()
    del env["HPCC_NODE_IP"]
    assert main_mod.main(["--once"], env) == 2
    assert "HPCC_NODE_IP is not set" in caplog.text


def test_a_malformed_groups_parameter_is_named_with_its_fix():
    with pytest.raises(main_mod.ConfigError, match="/hpcc/c/groups is not JSON"):
        main_mod.parse_groups("{", "/hpcc/c/groups")
    with pytest.raises(main_mod.ConfigError, match=r"groups\[0\] \(gpu\): count"):
        main_mod.parse_groups(
            groups_format.dumps([{"name": "gpu", "instance_type": "t3.micro", "count": -1}]), "/hpcc/c/groups"
        )
    with pytest.raises(main_mod.ConfigError, match="HPCC_CONTROLLER_LOOP_SECONDS"):
        main_mod.timers_from_env({"HPCC_CONTROLLER_LOOP_SECONDS": "soon"})
    assert main_mod.timers_from_env({"HPCC_CONTROLLER_LOOP_SECONDS": "5"}).loop_seconds == 5


def test_the_controllers_log_has_each_line_once_when_its_stderr_is_the_log_itself(tmp_path):
    """Without systemd the supervisor sends stderr to controller.log, where the controller also writes."""
    import subprocess
    import sys

    log = tmp_path / "controller.log"
    code = (
        "import sys; from hpcc_node.controller.__main__ import setup_log; "
        f"setup_log({str(log)!r}).info('one line'); sys.exit(0)"
    )
    with open(log, "ab") as out:
        subprocess.run([sys.executable, "-c", code], stderr=out, check=True)
    assert log.read_text().count("one line") == 1
    other = tmp_path / "journal"
    with open(other, "wb") as out:
        subprocess.run([sys.executable, "-c", code], stderr=out, check=True)
    assert other.read_text().count("one line") == 1 and log.read_text().count("one line") == 2


def test_a_failed_read_of_the_bundle_pointer_keeps_the_last_one_so_the_membership_does_not_flap():
    class Ssm:
        fail = False

        def get_parameters(self, Names):
            if self.fail:
                raise awscli.ClientError("ThrottlingException", "slow down", "GetParameters")
            return {"Parameters": [{"Name": Names[0], "Value": '{"sha256": "abc"}'}, {"Name": Names[1], "Value": "S"}]}

    ssm = Ssm()
    read = main_mod.follow_reader(ssm, CLUSTER)
    first = read()
    assert first["sha256"] == "abc" and first["settings_sha256"]
    ssm.fail = True
    assert read() == first


def test_with_ssm_down_the_groups_last_read_are_kept_and_said(caplog):
    """SSM throttled or down (botocore's errors as the CLI's): the loop reconciles EC2 and Slurm on the groups last
    read instead of failing whole (issue 38); a first read that fails still fails, having nothing to keep."""
    from botocore.exceptions import EndpointConnectionError

    class Ssm:
        error: Exception | None = None

        def get_parameter(self, Name):
            if self.error:
                raise self.error
            return {"Parameter": {"Value": groups_value("subnet-1", 2)}}

    ssm = Ssm()
    ssm.error = awscli.ClientError("ThrottlingException", "slow down", "GetParameter")
    with pytest.raises(awscli.ClientError):
        main_mod.groups_reader(ssm, CLUSTER)()
    ssm.error = None
    read = main_mod.groups_reader(ssm, CLUSTER)
    first = read()
    assert [(g.name, g.count) for g in first] == [("gpu", 2)]
    caplog.set_level("WARNING", logger=main_mod.LOG.name)
    for error in (
        awscli.ClientError("ThrottlingException", "slow down", "GetParameter"),
        EndpointConnectionError(endpoint_url="https://ssm.us-east-1.amazonaws.com"),
    ):
        ssm.error = error
        assert read() == first
    assert caplog.text.count("this loop keeps the groups last read") == 2
