"""The load loop of one worker (one event loop): warm-up, then closed or open loop, cut into windows.

Closed loop keeps ``concurrency`` requests in flight. Open loop sends at ``rate`` per second (constant
or Poisson gaps) from a fixed set of senders and times each request from its *scheduled* send time, so a
server (or client) that falls behind shows up as latency instead of silently lowering the offered load.
Every completed window is handed to ``emit``; the caller decides when to stop by setting ``stop``. A worker
never sends more than ``request_count`` requests (when given) nor runs longer than ``max_s``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from servelab.bench.clients import Client, RequestFailed
from servelab.bench.stats import WindowStats

__all__ = ["OPEN_LOOP_SENDERS", "Emit", "WorkerPlan", "open_loop_senders", "run_worker"]

Emit = Callable[[int, WindowStats, bool], None]
"""emit(window_index, stats, final): ``final`` marks the last, possibly partial, window."""


@dataclass(frozen=True, slots=True)
class WorkerPlan:
    """One worker's share of a load level."""

    mode: str
    level: float
    arrivals: str = "constant"
    interval_s: float = 2.0
    window_requests: int | None = None
    request_count: int | None = None
    warmup_requests: int = 0
    max_s: float = 120.0
    max_inflight: int = 512
    batch_size: int = 1
    seed: int = 0


class _Windows:
    """Accumulates completions into the current window and emits it when it closes."""

    def __init__(self, plan: WorkerPlan, emit: Emit) -> None:
        self._plan = plan
        self._emit = emit
        self.index = 0
        self.start = time.perf_counter()
        self.current = WindowStats(0.0, batch_size=plan.batch_size)
        self.closed = False

    def record(self, latency_s: float) -> None:
        self.current.histogram.record(latency_s)
        wr = self._plan.window_requests
        if wr is not None and self.current.completed >= wr:
            self.roll(time.perf_counter())

    def error(self, kind: str) -> None:
        self.current.errors[kind] += 1

    def roll(self, now: float, final: bool = False) -> None:
        if self.closed:
            return
        self.current.duration_s = now - self.start
        self._emit(self.index, self.current, final)
        self.index += 1
        self.start = now
        self.current = WindowStats(0.0, batch_size=self._plan.batch_size)
        self.closed = final


class _Budget:
    """Hands out request indices; bounded by ``limit`` when given."""

    def __init__(self, limit: int | None, n_prepared: int) -> None:
        self.limit = limit
        self.sent = 0
        self._n = n_prepared

    def take(self) -> int | None:
        if self.limit is not None and self.sent >= self.limit:
            return None
        i = self.sent % self._n
        self.sent += 1
        return i


async def _send(client: Client, index: int, t_sched: float, windows: _Windows | None) -> None:
    try:
        await client.send(index)
    except RequestFailed as exc:
        if windows is not None:
            windows.error(exc.kind)
        return
    except Exception as exc:  # an unexpected client-side failure is counted, not fatal
        if windows is not None:
            windows.error(f"client_{type(exc).__name__}")
        return
    if windows is not None:
        windows.record(time.perf_counter() - t_sched)


async def _warmup(client: Client, plan: WorkerPlan) -> None:
    if plan.warmup_requests <= 0:
        return
    budget = _Budget(plan.warmup_requests, client.n_prepared)
    width = max(1, min(int(plan.level) if plan.mode == "concurrency" else 8, plan.warmup_requests))

    async def slot() -> None:
        while (i := budget.take()) is not None:
            await _send(client, i, time.perf_counter(), None)

    await asyncio.gather(*(slot() for _ in range(width)))


async def _closed_loop(
    client: Client, plan: WorkerPlan, windows: _Windows, budget: _Budget, stop: asyncio.Event
) -> None:
    async def slot() -> None:
        while not stop.is_set() and (i := budget.take()) is not None:
            await _send(client, i, time.perf_counter(), windows)

    await asyncio.gather(*(slot() for _ in range(int(plan.level))))


#: requests an open-loop worker has on the wire at most: its senders. An arrival that finds every sender busy
#: waits in the worker's queue (a number, not a task), its wait counted in its latency, up to ``max_inflight``
#: arrivals outstanding in all. A task per arrival (as before) made a rate just past the server's capacity
#: collapse: each late arrival's task woke, found no free connection and slept again, the loop's ready
#: queue filled with them, and a connection freed by an answer stayed idle behind them (credit over REST:
#: 7,325 req/s offered, 571 served, the server idle). The load generator's own ceiling for an open-loop level
#: is measured at this concurrency (sweep._ceiling_load).
OPEN_LOOP_SENDERS = 64


def open_loop_senders(plan: WorkerPlan) -> int:
    """How many requests an open-loop worker carries at once (and so its client's connections)."""
    return max(1, min(plan.max_inflight, OPEN_LOOP_SENDERS))


async def _open_loop(
    client: Client, plan: WorkerPlan, windows: _Windows, budget: _Budget, stop: asyncio.Event
) -> None:
    rng = np.random.default_rng(plan.seed)
    gap = 1.0 / plan.level
    senders = open_loop_senders(plan)
    # (request index, scheduled send time); None tells a sender to stop. Outstanding arrivals (queued or on
    # the wire) are at most max_inflight (one more when every one of them is a sender: a queue holds at least
    # one): past that the schedule waits, and its lateness is counted
    due: asyncio.Queue[tuple[int, float] | None] = asyncio.Queue(maxsize=max(1, plan.max_inflight - senders))

    async def sender() -> None:
        while (item := await due.get()) is not None:
            await _send(client, item[0], item[1], windows)

    tasks = [asyncio.create_task(sender()) for _ in range(senders)]
    next_t = time.perf_counter()
    try:
        while not stop.is_set():
            delay = next_t - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(min(delay, 0.05))
                continue
            while next_t <= time.perf_counter() and not stop.is_set():
                i = budget.take()
                if i is None:
                    stop.set()
                    break
                await due.put((i, next_t))  # waits only while max_inflight arrivals are outstanding
                next_t += gap if plan.arrivals == "constant" else float(rng.exponential(gap))
    finally:
        for _ in tasks:  # after the arrivals already queued: every request taken is sent and timed
            await due.put(None)
        await asyncio.gather(*tasks)


async def _ticker(plan: WorkerPlan, windows: _Windows, stop: asyncio.Event) -> None:
    while not stop.is_set():
        end = windows.start + plan.interval_s
        try:
            await asyncio.wait_for(stop.wait(), timeout=max(0.0, end - time.perf_counter()))
        except TimeoutError:
            windows.roll(time.perf_counter())


async def run_worker(
    client: Client,
    plan: WorkerPlan,
    emit: Emit,
    stop: asyncio.Event,
    on_measuring: Callable[[], None] | None = None,
) -> int:
    """Warm up, then load until ``stop`` is set, the request budget is spent or ``max_s`` passes.

    ``on_measuring`` is called once warm-up is over. Returns the number of measured requests sent. With ``request_count``, the final (partial) window
    is emitted with ``final=True`` once every request has completed.
    """
    await _warmup(client, plan)
    if on_measuring is not None:
        on_measuring()
    windows = _Windows(plan, emit)
    budget = _Budget(plan.request_count, client.n_prepared)
    load_done = asyncio.Event()
    loop_fn = _closed_loop if plan.mode == "concurrency" else _open_loop
    ticker = asyncio.create_task(_ticker(plan, windows, load_done)) if plan.window_requests is None else None
    deadline = asyncio.get_running_loop().call_later(plan.max_s, stop.set)
    try:
        await loop_fn(client, plan, windows, budget, stop)
    finally:
        deadline.cancel()
        load_done.set()
        if ticker is not None:
            await ticker
    if plan.request_count is not None and budget.sent >= plan.request_count:
        windows.roll(time.perf_counter(), final=True)
    return budget.sent
