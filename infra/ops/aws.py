"""How the operator commands talk to AWS: boto3 clients with jittered exponential backoff, and botocore's
paginators and waiters driven through them.

botocore's own retries are turned off (one attempt) so exactly one layer retries, with a delay we choose
and tests can observe: `Aws.call` (and every page of `pages`, every poll of a waiter) retries throttling
and transient server errors with "full jitter" backoff (a random delay in [0, min(cap, base * 2**attempt)]).

Paginators: botocore's paginator model for the operation (its tokens and result key), each page fetched
with `Aws.call`: https://boto3.amazonaws.com/v1/documentation/api/latest/guide/paginators.html
Waiters: botocore's waiter model (an operation and its acceptors, first match decides success, failure or
retry), evaluated here rather than by `Waiter.wait`, whose sleep is `time.sleep` and whose delay is fixed,
so waits poll on an injected sleep and clock:
https://boto3.amazonaws.com/v1/documentation/api/latest/guide/clients.html#waiters
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any

import boto3
import botocore.session
from botocore import xform_name
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.paginate import Paginator
from botocore.waiter import SingleWaiterConfig, WaiterModel

from hpcc_contract.names import TAG_CLUSTER
from infra.ops import OpsError

THROTTLING = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "SlowDown",
        "PriorRequestNotComplete",
        "ProvisionedThroughputExceededException",
        "BandwidthLimitExceeded",
        "EC2ThrottledException",
    }
)
TRANSIENT = frozenset(
    {
        "InternalError",
        "InternalFailure",
        "ServiceUnavailable",
        "RequestTimeout",
        "RequestTimeoutException",
        "Unavailable",
    }
)
NO_BOTOCORE_RETRIES = Config(retries={"mode": "standard", "total_max_attempts": 1})


def error_code(exc: BaseException) -> str:
    return exc.response.get("Error", {}).get("Code", "") if isinstance(exc, ClientError) else ""


def error_message(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        return f"{err.get('Code', '?')}: {err.get('Message', '')}".rstrip(": ")
    return str(exc)


def retryable(exc: BaseException) -> bool:
    return error_code(exc) in THROTTLING | TRANSIENT or isinstance(exc, BotoConnectionError)


@dataclass
class Backoff:
    attempts: int = 8
    base: float = 0.25
    cap: float = 8.0
    sleep: Callable[[float], None] = time.sleep
    rand: Callable[[], float] = random.random
    slept: list[float] = field(default_factory=list)  # delays taken, for reports and tests

    def delay(self, attempt: int) -> float:
        return self.rand() * min(self.cap, self.base * 2**attempt)

    def run(self, fn: Callable[..., Any], *args, **kwargs) -> Any:
        for attempt in range(self.attempts):
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - re-raised unless retryable
                if not retryable(exc) or attempt == self.attempts - 1:
                    raise
                wait = self.delay(attempt)
                self.slept.append(wait)
                self.sleep(wait)
        raise AssertionError("unreachable")


def default_region() -> str | None:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or boto3.session.Session().region_name


class Aws:
    """One region's clients. `call` and `pages` absorb throttling; writes go through `call` too (retrying a
    throttled delete is safe: it was refused, not half-done)."""

    def __init__(
        self, region: str | None = None, backoff: Backoff | None = None, session: boto3.session.Session | None = None
    ):
        region = region or default_region()
        if not region:
            raise OpsError("no AWS region: pass --region, or set AWS_REGION")
        self.region = region
        self.backoff = backoff or Backoff()
        self._session = session or boto3.session.Session(region_name=region)
        self._clients: dict[str, Any] = {}

    def client(self, service: str):
        if service not in self._clients:
            self._clients[service] = self._session.client(service, region_name=self.region, config=NO_BOTOCORE_RETRIES)
        return self._clients[service]

    def call(self, service: str, operation: str, **kwargs) -> dict:
        return self.backoff.run(getattr(self.client(service), operation), **kwargs)

    def pages(self, service: str, operation: str, records: str | None = None, **kwargs) -> Iterator[dict]:
        """Every record of `operation` across pages (see `pages` below)."""
        return pages(self, service, operation, records, **kwargs)


def tag_filter(cluster: str) -> list[dict]:
    return [{"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster]}]


def tag_dict(tags: list[dict] | None) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in tags or []}


# -- botocore's paginators and waiters, through Aws.call ---------------------------------------------------

# Waiters botocore does not ship (FSx has none; EC2 has none for a deleted interface), in its own format:
# https://github.com/boto/botocore/blob/develop/botocore/data/ec2/2016-11-15/waiters-2.json
CUSTOM = {
    "fsx": WaiterModel(
        {
            "version": 2,
            "waiters": {
                "FileSystemDeleted": {
                    "operation": "DescribeFileSystems",
                    "delay": 30,
                    "maxAttempts": 60,
                    "acceptors": [
                        {"matcher": "error", "expected": "FileSystemNotFound", "state": "success"},
                        {
                            "matcher": "path",
                            "argument": "length(FileSystems) == `0`",
                            "expected": True,
                            "state": "success",
                        },
                        {
                            "matcher": "pathAny",
                            "argument": "FileSystems[].Lifecycle",
                            "expected": "FAILED",
                            "state": "failure",
                        },
                    ],
                }
            },
        }
    ),
    "ec2": WaiterModel(
        {
            "version": 2,
            "waiters": {
                "NetworkInterfaceDeleted": {
                    "operation": "DescribeNetworkInterfaces",
                    "delay": 5,
                    "maxAttempts": 40,
                    "acceptors": [
                        {"matcher": "error", "expected": "InvalidNetworkInterfaceID.NotFound", "state": "success"},
                        {
                            "matcher": "path",
                            "argument": "length(NetworkInterfaces) == `0`",
                            "expected": True,
                            "state": "success",
                        },
                    ],
                }
            },
        }
    ),
}


class WaitFailed(RuntimeError):
    """A waiter's failure acceptor matched: waiting longer would not help."""


@cache
def _paginator_config(service: str, api_name: str) -> dict:
    return botocore.session.get_session().get_paginator_model(service).get_paginator(api_name)


def pages(aws: Aws, service: str, op: str, records: str | None = None, **kwargs) -> Iterator[dict]:
    """Every record of `op` across pages. `records` is a JMESPath to the records, by default the
    paginator's result key; operations botocore has no paginator for go through `Aws.pages`."""
    client = aws.client(service)
    if not client.can_paginate(op):
        if records is None:
            raise ValueError(f"{service}.{op} has no botocore paginator: name its records")
        yield from _token_pages(aws, service, op, records, **kwargs)
        return
    api_name = client.meta.method_to_api_mapping[op]
    paginator = Paginator(
        partial(aws.call, service, op),
        _paginator_config(service, api_name),
        client.meta.service_model.operation_model(api_name),
    )
    expression = records or paginator.result_keys[0].expression
    for item in paginator.paginate(**kwargs).search(expression):
        if item is not None:
            yield item


def _token_pages(aws: Aws, service: str, op: str, key: str, **kwargs) -> Iterator[dict]:
    """For the few operations that page with NextToken but have no botocore paginator model
    (e.g. fsx.describe_data_repository_associations); an operation that does not page answers once."""
    while True:
        page = aws.call(service, op, **kwargs)
        yield from page.get(key, [])
        if not page.get("NextToken"):
            return
        kwargs["NextToken"] = page["NextToken"]


def waiter_config(aws: Aws, service: str, name: str) -> SingleWaiterConfig:
    """botocore's waiter `name` (e.g. InstanceTerminated), or one of CUSTOM."""
    custom = CUSTOM.get(service)
    if custom and name in custom.waiter_names:
        return custom.get_waiter(name)
    return aws.client(service).get_waiter(xform_name(name)).config


def waiter_state(aws: Aws, service: str, config: SingleWaiterConfig, **kwargs) -> str:
    """One poll: "success", "retry", or WaitFailed. An error answer is matched like botocore does."""
    try:
        response = aws.call(service, xform_name(config.operation), **kwargs)
    except ClientError as e:
        response = e.response
    for acceptor in config.acceptors:
        if acceptor.matcher_func(response):
            if acceptor.state == "failure":
                raise WaitFailed(f"{config.operation} answered {acceptor.explanation}")
            return acceptor.state
    if "Error" in response:
        raise WaitFailed(f"{config.operation} failed: {error_message(ClientError(response, config.operation))}")
    return "retry"


def waiter_done(aws: Aws, service: str, name: str, **kwargs) -> Callable[[], bool]:
    """A `done()` for `Waits.until`: true once the waiter's success acceptor matches."""
    config = waiter_config(aws, service, name)
    return lambda: waiter_state(aws, service, config, **kwargs) == "success"
