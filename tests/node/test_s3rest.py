"""The node agent's in-process S3 (hpcc_node/s3rest.py): its signature is AWS's documented example's and botocore's,
it answers as boto3 does against moto's S3 (ETags, metadata, 304 and missing keys, as the agent's readers take
them), and it finds the instance role's credentials through IMDSv2 and reads them again before they expire."""

from __future__ import annotations

import calendar
import datetime
import json
import urllib.request

import pytest

from hpcc_node import awscli, certstore, s3rest
from hpcc_node.controller import membership

# "Example: GET Object", https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html
EXAMPLE = s3rest.Credentials("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
EXAMPLE_AT = calendar.timegm((2013, 5, 24, 0, 0, 0))


def test_the_signature_of_aws_documented_get_object_example():
    sent = s3rest.sign(
        "GET",
        "https://examplebucket.s3.amazonaws.com/test.txt",
        {"Range": "bytes=0-9"},
        s3rest.EMPTY_SHA256,
        EXAMPLE,
        "us-east-1",
        EXAMPLE_AT,
    )
    assert sent["authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    )


def test_a_put_with_metadata_and_a_session_token_is_signed_as_botocore_signs_it(monkeypatch):
    import botocore.auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    at = calendar.timegm((2026, 11, 30, 12, 34, 56))
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: datetime.datetime(2026, 11, 30, 12, 34, 56))
    url = "http://10.0.0.1:5000/state-bucket/status/arn%3Aaws%3Aec2%3Ai-1.json"
    headers = {"Content-Type": "application/json", "x-amz-meta-hosts-version": "7"}
    body = b'{"state": "ready"}'
    creds = s3rest.Credentials("AKIDEXAMPLE", "secret/key", "session-token")
    ours = s3rest.sign("PUT", url, headers, s3rest.hashlib.sha256(body).hexdigest(), creds, "eu-west-1", at)
    theirs = AWSRequest(method="PUT", url=url, data=body, headers=dict(headers))
    botocore.auth.S3SigV4Auth(Credentials("AKIDEXAMPLE", "secret/key", "session-token"), "s3", "eu-west-1").add_auth(
        theirs
    )
    assert ours["authorization"] == theirs.headers["Authorization"]
    assert ours["x-amz-security-token"] == "session-token"


@pytest.mark.parametrize(
    "env, region, bucket, url",
    [
        ({"AWS_ENDPOINT_URL": "http://10.9.0.1:5000/"}, "us-east-1", "b", "http://10.9.0.1:5000/b/a%20b/c.json"),
        (
            {"AWS_ENDPOINT_URL_S3": "http://s3.local", "AWS_ENDPOINT_URL": "x"},
            "us-east-1",
            "b",
            "http://s3.local/b/a%20b/c.json",
        ),
        ({}, "us-west-2", "hpcc-state", "https://hpcc-state.s3.us-west-2.amazonaws.com/a%20b/c.json"),
        ({}, "us-west-2", "my.bucket", "https://s3.us-west-2.amazonaws.com/my.bucket/a%20b/c.json"),
        ({}, "cn-north-1", "b", "https://b.s3.cn-north-1.amazonaws.com.cn/a%20b/c.json"),
    ],
)
def test_the_object_url_is_the_endpoints_path_style_or_the_regions_virtual_host(env, region, bucket, url):
    assert s3rest.object_url(env, region, bucket, "a b/c.json") == url


@pytest.fixture(scope="module")
def moto_server():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_env(moto_server):
    """The server's environment, with the bucket made for each test: a test elsewhere in this process that enters
    moto's in-process mock empties every backend, the server's too."""
    import boto3

    env = {
        "AWS_ENDPOINT_URL": moto_server,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    theirs = boto3.client(
        "s3",
        endpoint_url=moto_server,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    if "state" not in [b["Name"] for b in theirs.list_buckets()["Buckets"]]:
        theirs.create_bucket(Bucket="state")
    return env


def test_put_get_and_head_answer_as_boto3_against_moto(s3_env):
    import boto3

    s3 = s3rest.Client(s3_env)
    put = s3.put_object(
        Bucket="state",
        Key="status/a b.json",
        Body=b"{}",
        ContentType="application/json",
        Metadata={"Hosts-Version": "3"},
    )
    theirs = boto3.client(
        "s3",
        endpoint_url=s3_env["AWS_ENDPOINT_URL"],
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    read = theirs.get_object(Bucket="state", Key="status/a b.json")
    assert (read["ETag"], read["Metadata"], read["ContentType"]) == (
        put["ETag"],
        {"hosts-version": "3"},
        "application/json",
    )
    got = s3.get_object(Bucket="state", Key="status/a b.json")
    assert (got["Body"].read(), got["ETag"], got["Metadata"]) == (b"{}", put["ETag"], {"hosts-version": "3"})
    assert s3.head_object(Bucket="state", Key="status/a b.json")["ContentLength"] == 2


def test_the_agents_readers_take_its_304_and_missing_keys_as_they_take_boto3s(s3_env):
    s3 = s3rest.Client(s3_env)
    assert certstore.get(s3, "state", "certs/none.json") == (None, "")
    certstore.put(s3, "state", "certs/n.json", '{"v": 1}')
    text, etag = certstore.get(s3, "state", "certs/n.json")
    assert text == '{"v": 1}' and etag
    assert certstore.get(s3, "state", "certs/n.json", etag) == (None, etag)  # 304: unchanged
    s3.put_object(Bucket="state", Key=membership.MEMBERSHIP_KEY, Body=json.dumps({"generation": 4}).encode())
    doc, etag = membership.read(s3, "state")
    assert doc == {"generation": 4} and membership.read(s3, "state", etag) == (None, etag)
    with pytest.raises(awscli.ClientError) as missing:
        s3.get_object(Bucket="state", Key="nothing")
    assert awscli.error_code(missing.value) == "NoSuchKey"
    with pytest.raises(awscli.ClientError) as head:
        s3.head_object(Bucket="state", Key="nothing")
    assert awscli.error_code(head.value) == "404"


def test_an_unreachable_endpoint_is_a_client_error_naming_the_object():
    s3 = s3rest.Client(
        {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}
    )
    with pytest.raises(awscli.ClientError, match="s3://state/k") as e:
        s3.get_object(Bucket="state", Key="k")
    assert awscli.error_code(e.value) == "RequestError"


class Imds:
    """IMDSv2 as the EC2 User Guide describes it: a PUT for a token, then the role's name and credentials."""

    def __init__(self):
        self.calls: list = []
        self.expiration = "2026-11-30T18:00:00Z"
        self.key = "ASIA1"

    def __call__(self, method, url, headers, body, timeout):
        self.calls.append((method, url, dict(headers)))
        if "169.254.169.254" not in url:
            return 200, {"etag": '"e"'}, b"object"  # S3
        path = url.split("169.254.169.254")[-1]
        if path == "/latest/api/token":
            assert method == "PUT" and headers["X-aws-ec2-metadata-token-ttl-seconds"] == "21600"
            return 200, {}, b"tok"
        if headers.get("X-aws-ec2-metadata-token") != "tok":
            return 401, {}, b""
        if path == "/latest/meta-data/iam/security-credentials/":
            return 200, {}, b"hpcc-node-role\n"
        if path == "/latest/meta-data/iam/security-credentials/hpcc-node-role":
            doc = {"AccessKeyId": self.key, "SecretAccessKey": "s", "Token": "t", "Expiration": self.expiration}
            return 200, {}, json.dumps(doc).encode()
        return 404, {}, b""


def test_without_keys_in_the_environment_the_instance_roles_are_read_through_imdsv2_and_again_before_expiry():
    imds, now = Imds(), [calendar.timegm((2026, 11, 30, 12, 0, 0))]
    s3 = s3rest.Client({"AWS_DEFAULT_REGION": "us-east-1"}, send=imds, clock=lambda: now[0])
    s3.get_object(Bucket="b", Key="k")
    s3.get_object(Bucket="b", Key="k")
    signed = [h for m, u, h in imds.calls if "b.s3" in u]
    assert len(signed) == 2 and all("Credential=ASIA1/" in h["authorization"] for h in signed)
    assert all(h["x-amz-security-token"] == "t" for h in signed)
    assert len(imds.calls) == 5  # token, role, credentials once; two GETs
    imds.key, imds.expiration = "ASIA2", "2026-11-30T20:00:00Z"
    now[0] = calendar.timegm((2026, 11, 30, 17, 51, 0))  # 9 min before the first expire: read again
    s3.get_object(Bucket="b", Key="k")
    assert "Credential=ASIA2/" in imds.calls[-1][2]["authorization"]


def test_no_instance_metadata_is_a_client_error_saying_so():
    def refused(*_):
        raise ConnectionRefusedError("refused")

    with pytest.raises(awscli.ClientError, match="instance metadata"):
        s3rest.Client({}, send=refused).get_object(Bucket="b", Key="k")


def test_hpcc_aws_clients_cli_keeps_s3_on_the_cli():
    assert isinstance(s3rest.client({"HPCC_AWS_CLIENTS": "cli"}), awscli.Client)
    assert isinstance(s3rest.client({}), s3rest.Client)


def test_instance_metadata_is_asked_directly_and_s3_through_the_environments_proxy(monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    s3 = s3rest.Client({"AWS_DEFAULT_REGION": "us-east-1"})
    assert s3.credentials.send.keywords["opener"] is s3rest.DIRECT  # type: ignore[union-attr]
    assert not any(isinstance(h, urllib.request.ProxyHandler) and h.proxies for h in s3rest.DIRECT.handlers)
    proxied = urllib.request.build_opener()
    assert any(isinstance(h, urllib.request.ProxyHandler) and h.proxies for h in proxied.handlers)
