"""Model instances and the scheduler that runs requests on them.

:class:`Scheduler` is what the registry attaches to each loaded model version. :class:`DirectScheduler`
runs each request as it comes: in the caller's thread for the in-process API, in a worker thread for
servers (the event loop never blocks on inference). The dynamic batcher implements the same interface.
"""

from __future__ import annotations

import asyncio
import threading
import time
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from servelab.backends.base import Backend, Inputs, Outputs
from servelab.core.stats import ModelStats
from servelab.errors import ServelabError

__all__ = ["DirectScheduler", "Scheduler"]


class Scheduler(ABC):
    """Runs validated inputs on a model version's instances and records execution statistics."""

    def __init__(self, backends: list[Backend], stats: ModelStats) -> None:
        if not backends:
            raise ValueError("a scheduler needs at least one backend instance")
        self.backends = backends
        self.stats = stats
        self.batched = backends[0].config.max_batch_size > 0
        self._in_flight = 0
        self._idle = threading.Condition()

    @abstractmethod
    def run(self, inputs: Inputs) -> Outputs:
        """Run one request synchronously in the calling thread."""

    @abstractmethod
    async def run_async(self, inputs: Inputs, parameters: dict[str, Any] | None = None) -> Outputs:
        """Run one request without blocking the event loop."""

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def _enter(self) -> None:
        with self._idle:
            self._in_flight += 1

    def _leave(self) -> None:
        with self._idle:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.notify_all()

    def drain(self, timeout_s: float) -> bool:
        """Wait until no request is in flight; False if the timeout passed first."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout=timeout_s)

    def close(self) -> None:
        """Stop accepting work (subclasses release threads)."""


class DirectScheduler(Scheduler):
    """No queue, no batching: each request runs alone on the next instance (round robin)."""

    def __init__(self, backends: list[Backend], stats: ModelStats, threads: int | None = None) -> None:
        super().__init__(backends, stats)
        self._next = 0
        self._pool = ThreadPoolExecutor(
            max_workers=threads or len(backends), thread_name_prefix=f"infer-{stats.name}"
        )

    def run(self, inputs: Inputs) -> Outputs:
        backend = self.backends[self._next % len(self.backends)] if len(self.backends) > 1 else self.backends[0]
        self._next += 1
        self._enter()
        t0 = time.perf_counter_ns()
        try:
            result = backend.execute([inputs])[0]
        finally:
            self._leave()
        elapsed = time.perf_counter_ns() - t0
        if isinstance(result, ServelabError):
            raise result
        rows = len(next(iter(inputs.values()))) if self.batched and inputs else 1
        self.stats.record_execution(rows, 1, 0, elapsed, 0)
        return result

    async def run_async(self, inputs: Inputs, parameters: dict[str, Any] | None = None) -> Outputs:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self.run, inputs)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
