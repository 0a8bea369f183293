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

Process = Generator[float, None, None]


class Stopped(BaseException):
    """Raised inside an actor's thread when the run ends (BaseException: the controller's `except Exception` must
    not swallow it)."""


class Sim:
    def __init__(self, seed: int = 0):
        self.t = 0.0
        self.rng = random.Random(seed)
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0
        self.current: Actor | None = None
        self.actors: list[Actor] = []

    def now(self) -> float:
        return self.t

    def at(self, when: float, fn: Callable[[], None]) -> None:
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

    def run(self, until: float, stop: Callable[[], bool] = lambda: False) -> None:
        while self._queue and self._queue[0][0] <= until and not stop():
            self.t, _, fn = heapq.heappop(self._queue)
            fn()
        if not stop():
            self.t = max(self.t, until)

    def close(self) -> None:
        for actor in self.actors:
            actor.stop()


class Actor:
    """Synchronous code on its own thread, run only while the kernel hands it the turn."""

    def __init__(self, sim: Sim, fn: Callable[[], object], name: str):
        self.sim, self.fn, self.name = sim, fn, name
        self._go, self._back = threading.Event(), threading.Event()
        self.stopped = self.done = False
        self.error: BaseException | None = None
        sim.actors.append(self)
        threading.Thread(target=self._main, name=f"sim-{name}", daemon=True).start()
        sim.at(sim.t, self._resume)

    def _main(self) -> None:
        self._go.wait()
        self._go.clear()
        try:
            if not self.stopped:
                self.fn()
        except Stopped:
            pass
        except BaseException as e:  # reported by the scenario: a crash of the real code is a finding
            self.error = e
        finally:
            self.done = True
            self._back.set()

    def sleep(self, seconds: float) -> None:
        self.sim.at(self.sim.t + max(0.0, seconds), self._resume)
        self._back.set()
        self._go.wait()
        self._go.clear()
        if self.stopped:
            raise Stopped()

    def _resume(self) -> None:
        if self.done:
            return
        previous, self.sim.current = self.sim.current, self
        self._back.clear()
        self._go.set()
        self._back.wait()
        self.sim.current = previous

    def stop(self) -> None:
        self.stopped = True
        if not self.done:
            self._resume()


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
