"""The dynamic batcher: a per-model queue merged into batches run by one worker thread per instance.

Requests come from any thread or event loop; results go back through ``call_soon_threadsafe`` to the
loop that asked, so the loop never blocks on inference. An idle worker becomes the *former*: it waits
for the head of the queue to make a batch, taking

* at once, when the queued rows reach the largest preferred size (or max_batch_size without preferred
  sizes), or no further request fits (too many rows, or different input shapes, which cannot share one
  concatenate);
* otherwise when ``max_queue_delay_microseconds`` has passed since the oldest request of the batch.

The batch is cut after the largest preferred size reached on the way (Triton's rule) unless it ends on
max_batch_size; one request is never split. Requests are served level by level (priority 1 first),
FIFO within a level. Queue policy: a full level rejects at once (ResourceExhausted); a request whose
timeout passes while queued fails with Unavailable (REJECT) or moves behind its level (DELAY). A
client that goes away (its asyncio future cancelled) has its queued request dropped. With
``preserve_ordering`` results are handed back in the order the batches were formed.

The synchronous :meth:`run` (the in-process Engine, ensembles' steps) goes through the same queue, so
in-process callers batch, queue and time out exactly like network ones.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from servelab.backends.base import Backend, Executed, Inputs, Outputs
from servelab.core.batching._delivery import Result, awaiting
from servelab.core.batching._policy import BatchPolicy
from servelab.core.batching._queue import Pending, RequestQueue
from servelab.core.cache import ResponseCache
from servelab.core.scheduling import Scheduler, request_rows
from servelab.core.stats import ModelStats
from servelab.core.workers import WorkerInstance
from servelab.errors import InternalError, InvalidArgument, ServelabError, Unavailable
from servelab.protocol import model_config_pb2 as mc

__all__ = ["DynamicBatcher"]


def _int_param(parameters: dict[str, Any], key: str) -> int | None:
    value = parameters.get(key)
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"request parameter '{key}' must be an integer, got {value!r}") from None


class DynamicBatcher(Scheduler):
    """Triton's dynamic batcher for one model version (see the module docstring for the rules)."""

    def __init__(
        self,
        backends: list[Backend],
        stats: ModelStats,
        config: mc.ModelConfig,
        *,
        cache: ResponseCache | None = None,
    ) -> None:
        super().__init__(backends, stats, cache=cache)
        self.policy = BatchPolicy.from_config(config)
        self._queue = RequestQueue(self.policy)
        self._cond = threading.Condition()
        self._form = threading.Lock()
        self._closed = False
        self._formed = 0  # batches formed (their order, for preserve_ordering)
        self._order_lock = threading.Lock()
        self._next_out = 0
        self._done: dict[int, list[tuple[Pending, Result]]] = {}
        self._workers = [
            threading.Thread(target=self._work, args=(b,), daemon=True, name=f"batcher-{stats.name}-{i}")
            for i, b in enumerate(backends)
        ]
        for w in self._workers:
            w.start()

    @property
    def pending(self) -> int:
        return len(self._queue)

    # ----- submitting -----
    def _pending(self, inputs: Inputs, parameters: dict[str, Any], deliver: Any) -> Pending:
        policy = self.policy
        level = policy.level_of(_int_param(parameters, "priority"))
        qpolicy = policy.queues[level - 1]
        timeout_ns = qpolicy.timeout_ns(_int_param(parameters, "timeout"))
        now = time.perf_counter_ns()
        key = tuple((n, a.dtype.str, a.shape[1:] if policy.batched else a.shape) for n, a in inputs.items())
        return Pending(
            inputs, request_rows(inputs, policy.batched), key, level, now,
            now + timeout_ns if timeout_ns else 0, qpolicy.reject, deliver,
        )

    def _submit(self, p: Pending) -> None:
        with self._cond:
            if self._closed:
                raise Unavailable(f"model '{self.stats.name}' is unloading")
            self._queue.push(p)  # may raise ResourceExhausted
            self._enter()
            self._cond.notify()

    def _finish(self, p: Pending, result: Result) -> None:
        self._leave()  # first, so that a caller who has its answer sees nothing in flight
        p.deliver(result)

    def _expire(self) -> None:
        with self._cond:
            rejected = self._queue.expire(time.perf_counter_ns())
        for p in rejected:
            self._finish(p, self._timed_out())

    def _timed_out(self) -> Unavailable:
        return Unavailable(f"request for model '{self.stats.name}' timed out in the queue")

    def _run(self, inputs: Inputs) -> Outputs:
        done = threading.Event()
        box: list[Result] = []

        def deliver(result: Result) -> None:
            box.append(result)
            done.set()

        p = self._pending(inputs, {}, deliver)
        self._submit(p)
        if p.deadline_ns and not done.wait(max(0.0, (p.deadline_ns - time.perf_counter_ns()) / 1e9)):
            self._expire()  # rejects it (REJECT) or moves it behind its level (DELAY)
        done.wait()
        result = box[0]
        if isinstance(result, ServelabError):
            raise result
        return result

    async def _run_async(self, inputs: Inputs, parameters: dict[str, Any]) -> Outputs:
        loop = asyncio.get_running_loop()
        future, deliver = awaiting()
        p = self._pending(inputs, parameters, deliver)
        self._submit(p)
        timer = loop.call_later((p.deadline_ns - p.enqueue_ns) / 1e9, self._expire) if p.deadline_ns else None
        try:
            return await future
        except asyncio.CancelledError:
            with self._cond:
                dropped = self._queue.drop(p)
            if dropped:
                self._leave()
            raise
        finally:
            if timer is not None:
                timer.cancel()

    # ----- forming and executing -----
    def _work(self, backend: Backend) -> None:
        while True:
            if isinstance(backend, WorkerInstance):  # a restarting worker forms no batch: others may
                while not (self._closed or backend.closed or backend.wait_available(0.5)):
                    pass
            with self._form:
                formed = self._next_batch()
            if formed is None:
                return
            seq, batch = formed
            self._execute(backend, seq, batch)

    def _next_batch(self) -> tuple[int, list[Pending]] | None:
        policy = self.policy
        with self._cond:
            while True:
                if self._closed:
                    return None
                now = time.perf_counter_ns()
                rejected = self._queue.expire(now)
                if rejected:
                    self._cond.release()
                    try:
                        for p in rejected:
                            self._finish(p, self._timed_out())
                    finally:
                        self._cond.acquire()
                    continue
                plan = self._queue.plan()
                wake = self._queue.next_deadline()
                if plan.count:
                    due = plan.oldest_ns + policy.max_delay_ns
                    if plan.full or plan.rows >= policy.target or now >= due:
                        cut = plan.count
                        if plan.preferred_count and plan.rows != policy.max_batch_size:
                            cut = plan.preferred_count
                        seq = self._formed
                        self._formed += 1
                        return seq, self._queue.take(cut)
                    wake = due if wake is None else min(wake, due)
                self._cond.wait(None if wake is None else max(0.0, (wake - now) / 1e9))

    def _execute(self, backend: Backend, seq: int, batch: list[Pending]) -> None:
        start = time.perf_counter_ns()
        try:
            executed = backend.execute_timed([p.inputs for p in batch])
            results = executed.results
            if len(results) != len(batch):
                raise InternalError(f"backend returned {len(results)} results for {len(batch)} requests")
        except Exception as exc:  # never let a worker thread die
            err = exc if isinstance(exc, ServelabError) else InternalError(f"batch failed: {exc}")
            executed = Executed([err] * len(batch))
            results = executed.results
        rows = sum(p.rows for p in batch)
        self._observe_execution(rows, len(batch), executed.input_ns, executed.infer_ns, executed.output_ns)
        for p, result in zip(batch, results, strict=True):
            if not isinstance(result, ServelabError):  # the queue, then waiting for a busy worker
                self._observe_queue(start - p.enqueue_ns + executed.queue_ns)
        self._hand_back(seq, list(zip(batch, results, strict=True)))

    def _hand_back(self, seq: int, answered: list[tuple[Pending, Result]]) -> None:
        if not self.policy.preserve_ordering:
            for p, result in answered:
                self._finish(p, result)
            return
        with self._order_lock:
            self._done[seq] = answered
            ready: list[tuple[Pending, Result]] = []
            while self._next_out in self._done:
                ready.extend(self._done.pop(self._next_out))
                self._next_out += 1
        for p, result in ready:
            self._finish(p, result)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            left = self._queue.drain()
            self._cond.notify_all()
        for p in left:
            self._finish(p, Unavailable(f"model '{self.stats.name}' was unloaded before the request ran"))
        for w in self._workers:
            if w is not threading.current_thread():
                w.join(timeout=5)
