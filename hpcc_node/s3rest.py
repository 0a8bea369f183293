"""S3's GetObject, HeadObject and PutObject in the node agent's own process, signed with Signature Version 4, in the
standard library and boto3's shape (hpcc_node/awscli.py's): the calls the agent makes every tick (its membership,
its certificates, its status and heartbeat), the boot's certificate wait, and the bootstrap's S3 reads and writes
once the bundle is unpacked (main, through retry.sh.j2's aws_retry). One AWS CLI run costs about 0.9
CPU-second (CLI v1 loads botocore and S3's model each run; measured in the box): with two reads a tick and a
heartbeat, that was most of an idle node's CPU. Everything else of the node side stays on the CLI (hpcc_node/aws.py
says why). HPCC_AWS_CLIENTS=cli keeps S3 on the CLI too.

Signing: "Authenticating Requests: Using the Authorization Header (AWS Signature Version 4)",
https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html (its GET Object example is a test).
Credentials: the environment's, else the instance role's from IMDSv2, fetched again before they expire
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instance-metadata-security-credentials.html). Endpoint:
AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, path-style as the CLI's for an address; else the Region's virtual-hosted
endpoint (https://docs.aws.amazon.com/AmazonS3/latest/userguide/VirtualHosting.html). Each call is one request, as
the agent's CLI calls are (AWS_MAX_ATTEMPTS=1): the agent's tick is the retry."""

from __future__ import annotations

import argparse
import calendar
import functools
import hashlib
import hmac
import io
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple
from urllib.parse import quote, urlsplit

from hpcc_node import awscli
from hpcc_node.awscli import ClientError

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
IMDS = "http://169.254.169.254"  # botocore's AWS_EC2_METADATA_SERVICE_ENDPOINT overrides it, here too
IMDS_TOKEN_TTL = "21600"  # seconds, the most IMDSv2 grants
REFRESH_BEFORE = 600  # the role's credentials are read again 10 min before they expire (IMDS has new ones by then)
TIMEOUT = 20.0  # seconds a request may take (the CLI's are 60, but the agent's tick tries again in 15)
META = "x-amz-meta-"
ERROR_CODE = re.compile(rb"<Code>([^<]{1,100})</Code>")
ERROR_MESSAGE = re.compile(rb"<Message>([^<]{0,400})</Message>")

# send(method, url, headers, body, timeout) -> (status, headers with lower-case names, body); injected in tests
Send = Callable[[str, str, Dict[str, str], bytes, float], Tuple[int, Dict[str, str], bytes]]


class Credentials(NamedTuple):
    key: str
    secret: str
    token: str = ""
    expires: float = 0.0  # epoch seconds; 0: never (the environment's)


def amz_date(now: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def sign(
    method: str, url: str, headers: Mapping[str, str], payload_sha256: str, creds: Credentials, region: str, now: float
) -> Dict[str, str]:
    """The headers to send: `headers` and x-amz-date, x-amz-content-sha256, the session token and Authorization,
    every one signed. `url`'s path is already URI-encoded (S3 does not encode it twice)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port and (parts.scheme, parts.port) not in (("http", 80), ("https", 443)):
        host = f"{host}:{parts.port}"
    stamp = amz_date(now)
    sent = {k.lower(): " ".join(str(v).split()) for k, v in headers.items()}
    sent.update({"x-amz-content-sha256": payload_sha256, "x-amz-date": stamp})
    if creds.token:
        sent["x-amz-security-token"] = creds.token
    names = sorted({"host", *sent})
    canonical_headers = [f"{n}:{host if n == 'host' else sent[n]}" for n in names]
    # no query string: the calls here have none
    canonical = "\n".join([method, parts.path or "/", "", *canonical_headers, "", ";".join(names), payload_sha256])
    scope = f"{stamp[:8]}/{region}/s3/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    key = _hmac(_hmac(_hmac(_hmac(("AWS4" + creds.secret).encode(), stamp[:8]), region), "s3"), "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    sent["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={creds.key}/{scope}, SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    return sent


def object_url(env: Mapping[str, str], region: str, bucket: str, key: str) -> str:
    path = quote(key, safe="/-_.~")
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        return f"{endpoint.rstrip('/')}/{bucket}/{path}"
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    if "." in bucket:  # a dotted name does not match the endpoint's certificate as a host: path-style
        return f"https://s3.{region}.{domain}/{bucket}/{path}"
    return f"https://{bucket}.s3.{region}.{domain}/{path}"


DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # IMDS is the instance's own: never a proxy


def urllib_send(
    method: str, url: str, headers: Dict[str, str], body: bytes, timeout: float, opener: Any = None
) -> Tuple[int, Dict, bytes]:
    """One request; S3's honour the environment's proxy (HTTPS_PROXY, NO_PROXY) as the CLI's do."""
    request = urllib.request.Request(url, data=body if method == "PUT" else None, headers=headers, method=method)
    try:
        with (opener or urllib.request.build_opener()).open(request, timeout=timeout) as answer:
            return answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.read()
    except urllib.error.HTTPError as e:  # 304, 403, 404...: an answer, not a failure to send
        return e.code, {k.lower(): v for k, v in (e.headers or {}).items()}, e.read() or b""


def expiry(text: str) -> float:
    """IMDS's "Expiration": "2026-11-30T18:00:00Z" as epoch seconds."""
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))


class RoleCredentials:
    """The instance role's credentials through IMDSv2: a session token, the role's name, its credentials."""

    def __init__(self, env: Mapping[str, str], send: Send, clock: Callable[[], float]):
        self.base = (env.get("AWS_EC2_METADATA_SERVICE_ENDPOINT") or IMDS).rstrip("/")
        self.send, self.clock = send, clock
        self.current: Optional[Credentials] = None

    def _get(self, method: str, path: str, headers: Dict[str, str]) -> str:
        try:
            status, _, body = self.send(method, self.base + path, headers, b"", 5.0)
        except OSError as e:
            raise ClientError("NoCredentials", f"instance metadata at {self.base}: {e}", "GetCredentials") from None
        if status != 200:
            raise ClientError("NoCredentials", f"instance metadata {path}: HTTP {status}", "GetCredentials")
        return body.decode()

    def __call__(self) -> Credentials:
        if self.current and (not self.current.expires or self.clock() < self.current.expires - REFRESH_BEFORE):
            return self.current
        token = self._get("PUT", "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": IMDS_TOKEN_TTL})
        asked = {"X-aws-ec2-metadata-token": token}
        role = self._get("GET", "/latest/meta-data/iam/security-credentials/", asked).split()[0]
        found = json.loads(self._get("GET", f"/latest/meta-data/iam/security-credentials/{role}", asked))
        self.current = Credentials(
            found["AccessKeyId"], found["SecretAccessKey"], found.get("Token", ""), expiry(found["Expiration"])
        )
        return self.current


class Client:
    """S3's get_object, head_object and put_object, as boto3's client answers them; the environment, the sender
    and the clock injected."""

    service = "s3"

    def __init__(self, env: Mapping[str, str], send: Send = urllib_send, clock: Callable[[], float] = time.time):
        self.env, self.send, self.clock = dict(env), send, clock
        self.region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
        if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
            fixed = Credentials(
                env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env.get("AWS_SESSION_TOKEN", "")
            )
            self.credentials: Callable[[], Credentials] = lambda: fixed
        else:
            direct = functools.partial(urllib_send, opener=DIRECT) if send is urllib_send else send
            self.credentials = RoleCredentials(env, direct, clock)

    def _call(self, operation: str, method: str, bucket: str, key: str, headers: Dict[str, str], body: bytes = b""):
        url = object_url(self.env, self.region, bucket, key)
        digest = hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256
        sent = sign(method, url, headers, digest, self.credentials(), self.region, self.clock())
        try:
            status, answer, data = self.send(method, url, sent, body, TIMEOUT)
        except OSError as e:  # refused, unreachable, timed out
            raise ClientError("RequestError", f"{method} s3://{bucket}/{key}: {e}", operation) from None
        if status >= 300:
            code = ERROR_CODE.search(data)
            message = ERROR_MESSAGE.search(data)
            raise ClientError(
                code.group(1).decode()
                if code
                else str(status),  # HEAD and 304 have no body: boto3's code is the status
                message.group(1).decode() if message else f"HTTP {status}",
                operation,
            )
        return answer, data

    @staticmethod
    def _described(answer: Dict[str, str]) -> Dict[str, Any]:
        out: Dict[str, Any] = {
            "ETag": answer.get("etag", ""),
            "Metadata": {k[len(META) :]: v for k, v in answer.items() if k.startswith(META)},
        }
        if "content-type" in answer:
            out["ContentType"] = answer["content-type"]
        if "content-length" in answer:
            out["ContentLength"] = int(answer["content-length"])
        return out

    def get_object(self, Bucket: str, Key: str, IfNoneMatch: str = "") -> Dict[str, Any]:  # noqa: N803 - boto3's
        answer, data = self._call(
            "GetObject", "GET", Bucket, Key, {"If-None-Match": IfNoneMatch} if IfNoneMatch else {}
        )
        return {**self._described(answer), "Body": awscli._Body(data)}

    def head_object(self, Bucket: str, Key: str) -> Dict[str, Any]:  # noqa: N803
        return self._described(self._call("HeadObject", "HEAD", Bucket, Key, {})[0])

    def put_object(  # noqa: N803
        self, Bucket: str, Key: str, Body: Any = b"", ContentType: str = "", Metadata: Optional[Dict[str, str]] = None
    ) -> Dict[str, Any]:
        data = Body.encode() if isinstance(Body, str) else bytes(Body)
        headers = {META + k.lower(): str(v) for k, v in (Metadata or {}).items()}
        # S3's default type, said, or urllib would send its own (application/x-www-form-urlencoded)
        headers["Content-Type"] = ContentType or "binary/octet-stream"
        answer, _ = self._call("PutObject", "PUT", Bucket, Key, headers, data)
        return {"ETag": answer.get("etag", "")}


def client(env: Mapping[str, str]) -> Any:
    """The node agent's S3: in process, or the AWS CLI's when HPCC_AWS_CLIENTS=cli."""
    return awscli.client("s3") if env.get("HPCC_AWS_CLIENTS") == "cli" else Client(env)


def main(argv: List[str], env: Mapping[str, str] = os.environ) -> int:
    """`python3 -m hpcc_node.s3rest get-object|put-object ...`: the bootstrap's aws_retry (templates/steps/retry.sh.j2)
    runs this for S3 reads and writes once the bundle is unpacked, with the AWS CLI's `s3api` arguments, answer
    (JSON on stdout) and error text, so the script reads both alike."""
    parser = argparse.ArgumentParser(prog="python3 -m hpcc_node.s3rest")
    parser.add_argument("operation", choices=("get-object", "put-object"))
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--if-none-match", default="")
    parser.add_argument("--content-type", default="")
    parser.add_argument("--body", default="")
    parser.add_argument("outfile", nargs="?", default="")
    a = parser.parse_intermixed_args(argv)
    s3 = Client(env)
    try:
        if a.operation == "put-object":
            with open(a.body, "rb") if a.body else io.BytesIO() as f:
                out = s3.put_object(Bucket=a.bucket, Key=a.key, Body=f.read(), ContentType=a.content_type)
        else:
            if not a.outfile:
                parser.error("get-object: the file to write the object to is required")
            out = s3.get_object(Bucket=a.bucket, Key=a.key, IfNoneMatch=a.if_none_match)
            with open(a.outfile, "wb") as f:
                f.write(out.pop("Body").read())
    except ClientError as e:
        print(
            f"\n{e}", file=sys.stderr
        )  # the CLI's form: "An error occurred (Code) when calling the Op operation: ..."
        return 254
    except OSError as e:
        print(f"\n{e}", file=sys.stderr)
        return 255
    print(json.dumps(out, indent=4))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
