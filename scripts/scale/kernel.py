"""The simulator's kernel: a virtual clock and one queue of timed events. The nodes are generators (each `yield`
is a delay in virtual seconds); the project's synchronous code (the controller's loop, the head's signer) runs on
threads of its own, only one at a time, and every call it makes sleeps on the virtual clock. Nothing here reads the
wall clock, so a day of a 4,096-node cluster costs what its events cost, not a day."""

from __future__ import annotations

import heapq
import math
import random
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

Process = Generator[float, None, None]


class Stopped(BaseException):
    """Raised inside an actor's thread when the run ends (BaseException: the controller's `except Exception` must
    not swallow it)."""


class Sim:
    """The clock and the queue. One thread at a time holds the turn and runs the queue itself (the main thread, or
    an actor between its calls): a thread hands the turn over only to an actor whose time has come, so the nodes'
    events cost no thread switch."""

    def __init__(self, seed: int = 0):
        self.t = 0.0
        self.rng = random.Random(seed)
        self._queue: list[tuple[float, int, Any]] = []
        self._seq = 0
        self._main = threading.Event()
        self._until, self._stop = 0.0, lambda: False
        self.current: Actor | None = None
        self.actors: list[Actor] = []

    def now(self) -> float:
        return self.t

    def at(self, when: float, fn: Callable[[], None] | Actor) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (max(when, self.t), self._seq, fn))

    def start(self, process: Process, delay: float = 0.0) -> None:
        self.at(self.t + delay, lambda: self._advance(process))

    def _advance(self, process: Process) -> None:
        try:
            delay = next(process)
        except StopIteration:
            return
        self.at(self.t + delay, lambda: self._advance(process))

    def sleep(self, seconds: float) -> None:
        """For actors' code (the controller's clients, its loop's `sleep`): block on the virtual clock."""
        if self.current is None:
            raise RuntimeError("sleep() outside an actor")
        self.current.sleep(seconds)

    def next_event(self) -> Callable[[], None] | Actor | None:
        """The next event due in this run, the clock moved to it; None once the run is over."""
        if not self._queue or self._queue[0][0] > self._until or self._stop():
            return None
        self.t, _, fn = heapq.heappop(self._queue)
        return fn

    def hand(self, to: Actor | None, wait: threading.Event) -> None:
        """Give the turn to an actor (None: the main thread) and wait on `wait` until it comes back."""
        self.current = to
        (to.go if to is not None else self._main).set()
        wait.wait()
        wait.clear()

    def run(self, until: float, stop: Callable[[], bool] = lambda: False) -> None:
        self._until, self._stop = until, stop
        while (fn := self.next_event()) is not None:
            if isinstance(fn, Actor):
                self.hand(fn, self._main)
            else:
                fn()
        if not stop():
            self.t = max(self.t, until)

    def close(self) -> None:
        for actor in self.actors:
            actor.stop()


class Actor:
    """Synchronous code on its own thread: while it sleeps on the virtual clock, its thread runs the queue."""

    def __init__(self, sim: Sim, fn: Callable[[], object], name: str):
        self.sim, self.fn, self.name = sim, fn, name
        self.go = threading.Event()
        self.stopped = self.done = False
        self.error: BaseException | None = None
        sim.actors.append(self)
        threading.Thread(target=self._main, name=f"sim-{name}", daemon=True).start()
        sim.at(sim.t, self)

    def _main(self) -> None:
        self.go.wait()
        self.go.clear()
        try:
            if not self.stopped:
                self.fn()
        except Stopped:
            pass
        except BaseException as e:  # reported by the scenario: a crash of the real code is a finding
            self.error = e
        finally:
            self.done = True
            self.sim.current = None
            self.sim._main.set()

    def sleep(self, seconds: float) -> None:
        sim = self.sim
        sim.at(sim.t + max(0.0, seconds), self)
        while True:
            fn = sim.next_event()
            if fn is self:
                break
            if fn is None or isinstance(fn, Actor):  # the run is over, or another actor's turn: wait for ours
                sim.hand(fn, self.go)
                break
            fn()
        sim.current = self
        if self.stopped:
            raise Stopped()

    def stop(self) -> None:
        self.stopped = True
        if not self.done:
            self.sim.hand(self, self.sim._main)


@dataclass(frozen=True)
class Latency:
    """One call's seconds: log-normal around a median, clipped to the measured range."""

    median: float
    low: float
    high: float
    spread: float = 0.35  # sigma of the log; with a 0.6 s median, ~5% of draws reach the 1.5 s clip

    def draw(self, rng: random.Random) -> float:
        if self.low == self.high:
            return self.low
        return min(self.high, max(self.low, rng.lognormvariate(math.log(self.median), self.spread)))


class Bucket:
    """A token bucket (EC2's launch bucket, an API's request bucket): `capacity` tokens, `refill` a second."""

    def __init__(self, capacity: float, refill: float, clock: Callable[[], float]):
        self.capacity, self.refill, self.clock = capacity, refill, clock
        self.tokens, self.stamp = capacity, clock()

    def take(self, n: float) -> bool:
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.refill)
        self.stamp = now
        if self.tokens < n:
            return False
        self.tokens -= n
        return True
