"""boto3-shaped clients over the AWS CLI, for the controller and the node agent (the node side is stdlib only, and
every image has the CLI: hpcc_node/aws.py says why not boto3). `client("ec2").describe_instances(Filters=...)`
runs `aws ec2 describe-instances --cli-input-json '{"Filters": ...}' --output json --no-paginate` and returns the
parsed answer; an error is ClientError with `.response["Error"]["Code"]` taken from the CLI's "An error occurred
(Code) when calling the Op operation: message", as botocore's ClientError has it. Paginators walk the pages by
the operation's own tokens; S3 GetObject and PutObject go through files, since the CLI streams bodies there
(AWS CLI reference, `s3api get-object` outfile, `put-object --body`). AWS_MAX_ATTEMPTS and AWS_ENDPOINT_URL come
from the environment, as for every CLI call of the node."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import tempfile
from typing import Any, Callable, Dict, Iterator, Optional, Sequence

from hpcc_node.aws import secret_on_command_line

ERROR = re.compile(
    r"An error occurred \(([^)]*)\) when calling the (\w+) operation(?: \(reached max retries: \d+\))?: ?(.*)", re.S
)
# Each paginated operation the node side uses: (request token, answer token, page size parameter). Answers that
# carry no next token are the last page (the services' API references, "Pagination").
PAGES = {
    ("ec2", "describe_instances"): ("NextToken", "NextToken", "MaxResults"),
    ("ec2", "describe_instance_status"): ("NextToken", "NextToken", "MaxResults"),
    ("ec2", "describe_capacity_reservations"): ("NextToken", "NextToken", "MaxResults"),
    ("ec2", "describe_tags"): ("NextToken", "NextToken", "MaxResults"),
    ("s3", "list_objects_v2"): ("ContinuationToken", "NextContinuationToken", "MaxKeys"),
    ("dynamodb", "scan"): ("ExclusiveStartKey", "LastEvaluatedKey", "Limit"),
    ("dynamodb", "query"): ("ExclusiveStartKey", "LastEvaluatedKey", "Limit"),
}
CLI_SERVICE = {"s3": "s3api"}  # boto3's service name -> the CLI's command


class ClientError(Exception):
    """As botocore's: `.response["Error"]["Code"]` and `["Message"]`, `.operation_name`."""

    def __init__(self, code: str, message: str, operation: str):
        self.response = {"Error": {"Code": code, "Message": message}}
        self.operation_name = operation
        super().__init__(f"An error occurred ({code}) when calling the {operation} operation: {message}")


def error_code(e: BaseException) -> str:
    """The AWS error code of a ClientError, this module's or botocore's (both carry `.response`); "" for others."""
    response = getattr(e, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


def parse_error(stderr: str, operation: str) -> ClientError:
    """The CLI's error text as a ClientError; anything else (a crash, no credentials) keeps its text whole."""
    found = ERROR.search(stderr)
    if found:
        return ClientError(found.group(1), found.group(3).strip()[:500], found.group(2))
    return ClientError("CliError", stderr.strip()[-500:], operation)


def cli_name(operation: str) -> str:
    return operation.replace("_", "-")


def option(parameter: str) -> str:
    """An API parameter's CLI option: IfNoneMatch -> --if-none-match."""
    return "--" + re.sub(r"(?<=[a-z0-9])([A-Z])", r"-\1", parameter).lower()


class _Body:
    """GetObject's Body: `.read()` as botocore's StreamingBody."""

    def __init__(self, data: bytes):
        self._data = io.BytesIO(data)

    def read(self, size: int = -1) -> bytes:
        return self._data.read(size)


class Paginator:
    def __init__(self, client: Client, operation: str):
        self.client, self.operation = client, operation
        self.tokens = PAGES[(client.service, operation)]

    def paginate(self, **params: Any) -> Iterator[Dict[str, Any]]:
        ask, answer, size = self.tokens
        config = params.pop("PaginationConfig", {}) or {}
        if config.get("PageSize"):
            params[size] = config["PageSize"]
        while True:
            page = getattr(self.client, self.operation)(**params)
            yield page
            token = page.get(answer)
            if not token:
                return
            params = {**params, ask: token}


class Client:
    """One service's client; `run` (subprocess.run's shape) and `before` (a pacer, called before each call) are
    injected."""

    def __init__(
        self,
        service: str,
        run: Callable[..., Any] = subprocess.run,
        aws: str = "aws",
        before: Optional[Callable[[], None]] = None,
        timeout: float = 120,
        options: Sequence[str] = (),
    ):
        self.service, self.run, self.aws, self.before, self.timeout = service, run, aws, before, timeout
        self.options = tuple(options)  # global options of every call (the controller's timeouts)

    def _call(self, operation: str, params: Optional[Dict[str, Any]], *extra: str) -> str:
        if self.before:
            self.before()
        argv = [
            self.aws,
            CLI_SERVICE.get(self.service, self.service),
            cli_name(operation),
            *(["--cli-input-json", json.dumps(params)] if params is not None else []),
            "--output",
            "json",
            *self.options,
            *extra,
        ]
        leak = secret_on_command_line(argv)
        if leak:
            raise ClientError("SecretOnCommandLine", f"refused: {leak} (secrets go through files)", operation)
        try:
            out = self.run(argv, capture_output=True, text=True, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise ClientError(
                "RequestTimeout", f"aws {argv[1]} {argv[2]} took over {self.timeout:.0f} s", operation
            ) from None
        if out.returncode != 0:
            raise parse_error(out.stderr or out.stdout, operation)
        return out.stdout

    def call(self, operation: str, **params: Any) -> Dict[str, Any]:
        extra = ("--no-paginate",) if (self.service, operation) in PAGES else ()
        text = self._call(operation, params, *extra)
        return json.loads(text) if text.strip() else {}

    def __getattr__(self, operation: str) -> Callable[..., Dict[str, Any]]:
        if operation.startswith("_"):
            raise AttributeError(operation)
        return lambda **params: self.call(operation, **params)

    def get_paginator(self, operation: str) -> Paginator:
        return Paginator(self, operation)

    # S3 bodies go through files
    def get_object(self, **params: Any) -> Dict[str, Any]:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "body")
            # `s3api get-object` (its outfile) takes no --cli-input-json in CLI v1: each parameter (all strings) an
            # option of its own
            options = [word for k, v in params.items() for word in (option(k), str(v))]
            text = self._call("get_object", None, *options, path)
            with open(path, "rb") as f:
                data = f.read()
        answer = json.loads(text) if text.strip() else {}
        answer["Body"] = _Body(data)
        return answer

    def put_object(self, **params: Any) -> Dict[str, Any]:
        body = params.pop("Body", b"")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "body")
            with open(path, "wb") as f:
                f.write(body.encode() if isinstance(body, str) else body)
            text = self._call("put_object", params, "--body", path)
        return json.loads(text) if text.strip() else {}


def client(service: str, **kw: Any) -> Client:
    return Client(service, **kw)
