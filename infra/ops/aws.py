"""boto3 clients for the operator commands, with jittered exponential backoff on read calls.

botocore's own retries are turned off (one attempt) so exactly one layer retries, with a delay we choose
and tests can observe: `Aws.call` and `Aws.pages` retry throttling and transient server errors with
"full jitter" backoff (a random delay in [0, min(cap, base * 2**attempt)]).
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionError as BotoConnectionError

from infra.ops import OpsError

THROTTLING = frozenset({
    "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottled", "RequestThrottledException",
    "RequestLimitExceeded", "TooManyRequestsException", "SlowDown", "PriorRequestNotComplete",
    "ProvisionedThroughputExceededException", "BandwidthLimitExceeded", "EC2ThrottledException",
})
TRANSIENT = frozenset({"InternalError", "InternalFailure", "ServiceUnavailable", "RequestTimeout",
                       "RequestTimeoutException", "Unavailable"})
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
        return self.rand() * min(self.cap, self.base * 2 ** attempt)

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

    def __init__(self, region: str | None = None, backoff: Backoff | None = None, session: boto3.session.Session | None = None):
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

    def pages(self, service: str, operation: str, key: str, token: str = "NextToken", **kwargs) -> Iterator[dict]:
        """Every item under `key` across pages; each page retried on its own."""
        out_token = {"Marker": "Marker"}.get(token, token)
        while True:
            page = self.call(service, operation, **kwargs)
            yield from page.get(key, [])
            nxt = page.get(out_token) or page.get("NextMarker")
            if not nxt:
                return
            kwargs[token] = nxt


def tag_filter(cluster: str) -> list[dict]:
    from infra.naming import TAG_CLUSTER

    return [{"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster]}]


def tag_dict(tags: list[dict] | None) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in tags or []}
