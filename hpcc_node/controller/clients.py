"""The controller's AWS clients: botocore in process where the head's Python has boto3, as ParallelCluster's
clustermgtd does, else the AWS CLI's boto3-shaped clients (hpcc_node/awscli.py). Measured in the box against its
moto server, one CLI call is one `aws` process of 0.4-1.5 s, so a loop of 15-30 calls took 7-27 s; in process a
call is one request on a kept connection. Either way each call has short connect and read timeouts, so one hung
connection costs seconds, not the CLI's default 60 s per attempt (a box loop once waited 61 s on one
TransactWriteItems), and throttles are retried with botocore's adaptive mode (client-side rate limiting).

botocore's Config (connect_timeout, read_timeout, retries):
https://botocore.amazonaws.com/v1/documentation/api/latest/reference/config.html
Retry modes: https://docs.aws.amazon.com/sdkref/latest/guide/feature-retry-behavior.html
The CLI's --cli-connect-timeout, --cli-read-timeout: https://docs.aws.amazon.com/cli/latest/reference/index.html

HPCC_AWS_CLIENTS: "boto3" (fail when it is missing), "cli", or unset (boto3 when importable). The head's controller
step installs the pinned boto3 (BOTO3) into an environment of its own when the image's python3 lacks it
(templates/steps/controller.sh.j2)."""

from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Type

from hpcc_node import awscli

BOTO3 = "boto3==1.44.3"  # the head's pin; tests/node/test_controller_clients.py: the same as requirements.txt's
CONNECT_SECONDS = 5
READ_SECONDS = 20  # a socket read that waits longer is a hung connection: the largest answer streams in far less
ATTEMPTS = 3  # total attempts of one call; the next loop retries what still fails
SERVICES = ("ec2", "dynamodb", "s3", "ssm")


class ClientsError(RuntimeError):
    """HPCC_AWS_CLIENTS asks for what this Python cannot give."""


def botocore_config(config_class: Callable[..., Any]) -> Any:
    return config_class(
        connect_timeout=CONNECT_SECONDS,
        read_timeout=READ_SECONDS,
        retries={"mode": "adaptive", "total_max_attempts": ATTEMPTS},
    )


def cli_timeouts() -> Tuple[str, ...]:
    return ("--cli-connect-timeout", str(CONNECT_SECONDS), "--cli-read-timeout", str(READ_SECONDS))


def _boto3() -> Optional[Any]:
    try:
        return importlib.import_module("boto3")
    except ImportError:
        return None


def errors() -> Tuple[Type[BaseException], ...]:
    """What a failed AWS call raises: the CLI clients' ClientError, and botocore's ClientError and BotoCoreError
    (a timeout, a refused connection) where botocore is loaded."""
    out: Tuple[Type[BaseException], ...] = (awscli.ClientError,)
    try:
        exceptions = importlib.import_module("botocore.exceptions")
    except ImportError:
        return out
    return out + (exceptions.ClientError, exceptions.BotoCoreError)


def clients(
    env: Mapping[str, str],
    run: Optional[Callable[..., Any]] = None,
    services: Sequence[str] = SERVICES,
    boto3: Optional[Any] = None,
) -> Tuple[Dict[str, Any], str]:
    """({service: client}, "boto3" or "cli"). `run` (a subprocess runner) asks for the CLI's clients."""
    wanted = env.get("HPCC_AWS_CLIENTS", "")
    if wanted not in ("", "boto3", "cli"):
        raise ClientsError(f"HPCC_AWS_CLIENTS={wanted[:20]!r}: use boto3, cli, or leave it unset")
    module = None if (run is not None or wanted == "cli") else (boto3 or _boto3())
    if wanted == "boto3" and module is None:
        raise ClientsError(f"HPCC_AWS_CLIENTS=boto3 but this Python has no boto3: install {BOTO3}")
    if module is not None:
        config = botocore_config(importlib.import_module("botocore.config").Config)
        session = module.session.Session()  # one session: its clients share credentials and connection pools
        region = env.get("AWS_DEFAULT_REGION") or None  # the controller's unit sets it; else botocore's own chain
        return {s: session.client(s, region_name=region, config=config) for s in services}, "boto3"
    kw: Dict[str, Any] = {"run": run} if run else {}
    return {s: awscli.client(s, options=cli_timeouts(), **kw) for s in services}, "cli"
