"""DirectScheduler: each request runs as it comes, alone, on the next instance: in the caller's thread, on a
thread pool, on the event loop itself for a backend that never blocks and is measured fast enough, or on a
worker process."""

from __future__ import annotations

import asyncio
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from servelab.backends.base import Backend, Executed, Inputs, Outputs
from servelab.backends.parameters import SchedulerParameters
from servelab.core.cache import ResponseCache
from servelab.core.scheduling.base import Scheduler, request_rows
from servelab.core.stats import ModelStats
from servelab.core.workers import WorkerInstance
from servelab.errors import ServelabError, Unavailable
from servelab.protocol import model_config_pb2 as mc

__all__ = ["DirectScheduler"]

_DEFAULT_INLINE_US = 150
_DEFAULT_IDLE_INLINE_US = 2000
#: worker calls before the first probe on the loop, and the longest interval between probes (_probe)
_FIRST_PROBE, _LAST_PROBE = 16, 4096
#: a run on the caller's thread slower than this many times ``inline_ns`` whose thread used less CPU than
#: that waited (for the GIL back from another thread, or for a device): it counts this much, not its wall
#: time, towards the typical execution (_finish)
_WAITED_CAP = 4
#: per event loop: [requests awaiting a worker thread, last arrival ns]: "is anything else going on?"
_LOOP_LOAD: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[int]] = weakref.WeakKeyDictionary()


def _inline_threshold_ns(config: mc.ModelConfig, key: str, default_us: int) -> int:
    value = getattr(SchedulerParameters.read(config), key)  # the typed schema (backends/parameters.py)
    return int((default_us if value is None else value) * 1000)


class DirectScheduler(Scheduler):
    """No queue, no batching: each request runs alone on the next instance (round robin).

    Thread instances run in the caller's thread (:meth:`run`) or on a thread pool; a backend that
    declares ``never_blocks`` and is measured fast enough runs on the event loop itself. Worker
    process instances are awaited without a thread: the worker's reader thread answers the loop.
    """

    def __init__(
        self,
        backends: list[Backend],
        stats: ModelStats,
        threads: int | None = None,
        *,
        cache: ResponseCache | None = None,
    ) -> None:
        super().__init__(backends, stats, cache=cache)
        self._next = 0
        self._never_blocks = all(b.never_blocks for b in backends)
        config = backends[0].config
        #: models whose typical execution is below this run on the event loop (no thread hop);
        #: config parameter ``inline_execution_us`` (0 turns it off). Starts pessimistic until measured.
        #: Only for backends that declare ``never_blocks``.
        self.inline_ns = _inline_threshold_ns(config, "inline_execution_us", _DEFAULT_INLINE_US)
        #: ... and models up to this run on the loop when it is idle: nothing waiting on a worker and no
        #: request for twice the model's typical time (an idle server answers faster without the thread
        #: hop; under load the pool keeps the loop free). Parameter ``idle_inline_execution_us`` (0: off).
        self.idle_inline_ns = _inline_threshold_ns(config, "idle_inline_execution_us", _DEFAULT_IDLE_INLINE_US)
        if not self._never_blocks:
            self.inline_ns = self.idle_inline_ns = 0
        self._ewma_ns = float(10 * max(self.inline_ns, self.idle_inline_ns) + 1)
        #: the same for the worker thread's CPU time, from its first sample (see _probe); and the worker calls
        #: left until the next probe, with the interval that doubles after each probe that stays slow
        self._cpu_ewma_ns: float | None = None
        self._probe_every = _FIRST_PROBE
        self._until_probe = _FIRST_PROBE
        #: this version's requests submitted to its pool and not yet answered (a probe waits for none)
        self._pooled = 0
        self._closed = False
        #: read on every request: worked out once (the workers' deadline does not change)
        self._deadline_s = max(w.deadline_s for w in self._isolated) if self._all_workers else None
        self._pool = ThreadPoolExecutor(
            max_workers=threads or len(backends), thread_name_prefix=f"infer-{stats.name}"
        )

    @property
    def never_blocks(self) -> bool:
        return self._never_blocks

    @property
    def pending(self) -> int:
        return sum(w.queued for w in self._isolated)

    @property
    def deadline_s(self) -> float | None:
        return self._deadline_s

    @property
    def runs_inline_now(self) -> bool:
        return not self._all_workers and self._ewma_ns < self.inline_ns  # _run_async's first inline rule

    def _pick(self) -> Backend:
        """The next instance in turn, skipping worker processes that are restarting."""
        backends = self.backends
        if len(backends) == 1:
            return backends[0]
        for _ in range(len(backends)):
            backend = backends[self._next % len(backends)]
            self._next += 1
            if not isinstance(backend, WorkerInstance) or backend.available:
                return backend
        return backend  # every one is down: its refusal says why

    def run(self, inputs: Inputs) -> Outputs:
        """:meth:`Scheduler.run` without a cache, flattened (the event loop's inline path, every request
        of a fast model): one call into the backend, the in-flight count, statistics and histograms (the
        request's among them) each under its lock once."""
        if self.cache is not None:
            return super().run(inputs)
        t0 = time.perf_counter_ns()
        idle = self._idle
        with idle:
            self._in_flight += 1
        try:
            backend = self._pick()
            cpu0 = time.thread_time_ns()
            return self._finish(backend.execute_timed([inputs]), inputs, False, cpu0, t0)
        finally:
            with idle:
                self._in_flight -= 1
                if self._in_flight == 0:
                    idle.notify_all()

    def _run(self, inputs: Inputs, probe: bool = False) -> Outputs:
        self._enter()
        try:
            return self._execute(inputs, probe=probe)
        finally:
            self._leave()

    def _execute(self, inputs: Inputs, submitted_ns: int = 0, probe: bool = False) -> Outputs:
        backend = self._pick()
        if not submitted_ns:  # on the caller's thread: the loop, or a synchronous caller
            cpu0 = time.thread_time_ns()
            return self._finish(backend.execute_timed([inputs]), inputs, probe, cpu0)
        cpu0 = time.thread_time_ns()
        executed = backend.execute_timed([inputs])
        cpu_ns = time.thread_time_ns() - cpu0
        sample, ewma = min(cpu_ns, executed.infer_ns), self._cpu_ewma_ns
        self._cpu_ewma_ns = sample if ewma is None else ewma + (sample - ewma) * 0.1
        executed.queue_ns += time.perf_counter_ns() - submitted_ns - _executed_ns(executed)  # waited for a thread
        return self._finish(executed, inputs)

    def _finish(
        self, executed: Executed, inputs: Inputs, probe: bool = False, cpu0: int = 0, t0: int | None = None
    ) -> Outputs:
        # exponentially weighted execution time: decides whether the event loop may run the model itself;
        # a probe run on the loop that was fast enough sets it (see _probe)
        infer_ns = executed.infer_ns
        if probe and infer_ns < self.inline_ns:
            self._ewma_ns = float(infer_ns)
            return self._answer(executed, inputs, t0)
        cap = _WAITED_CAP * self.inline_ns
        if cpu0 and infer_ns > cap and time.thread_time_ns() - cpu0 < cap:
            # slow on the caller's thread without using the CPU: it waited. On a loop that shares the process
            # with worker threads (another version in the pool), a run that releases the GIL may wait ms to
            # take it back; counted in full, one such wait sent a fast canary off the loop (soak.py --rollout).
            # A model that waits on every call (a device) still reaches the cap, above inline_ns, and leaves.
            infer_ns = cap
        self._ewma_ns += (infer_ns - self._ewma_ns) * 0.1
        return self._answer(executed, inputs, t0)

    def _answer(self, executed: Executed, inputs: Inputs, t0: int | None = None) -> Outputs:
        """The result; statistics for a success (and the request histogram, from ``t0``, where given)."""
        result = executed.results[0]
        if isinstance(result, ServelabError):
            raise result
        self._observe_alone(request_rows(inputs, self.batched), executed.input_ns, executed.infer_ns,
                            executed.output_ns, max(0, executed.queue_ns),
                            None if t0 is None else time.perf_counter_ns() - t0)  # fmt: skip
        return result

    async def _run_async(self, inputs: Inputs, parameters: dict[str, Any]) -> Outputs:
        if self._all_workers:
            return await self._run_worker(inputs)
        if self._ewma_ns < self.inline_ns:
            # A model this fast costs less than the hop to a worker thread and back: run it on the loop.
            return self._run(inputs)
        loop = asyncio.get_running_loop()
        state = _LOOP_LOAD.get(loop)
        if state is None:
            state = _LOOP_LOAD[loop] = [0, 0]
        now = time.perf_counter_ns()
        idle = state[0] == 0 and now - state[1] > 2 * self._ewma_ns
        state[1] = now
        if idle and self._ewma_ns < self.idle_inline_ns:
            # Nothing in flight and no request for a while on this loop: nobody would wait for it.
            return self._run(inputs)
        if self._cpu_ewma_ns is not None and self._cpu_ewma_ns < self.inline_ns:
            self._until_probe -= 1
            if self._until_probe <= 0 and not self._pooled:  # not beside its own worker: that would slow it
                return self._probe(inputs)
        state[0] += 1
        self._pooled += 1
        # in flight from submission, not from when a worker thread picks it up: a reload's drain must wait
        # for requests still queued in the pool (it used to close the pool under them: 500s mid-reload)
        self._enter()
        try:
            return await self._in_pool(loop, inputs, now)
        finally:
            self._leave()
            state[0] -= 1
            self._pooled -= 1

    def _probe(self, inputs: Inputs) -> Outputs:
        """Run one request on the loop to learn what the model costs there.

        On a worker thread under load, a model's wall time includes taking the GIL back (up to the 5 ms
        switch interval while the loop runs Python), so a fast model first called under load (a canary
        version, a reload) never measured fast enough to go inline and stayed ~50x slower than the same model
        warmed up on a quiet server (benchmarks/soak.py's identical canary, rolled back on P99). Its thread's
        CPU time says it may be fast, not that it is (a GPU or OpenVINO call waits without using the CPU):
        the loop's own wall time decides. A probe that is not fast doubles the interval to the next
        (16 worker calls, then 32, ... up to 4,096), which bounds what mistaken probes cost the loop.
        """
        try:
            return self._run(inputs, probe=True)
        finally:
            if not self.runs_inline_now:
                self._probe_every = min(self._probe_every * 2, _LAST_PROBE)
            self._until_probe = self._probe_every

    async def _in_pool(self, loop: asyncio.AbstractEventLoop, inputs: Inputs, submitted_ns: int) -> Outputs:
        """The pool's answer; Unavailable (never a RuntimeError or a stray cancellation) once it is closed."""
        gone = Unavailable(f"model '{self.stats.name}' version {self.stats.version} was unloaded; retry")
        if self._closed:
            raise gone
        try:
            future = loop.run_in_executor(self._pool, self._execute, inputs, submitted_ns)
        except RuntimeError:  # closed between the check and the submission (close runs in another thread)
            raise gone from None
        try:
            return await future
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if future.cancelled() and task is not None and not task.cancelling():
                raise gone from None  # the pool dropped it at close (past the drain timeout)
            raise

    async def _run_worker(self, inputs: Inputs) -> Outputs:
        backend = self._pick()
        assert isinstance(backend, WorkerInstance)
        self._enter()
        try:
            executed = await backend.execute_async([inputs])
        finally:
            self._leave()
        return self._finish(executed, inputs)

    def close(self) -> None:
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)


def _executed_ns(executed: Executed) -> int:
    return executed.queue_ns + executed.input_ns + executed.infer_ns + executed.output_ns
