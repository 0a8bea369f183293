"""What one controller loop cost: its phases' seconds and its calls per API, in one log line per loop (issue 38: the
head's time goes to its I/O, and a loop that is slow must say where). Clients are counted through a proxy of the
boto3 shape they share (hpcc_node/awscli.py's or botocore's): each operation, and each page a paginator fetches, is
one call."""

from __future__ import annotations

import time
from collections import Counter
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Mapping


class Costs:
    """One loop's seconds per phase, in the order they ran, and its calls per `service.operation`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.calls: Counter = Counter()
        self.phases: Dict[str, float] = {}

    def reset(self) -> None:
        self.calls.clear()
        self.phases = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = self.clock()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + self.clock() - started

    def line(self, loop: int, seconds: float) -> str:
        """`loop 12: 3.4 s (lease 0.2, observe 2.1, decide 0.0, act 1.1); 9 calls: ec2.describe_instances 1, ...`"""
        phases = ", ".join(f"{name} {s:.1f}" for name, s in self.phases.items())
        calls = ", ".join(f"{name} {n}" for name, n in sorted(self.calls.items(), key=lambda kv: (-kv[1], kv[0])))
        total = sum(self.calls.values())
        return (
            f"loop {loop}: {seconds:.1f} s"
            + (f" ({phases})" if phases else "")
            + f"; {total} calls"
            + (f": {calls}" if calls else "")
        )


class _Pages:
    def __init__(self, paginator: Any, name: str, calls: Counter):
        self._paginator, self._name, self._calls = paginator, name, calls

    def paginate(self, **params: Any) -> Iterator[Mapping[str, Any]]:
        for page in self._paginator.paginate(**params):
            self._calls[self._name] += 1
            yield page


class Counted:
    """A client whose every operation adds one to `calls[service.operation]` (whether it succeeds or not)."""

    def __init__(self, client: Any, service: str, calls: Counter):
        self._client, self._service, self._calls = client, service, calls

    def get_paginator(self, operation: str) -> _Pages:
        return _Pages(self._client.get_paginator(operation), f"{self._service}.{operation}", self._calls)

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._client, name)
        if name.startswith("_") or not callable(found):
            return found

        def call(*args: Any, **kwargs: Any) -> Any:
            self._calls[f"{self._service}.{name}"] += 1
            return found(*args, **kwargs)

        return call


def counted_command(run: Callable[[List[str]], Any], calls: Counter) -> Callable[[List[str]], Any]:
    """A command runner (Slurm's) whose every command adds one to `calls[argv[0]]`."""

    def counted(argv: List[str]) -> Any:
        calls[argv[0] if argv else "?"] += 1
        return run(argv)

    return counted
