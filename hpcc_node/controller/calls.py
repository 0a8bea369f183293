"""What one controller loop cost: its phases' seconds, its calls per API and its slowest call, in one log line per
loop (issue 38: the head's time goes to its I/O, and a loop that is slow must say where). Clients are counted through
a proxy of the boto3 shape they share (hpcc_node/awscli.py's or botocore's): each operation, and each page a
paginator fetches, is one call."""

from __future__ import annotations

import threading
import time
from collections import Counter
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Mapping, Tuple


class Costs:
    """One loop's seconds per phase, in the order they ran, its calls per `service.operation` and its slowest."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._lock = threading.Lock()
        self.calls: Counter = Counter()
        self.phases: Dict[str, float] = {}
        self.slowest: Tuple[str, float] = ("", 0.0)

    def reset(self) -> None:
        self.calls.clear()
        self.phases = {}
        self.slowest = ("", 0.0)

    def record(self, name: str, took: float) -> None:
        with self._lock:  # parallel reads (observe.reports) record from several threads
            self.calls[name] += 1
            if not self.slowest[0] or took > self.slowest[1]:
                self.slowest = (name, took)

    def timed(self, name: str, call: Callable[[], Any]) -> Any:
        """`call()`, recorded as one call of `name` with its seconds (failed or not)."""
        started = self.clock()
        try:
            return call()
        finally:
            self.record(name, self.clock() - started)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = self.clock()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + self.clock() - started

    def line(self, loop: int, seconds: float) -> str:
        """`loop 12: 3.4 s (lease 0.2, observe 2.1, decide 0.0, act 1.1); 9 calls, the slowest s3.put_object 1.2 s:
        dynamodb.scan 2, ...`"""
        phases = ", ".join(f"{name} {s:.1f}" for name, s in self.phases.items())
        calls = ", ".join(f"{name} {n}" for name, n in sorted(self.calls.items(), key=lambda kv: (-kv[1], kv[0])))
        slowest = f", the slowest {self.slowest[0]} {self.slowest[1]:.1f} s" if self.slowest[0] else ""
        return (
            f"loop {loop}: {seconds:.1f} s"
            + (f" ({phases})" if phases else "")
            + f"; {sum(self.calls.values())} calls{slowest}"
            + (f": {calls}" if calls else "")
        )


class _Pages:
    def __init__(self, paginator: Any, name: str, costs: Costs):
        self._paginator, self._name, self._costs = paginator, name, costs

    def paginate(self, **params: Any) -> Iterator[Mapping[str, Any]]:
        pages = iter(self._paginator.paginate(**params))
        while True:  # each page is one request, timed as it is fetched; the end of the pages asks nothing
            started = self._costs.clock()
            try:
                page = next(pages, None)
            except Exception:  # a page that failed was asked for too
                self._costs.record(self._name, self._costs.clock() - started)
                raise
            if page is None:
                return
            self._costs.record(self._name, self._costs.clock() - started)
            yield page


class Counted:
    """A client whose every operation is one call of `service.operation` in `costs` (failed or not)."""

    def __init__(self, client: Any, service: str, costs: Costs):
        self._client, self._service, self._costs = client, service, costs

    def get_paginator(self, operation: str) -> _Pages:
        return _Pages(self._client.get_paginator(operation), f"{self._service}.{operation}", self._costs)

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._client, name)
        if name.startswith("_") or not callable(found):
            return found
        return lambda *args, **kwargs: self._costs.timed(f"{self._service}.{name}", lambda: found(*args, **kwargs))


def counted_command(run: Callable[[List[str]], Any], costs: Costs) -> Callable[[List[str]], Any]:
    """A command runner (Slurm's) whose every command is one call of `argv[0]` in `costs`."""
    return lambda argv: costs.timed(argv[0] if argv else "?", lambda: run(argv))
