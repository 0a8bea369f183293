"""The bootstrap's S3 reads and writes go in process once the bundle is here (templates/steps/retry.sh.j2 aws_retry,
hpcc_node/s3rest.py main): against moto's S3 they store and read what the CLI would, a missing key is aws_retry's
"not found" (3), a status report lands as the controller reads it, and every other service stays on the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.render.test_bootstrap_steps import COMMON, STATUS_KEY, calls, ctx_for, preamble, run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def moto_s3():
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    s3 = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
    )
    yield endpoint, s3
    server.stop()


def bucket(s3) -> str:
    """The state bucket, made after the test's render context: building one enters and leaves moto's in-process mock,
    which empties every backend of this process, the server's too."""
    name = "hpcc-llm-state-123456789012"
    if name not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=name)
    return name


def shell_env(env: dict, endpoint: str, **extra: str) -> dict:
    return {
        **env,
        "HPCC_PY_PATH": str(ROOT),
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_DEFAULT_REGION": "us-east-1",
        **extra,
    }


def test_s3_reads_and_writes_run_in_process_and_other_services_on_the_cli(fake, moto_s3):
    tmp_path, _, env = fake
    endpoint, s3 = moto_s3
    ctx = ctx_for(tmp_path)
    bucket(s3)
    (tmp_path / "answers").write_text("0|from the cli\n")
    (tmp_path / "body.json").write_text('{"a": 1}')
    script = (
        preamble(tmp_path)
        + "B=hpcc-llm-state-123456789012\n"
        + "aws_retry s3api put-object --bucket $B --key x/a.json --content-type application/json "
        + f"--body {tmp_path}/body.json\n"
        + f"aws_retry s3api get-object --bucket $B --key x/a.json {tmp_path}/read.json >/dev/null\n"
        + f"aws_retry s3api get-object --bucket $B --key x/none.json {tmp_path}/none.json || echo rc=$?\n"
        + "aws_retry ssm get-parameter --name x\n"
    )
    out = run(COMMON, script, ctx, env=shell_env(env, endpoint))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.split("\n}")[0] + "}")["ETag"]  # the CLI's answer: JSON with the ETag
    assert "rc=3" in out.stdout and out.stdout.rstrip().endswith("from the cli")
    assert (tmp_path / "read.json").read_text() == '{"a": 1}'
    stored = s3.get_object(Bucket="hpcc-llm-state-123456789012", Key="x/a.json")
    assert (stored["Body"].read(), stored["ContentType"]) == (b'{"a": 1}', "application/json")
    assert calls(tmp_path) == ["ssm get-parameter --name x"]  # S3 never reached the CLI


def test_a_status_report_lands_in_the_bucket_as_the_controller_reads_it(fake, moto_s3):
    tmp_path, _, env = fake
    endpoint, s3 = moto_s3
    ctx = ctx_for(tmp_path)
    bucket(s3)
    out = run(
        COMMON,
        preamble(tmp_path) + 'HPCC_STEP=ssh\nreport running true "trusting the head"',
        ctx,
        env=shell_env(env, endpoint),
    )
    assert out.returncode == 0, out.stderr
    status = json.loads(s3.get_object(Bucket="hpcc-llm-state-123456789012", Key=STATUS_KEY)["Body"].read())
    assert (status["node"], status["step"], status["message"]) == ("compute-001", "ssh", "trusting the head")
    assert calls(tmp_path) == []


def test_hpcc_aws_clients_cli_keeps_s3_on_the_cli(fake, moto_s3):
    tmp_path, _, env = fake
    endpoint, _ = moto_s3
    (tmp_path / "answers").write_text("0|{}\n")
    script = preamble(tmp_path) + f"aws_retry s3api get-object --bucket b --key k {tmp_path}/k\n"
    out = run(COMMON, script, ctx_for(tmp_path), env=shell_env(env, endpoint, HPCC_AWS_CLIENTS="cli"))
    assert out.returncode == 0, out.stderr
    assert calls(tmp_path) == [f"s3api get-object --bucket b --key k {tmp_path}/k"]
