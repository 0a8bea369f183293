"""botocore's paginators and waiters, driven through `Aws` so each request gets its backoff, and waiters
poll on an injected sleep and clock (tests run at once against moto).

Paginators: botocore's paginator model for the operation (its tokens and result key), each page fetched
with `Aws.call`: https://boto3.amazonaws.com/v1/documentation/api/latest/guide/paginators.html
Waiters: botocore's waiter model (an operation and its acceptors, first match decides success, failure or
retry), evaluated here rather than by `Waiter.wait`, whose sleep is `time.sleep` and whose delay is fixed:
https://boto3.amazonaws.com/v1/documentation/api/latest/guide/clients.html#waiters
"""

from __future__ import annotations

from functools import lru_cache, partial
from typing import Callable, Iterator

import botocore.session
from botocore import xform_name
from botocore.exceptions import ClientError
from botocore.paginate import Paginator
from botocore.waiter import SingleWaiterConfig, WaiterModel

from infra.ops.aws import Aws, error_message

# Waiters botocore does not ship (FSx has none; EC2 has none for a deleted interface), in its own format:
# https://github.com/boto/botocore/blob/develop/botocore/data/ec2/2016-11-15/waiters-2.json
CUSTOM = {
    "fsx": WaiterModel({"version": 2, "waiters": {"FileSystemDeleted": {
        "operation": "DescribeFileSystems", "delay": 30, "maxAttempts": 60,
        "acceptors": [
            {"matcher": "error", "expected": "FileSystemNotFound", "state": "success"},
            {"matcher": "path", "argument": "length(FileSystems) == `0`", "expected": True, "state": "success"},
            {"matcher": "pathAny", "argument": "FileSystems[].Lifecycle", "expected": "FAILED", "state": "failure"},
        ]}}}),
    "ec2": WaiterModel({"version": 2, "waiters": {"NetworkInterfaceDeleted": {
        "operation": "DescribeNetworkInterfaces", "delay": 5, "maxAttempts": 40,
        "acceptors": [
            {"matcher": "error", "expected": "InvalidNetworkInterfaceID.NotFound", "state": "success"},
            {"matcher": "path", "argument": "length(NetworkInterfaces) == `0`", "expected": True, "state": "success"},
        ]}}}),
}


class WaitFailed(RuntimeError):
    """A waiter's failure acceptor matched: waiting longer would not help."""


@lru_cache(maxsize=None)
def _paginator_config(service: str, api_name: str) -> dict:
    return botocore.session.get_session().get_paginator_model(service).get_paginator(api_name)


def pages(aws: Aws, service: str, op: str, records: str | None = None, **kwargs) -> Iterator[dict]:
    """Every record of `op` across pages. `records` is a JMESPath to the records, by default the
    paginator's result key; operations botocore has no paginator for go through `Aws.pages`."""
    client = aws.client(service)
    if not client.can_paginate(op):
        if records is None:
            raise ValueError(f"{service}.{op} has no botocore paginator: name its records")
        yield from aws.pages(service, op, records, **kwargs)
        return
    api_name = client.meta.method_to_api_mapping[op]
    paginator = Paginator(partial(aws.call, service, op), _paginator_config(service, api_name),
                          client.meta.service_model.operation_model(api_name))
    expression = records or paginator.result_keys[0].expression
    for item in paginator.paginate(**kwargs).search(expression):
        if item is not None:
            yield item


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


__all__ = ["CUSTOM", "WaitFailed", "pages", "waiter_config", "waiter_done", "waiter_state"]
