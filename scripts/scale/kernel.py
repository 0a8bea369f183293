"""The simulator's kernel: a virtual clock and one queue of timed events. The nodes are generators (each `yield`
is a delay in virtual seconds); the project's synchronous code (the controller's loop, the head's signer) runs on
threads of its own, only one at a time, and every call it makes sleeps on the virtual clock. Where that code runs
calls concurrently (a thread pool: the head's `certs.in_parallel`, observe.reports' READERS), `Sim.parallel` and
`Executor` run them on worker actors of the same clock, so 16 requests in flight cost the virtual time of 16
concurrent requests, not 16 in a row, nor none. Nothing here reads the wall clock, so a day of a 4,096-node cluster
costs what its events cost, not a day."""

from __future__ import annotations

import heapq
import math
import random
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

Process = Generator[float, None, None]
_here = threading.local()  # the Sim whose actor runs on this thread (Executor finds its clock there)


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
        self.idle: list[Worker] = []  # worker actors between jobs (parallel)
        self.most_in_flight = 0  # the most calls of one parallel() at once, over the run

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

    def parallel(self, fn: Callable[[Any], Any], items: Iterable[Any], workers: int) -> list[Any]:
        """For actors' code: fn over items, `workers` at a time, in order (a thread pool's map): each worker an actor,
        so every call sleeps on the virtual clock beside the others; the caller waits until the last one is done.
        The first error (in the items' order) is raised once all are done, as `list(pool.map(...))` raises it."""
        items = list(items)
        if len(items) <= 1 or workers <= 1:
            return [fn(i) for i in items]
        caller = self.current
        if caller is None:
            raise RuntimeError("parallel() outside an actor")
        job = _Job(fn, items, caller, min(workers, len(items)))
        self.most_in_flight = max(self.most_in_flight, job.active)
        for _ in range(job.active):
            worker = self.idle.pop() if self.idle else None
            if worker is None:
                Worker(self, job)
            else:
                worker.job = job
                self.at(self.t, worker)
        caller.park()
        for error in job.errors:
            if error is not None:
                raise error
        return job.results

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
        _here.sim = self.sim
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
        self.sim.at(self.sim.t + max(0.0, seconds), self)
        self.park()

    def park(self) -> None:
        """Give up the turn until this actor is next due (sleep's timer, or another actor's `at` waking it)."""
        sim = self.sim
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


class _Job:
    """One parallel() call: its items, handed out one at a time to its workers; the caller woken by the last."""

    def __init__(self, fn: Callable[[Any], Any], items: list[Any], caller: Actor, workers: int):
        self.fn, self.items, self.caller, self.active = fn, items, caller, workers
        self.results: list[Any] = [None] * len(items)
        self.errors: list[BaseException | None] = [None] * len(items)
        self.next = 0


class Worker(Actor):
    """A pool thread as an actor: takes its job's items until none is left, then waits for the next job."""

    def __init__(self, sim: Sim, job: _Job):
        self.job: _Job | None = job
        super().__init__(sim, self._work, "worker")

    def _work(self) -> None:
        while True:
            job = self.job
            assert job is not None
            while job.next < len(job.items):
                i = job.next
                job.next += 1
                try:
                    job.results[i] = job.fn(job.items[i])
                except Exception as e:  # noqa: BLE001 - raised in the caller, as a pool's map raises it
                    job.errors[i] = e
            self.job = None
            self.sim.idle.append(self)
            job.active -= 1
            if job.active == 0:
                self.sim.at(self.sim.t, job.caller)
            self.park()


class Executor:
    """concurrent.futures.ThreadPoolExecutor as the project's code uses it (`with ...(max_workers=n) as pool:
    pool.map(fn, items)`): on a simulated actor its threads are worker actors of that actor's clock
    (Sim.parallel); anywhere else, a real thread pool."""

    def __init__(self, max_workers: int | None = None, **kw: Any):
        self.max_workers = max_workers or 1
        self.sim: Sim | None = getattr(_here, "sim", None)
        self.real = ThreadPoolExecutor(max_workers, **kw) if self.sim is None else None

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.real is not None:
            self.real.shutdown(wait=True)

    def map(self, fn: Callable[[Any], Any], *iterables: Iterable[Any]) -> Iterator[Any]:
        if self.real is not None:
            return self.real.map(fn, *iterables)
        assert self.sim is not None
        return iter(self.sim.parallel(lambda args: fn(*args), zip(*iterables, strict=False), self.max_workers))


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
