"""The controller's AWS clients, and the head's certificate signer's S3 client (hpcc_node/certs_agent.py signer_s3):
botocore in process where the head's Python has boto3, as ParallelCluster's clustermgtd does, else the AWS CLI's
boto3-shaped clients (hpcc_node/awscli.py). Measured in the box against its moto server, one CLI call is one `aws`
process of 0.4-1.5 s, so a loop of 15-30 calls took 7-27 s; in process a call is one request on a kept connection.
Either way each call has short connect and read timeouts, so one hung connection costs seconds, not the CLI's default
60 s per attempt (a box loop once waited 61 s on one TransactWriteItems), and throttles are retried with botocore's
adaptive mode (client-side rate limiting).

botocore's Config (connect_timeout, read_timeout, retries):
https://botocore.amazonaws.com/v1/documentation/api/latest/reference/config.html
Retry modes: https://docs.aws.amazon.com/sdkref/latest/guide/feature-retry-behavior.html
The CLI's --cli-connect-timeout, --cli-read-timeout: https://docs.aws.amazon.com/cli/latest/reference/index.html

HPCC_AWS_CLIENTS: "boto3" (fail when it is missing), "cli", or unset (boto3 when importable). The head's controller
step installs boto3 into an environment of its own when the image's python3 lacks it (templates/steps/controller.sh.j2):
`pip install --require-hashes --no-deps --only-binary=:all:` of HEAD_WHEELS, every package boto3 imports pinned to
its wheel's sha256, so what runs with the head's role is exactly what was reviewed (pip's "Secure installs" mode).
boto3 1.44 needs Python >= 3.10 (Ubuntu 22.04 and 24.04 DLAMIs); on an older python3 the install fails and the
controller calls AWS through the CLI, as its log says."""

from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Type

from hpcc_node import awscli

# (package, version, sha256 of its py3-none-any wheel as the package index serves it; pip hash, 2026-11-29)
HEAD_WHEELS = (
    ("boto3", "1.44.3", "8c9c4844c7ce184494b102983696d6cdb09f5307ec7f238ca4ad5849fb14e26b"),
    ("botocore", "1.44.3", "793eac2a7ca167e9376b136cf000e1675e9ffe8d7ec609160cc1ee00b93ace28"),
    ("jmespath", "1.1.0", "a5663118de4908c91729bea0acadca56526eb2698e83de10cd116ae0f4e97c64"),
    ("python-dateutil", "2.9.0.post0", "a8b2bc7bffae282281c8140a97d3aa9c14da0b136dfe83f850eea9a5f7470427"),
    ("s3transfer", "0.19.3", "24eb7535804306355e31c952a90022bf5b2f9d760f9a11062c7493a217c08553"),
    ("six", "1.17.0", "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274"),
    ("urllib3", "2.8.0", "0cf3cae568d36aa9576b28dfb35f11328f1cb974ca7647d9475ebb86c75ac6e3"),
)
BOTO3 = "boto3==1.44.3"  # tests/node/test_controller_clients.py: HEAD_WHEELS' and requirements.txt's, the same
CONNECT_SECONDS = 5
READ_SECONDS = 20  # a socket read that waits longer is a hung connection: the largest answer streams in far less
ATTEMPTS = 3  # total attempts of one call; the next loop retries what still fails
# Connections kept per client: at least the threads that share one (observe.READERS, certs.PARALLEL: a test checks),
# so none waits or is discarded (botocore's default is 10; urllib3 warns on each one discarded)
POOL = 16
SERVICES = ("ec2", "dynamodb", "s3", "ssm")


class ClientsError(RuntimeError):
    """HPCC_AWS_CLIENTS asks for what this Python cannot give."""


def botocore_config(config_class: Callable[..., Any]) -> Any:
    return config_class(
        connect_timeout=CONNECT_SECONDS,
        read_timeout=READ_SECONDS,
        retries={"mode": "adaptive", "total_max_attempts": ATTEMPTS},
        max_pool_connections=POOL,
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


def head_requirements() -> str:
    """HEAD_WHEELS as a pip requirements file, each line with its hash."""
    return "".join(f"{name}=={version} --hash=sha256:{sha}\n" for name, version, sha in HEAD_WHEELS)


if __name__ == "__main__":  # the controller step: `python3 -m hpcc_node.controller.clients` > requirements file
    print(head_requirements(), end="")
