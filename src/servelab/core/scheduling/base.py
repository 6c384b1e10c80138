"""What every scheduler shares: the response cache (looked up before a request is scheduled, filled after),
the latency and batch-size histograms the metrics read, and the in-flight count unloading drains."""

from __future__ import annotations

import contextlib
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

from servelab.backends.base import Backend, Inputs, Outputs
from servelab.core.cache import ResponseCache, cache_key
from servelab.core.stats import ModelStats
from servelab.core.workers import WorkerInstance
from servelab.metrics.histograms import ModelHistograms

__all__ = ["Scheduler", "request_rows"]

def request_rows(inputs: Inputs, batched: bool) -> int:
    if not batched or not inputs:
        return 1
    return len(next(iter(inputs.values())))


class Scheduler(ABC):
    """Runs validated inputs on a model version's instances and records execution statistics."""

    def __init__(self, backends: list[Backend], stats: ModelStats, *, cache: ResponseCache | None = None) -> None:
        if not backends:
            raise ValueError("a scheduler needs at least one backend instance")
        self.backends = backends
        self.stats = stats
        self.cache = cache
        self.histograms = ModelHistograms()
        config = backends[0].config
        self.batched = config.max_batch_size > 0
        self._isolated = [b for b in backends if isinstance(b, WorkerInstance)]
        self._all_workers = len(self._isolated) == len(backends)
        self._in_flight = 0
        self._idle = threading.Condition(threading.Lock())  # never taken twice by one thread: no RLock

    # ----- the public entry points: cache, histogram, then the subclass -----
    def run(self, inputs: Inputs) -> Outputs:
        """Run one request synchronously in the calling thread."""
        t0 = time.perf_counter_ns()
        key, hit, lookup_ns = self._lookup(inputs)
        if hit is not None:
            self.histograms.request.observe((time.perf_counter_ns() - t0) / 1e9)
            return hit
        try:
            outputs = self._run(inputs)
        except BaseException:
            self._store(key, lookup_ns, None)
            raise
        self._store(key, lookup_ns, outputs)
        self.histograms.request.observe((time.perf_counter_ns() - t0) / 1e9)
        return outputs

    async def run_async(self, inputs: Inputs, parameters: dict[str, Any] | None = None) -> Outputs:
        """Run one request without blocking the event loop."""
        t0 = time.perf_counter_ns()
        key, hit, lookup_ns = self._lookup(inputs)
        if hit is not None:
            self.histograms.request.observe((time.perf_counter_ns() - t0) / 1e9)
            return hit
        try:
            outputs = await self._run_async(inputs, parameters or {})
        except BaseException:
            self._store(key, lookup_ns, None)
            raise
        self._store(key, lookup_ns, outputs)
        self.histograms.request.observe((time.perf_counter_ns() - t0) / 1e9)
        return outputs

    @abstractmethod
    def _run(self, inputs: Inputs) -> Outputs:
        """Run one request (cache already missed) in the calling thread."""

    @abstractmethod
    async def _run_async(self, inputs: Inputs, parameters: dict[str, Any]) -> Outputs:
        """Run one request (cache already missed) without blocking the loop."""

    # ----- response cache -----
    def _lookup(self, inputs: Inputs) -> tuple[bytes | None, Outputs | None, int]:
        """(key, cached outputs or None, lookup ns); a hit is counted here, a miss when stored."""
        if self.cache is None:
            return None, None, 0
        t0 = time.perf_counter_ns()
        key = cache_key(self.stats.name, self.stats.version, inputs)
        hit = self.cache.get(key)
        lookup_ns = time.perf_counter_ns() - t0
        if hit is not None:
            self.stats.record_cache(True, lookup_ns)
        return key, hit, lookup_ns

    def _store(self, key: bytes | None, lookup_ns: int, outputs: Outputs | None) -> None:
        """Insert a computed response (None: it failed); the miss counts lookup + insertion time."""
        if key is None or self.cache is None:
            return
        t0 = time.perf_counter_ns()
        if outputs is not None:
            self.cache.put(key, outputs)
        self.stats.record_cache(False, lookup_ns + time.perf_counter_ns() - t0)

    # ----- bookkeeping -----
    def _observe_execution(self, rows: int, requests: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        self.stats.record_execution(rows, requests, input_ns, infer_ns, output_ns)
        self.histograms.compute.observe((input_ns + infer_ns + output_ns) / 1e9)
        self.histograms.batch_size.observe(rows)

    def _observe_alone(
        self, rows: int, input_ns: int, infer_ns: int, output_ns: int, queue_ns: int, request_ns: int | None = None
    ) -> None:
        """One request that ran alone and succeeded: :meth:`_observe_execution` and :meth:`_observe_queue`
        (and, given ``request_ns``, the request histogram) in one statistics lock and one histogram lock."""
        self.stats.record_execution(rows, 1, input_ns, infer_ns, output_ns, queue_ns)
        self.histograms.observe_execution((input_ns + infer_ns + output_ns) / 1e9, rows, queue_ns / 1e9,
                                          None if request_ns is None else request_ns / 1e9)  # fmt: skip

    def _observe_queue(self, queue_ns: int) -> None:
        """Queue time of one request that then succeeded (Triton counts successful requests only)."""
        self.histograms.queue.observe(queue_ns / 1e9)
        self.stats.record_queue(queue_ns)

    @property
    def never_blocks(self) -> bool:
        """Whether a synchronous :meth:`run` waits only on the CPU (ensembles may then run inline)."""
        return False

    @property
    def deadline_s(self) -> float | None:
        """The time limit this scheduler answers every request within by itself (its worker processes
        enforce it), so no timeout around :meth:`run_async` is needed; None where it does not."""
        return None

    @property
    def runs_inline_now(self) -> bool:
        """Whether :meth:`run_async` called now would run the model on the loop without awaiting anything
        (so a timeout around it could never fire); False where a scheduler does not know."""
        return False

    @property
    def available(self) -> bool:
        """False while no instance can take a request (every worker process is restarting)."""
        return not self._all_workers or any(w.available for w in self._isolated)

    def unavailable_reason(self) -> str:
        return "; ".join(w.down_reason for w in self._isolated if not w.available)

    @property
    def pending(self) -> int:
        """Requests waiting in a queue (0 for schedulers without one)."""
        return 0

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

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        """Count a request that runs past :meth:`run` (a decoupled model's stream) as in flight, so that
        unloading waits for it too."""
        self._enter()
        try:
            yield
        finally:
            self._leave()

    def drain(self, timeout_s: float) -> bool:
        """Wait until no request is in flight; False if the timeout passed first."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout=timeout_s)

    def close(self) -> None:
        """Stop accepting work (subclasses release threads)."""
