"""Triton's sequence batcher: stateful models whose requests come in sequences (``sequence_id``).

Each request names its sequence (request parameters ``sequence_id``, ``sequence_start``,
``sequence_end``; REST and gRPC decode them alike). Every sequence lives in one batch slot of one
instance for its lifetime (:mod:`._sequence_slots`: slots, backlog, idle limit), so its requests run in
order, one at a time, on the same instance. One thread per instance forms that instance's batches:

* **direct** (the default): row *i* of a batch is slot *i*. Rows up to the highest slot with a request
  ready are filled; a slot with nothing ready gets a null request (zeros, READY false) so that every
  sequence keeps its row. With ``minimum_slot_utilization`` > 0 and ``max_queue_delay_microseconds``
  the batch waits for that share of ready slots, at most that long.
* **oldest**: up to ``max_batch_size`` requests of different sequences, oldest first, as the dynamic
  batcher would batch them (preferred sizes, ``max_queue_delay_microseconds``); at most one request
  per sequence per batch. Answers leave each instance in the order its batches formed.

The batcher adds the control inputs the config names (START, END, READY, CORRID) to every request and
carries implicit state: the ``output_name`` tensor a request produces is the ``input_name`` tensor of
its sequence's next request (the initial state on a START). State outputs are removed from answers
unless ``output`` lists them. Requests must have batch size 1 (Triton's rule), and only the servers'
path carries request parameters: the in-process :meth:`run` refuses a sequence model, saying so.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servelab.backends.base import Backend, Executed, Inputs, Outputs
from servelab.core.batching._delivery import Result, awaiting
from servelab.core.batching._sequence_policy import CORRID, END, READY, START, SequencePolicy
from servelab.core.batching._sequence_slots import SeqPending, Slot, SlotTable
from servelab.core.scheduling import Scheduler, request_rows
from servelab.core.stats import ModelStats
from servelab.core.workers import WorkerInstance
from servelab.errors import Cancelled, InternalError, InvalidArgument, ServelabError, Unavailable
from servelab.protocol import model_config_pb2 as mc

__all__ = ["SequenceBatcher"]

@dataclass(slots=True)
class _Row:
    """One row of a batch: a queued request (or None: a null request keeping a direct slot's row)."""

    slot: Slot
    pending: SeqPending | None
    inputs: Inputs


class SequenceBatcher(Scheduler):
    """The sequence batcher for one model version (see the module docstring)."""

    def __init__(
        self, backends: list[Backend], stats: ModelStats, config: mc.ModelConfig, *, model_dir: Path | None = None
    ) -> None:
        super().__init__(backends, stats)
        self.policy = SequencePolicy.from_config(config, model_dir)
        self._table = SlotTable(len(backends), self.policy.slots, self.policy.idle_ns)
        self._cond = threading.Condition()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._work, args=(lane, b), daemon=True, name=f"sequence-{stats.name}-{lane}")
            for lane, b in enumerate(backends)
        ]
        for t in self._threads:
            t.start()

    @property
    def pending(self) -> int:
        return len(self._table)

    # ----- submitting -----
    def _run(self, inputs: Inputs) -> Outputs:
        raise InvalidArgument(
            f"model '{self.stats.name}' is a sequence model: each request needs the sequence_id, sequence_start "
            "and sequence_end parameters, which only REST and gRPC requests carry"
        )

    async def _run_async(self, inputs: Inputs, parameters: dict[str, Any]) -> Outputs:
        policy = self.policy
        seq = policy.request(parameters, request_rows(inputs, policy.batched))
        policy.check_id(seq.sequence_id)
        future, deliver = awaiting()
        key = tuple((n, a.dtype.str, a.shape[1:] if policy.batched else a.shape) for n, a in inputs.items())
        now = time.perf_counter_ns()
        p = SeqPending(inputs, seq, now, deliver, key)
        with self._cond:
            if self._closed:
                raise Unavailable(f"model '{self.stats.name}' is unloading")
            self._table.place(p, self.stats.name, now)  # InvalidArgument: no START for an unknown sequence
            self._enter()
            self._cond.notify_all()
        try:
            return await future
        except asyncio.CancelledError:
            self._cancel(p)
            raise

    def _cancel(self, p: SeqPending) -> None:
        with self._cond:
            dropped = self._table.cancel(p, time.perf_counter_ns())
            self._cond.notify_all()
        gone = Cancelled(
            f"sequence {p.seq.sequence_id} of model '{self.stats.name}' was cancelled: a request of it was "
            "cancelled by its client"
        )
        for q in dropped:
            self._finish(q, gone)

    def _finish(self, p: SeqPending, result: Result) -> None:
        self._leave()
        p.deliver(result)

    # ----- forming -----
    def _work(self, lane: int, backend: Backend) -> None:
        while True:
            if isinstance(backend, WorkerInstance):  # a restarting worker: its sequences wait for it
                while not (self._closed or backend.closed or backend.wait_available(0.5)):
                    pass
            with self._cond:
                rows = self._next_batch(lane)
            if rows is None:
                return
            self._execute(backend, rows)

    def _next_batch(self, lane: int) -> list[_Row] | None:
        form = self._form_direct if self.policy.strategy == "direct" else self._form_oldest
        while True:
            if self._closed:
                return None
            now = time.perf_counter_ns()
            wake = self._table.reap(lane, now)
            rows, due = form(self._table.lanes[lane], now)
            if rows:
                return rows
            if due is not None:
                wake = due if wake is None else min(wake, due)
            self._cond.wait(None if wake is None else max(0.0, (wake - now) / 1e9))

    def _form_direct(self, slots: list[Slot], now: int) -> tuple[list[_Row], int | None]:
        policy = self.policy
        ready = [s for s in slots if s.queue]
        if not ready:
            return [], None
        if policy.max_delay_ns and policy.min_slot_utilization > 0:
            oldest = min(s.queue[0].enqueue_ns for s in ready)
            if len(ready) / policy.max_batch_size < policy.min_slot_utilization and now - oldest < policy.max_delay_ns:
                return [], oldest + policy.max_delay_ns
        key = ready[0].queue[0].shape_key  # requests of another shape wait for a later batch
        top = max(s.index for s in ready if s.queue[0].shape_key == key)
        taken: list[tuple[Slot, SeqPending | None]] = []
        for slot in slots[: top + 1]:
            fits = bool(slot.queue) and slot.queue[0].shape_key == key
            taken.append((slot, self._table.take(slot, now) if fits else None))
        model_inputs = {id(p): self._inputs(p) for _, p in taken if p is not None}
        template = next(iter(model_inputs.values()))
        return [
            _Row(slot, p, model_inputs[id(p)] if p is not None else self._null(template)) for slot, p in taken
        ], None

    def _form_oldest(self, slots: list[Slot], now: int) -> tuple[list[_Row], int | None]:
        policy = self.policy
        heads = sorted((s for s in slots if s.queue), key=lambda s: s.queue[0].enqueue_ns)
        if not heads:
            return [], None
        key = heads[0].queue[0].shape_key
        chosen = [s for s in heads if s.queue[0].shape_key == key][: policy.max_batch_size]
        n = len(chosen)
        full = n >= policy.target or len(heads) == len(slots) or n < len(heads)
        due = heads[0].queue[0].enqueue_ns + policy.max_delay_ns
        if not full and now < due:
            return [], due
        if policy.preferred and n != policy.max_batch_size:
            n = max((size for size in policy.preferred if size <= n), default=n)
        rows = []
        for slot in chosen[:n]:
            p = self._table.take(slot, now)
            rows.append(_Row(slot, p, self._inputs(p)))
        return rows, None

    def _inputs(self, p: SeqPending) -> Inputs:
        """The request's inputs plus its control tensors and its sequence's state."""
        policy = self.policy
        inputs = dict(p.inputs)
        for c in policy.controls:
            if c.kind == CORRID:
                inputs[c.name] = c.corrid(p.seq.sequence_id, policy.batched, policy.model)
            else:
                on = p.seq.start if c.kind == START else p.seq.end if c.kind == END else c.kind == READY
                inputs[c.name] = c.flag(on, policy.batched)
        values = p.state.values if p.state is not None else {}
        for st in policy.states:
            value = None if p.seq.start else values.get(st.input_name)
            if value is None:
                value = st.initial[np.newaxis] if policy.batched else st.initial
            inputs[st.input_name] = value
        return inputs

    def _null(self, template: Inputs) -> Inputs:
        """A request that keeps an empty slot's row: zeros shaped like ``template``, every control false."""
        policy = self.policy
        inputs = {n: np.zeros_like(a) if a.dtype != object else np.full(a.shape, b"", dtype=object) for n, a in template.items()}
        for c in policy.controls:
            inputs[c.name] = c.corrid(0, policy.batched, policy.model) if c.kind == CORRID else c.flag(False, policy.batched)
        return inputs

    # ----- executing -----
    def _execute(self, backend: Backend, rows: list[_Row]) -> None:
        start = time.perf_counter_ns()
        try:
            executed = backend.execute_timed([r.inputs for r in rows])
            if len(executed.results) != len(rows):
                raise InternalError(f"backend returned {len(executed.results)} results for {len(rows)} requests")
        except Exception as exc:  # never let a worker thread die
            err = exc if isinstance(exc, ServelabError) else InternalError(f"batch failed: {exc}")
            executed = Executed([err] * len(rows))
        real = [(r, res) for r, res in zip(rows, executed.results, strict=True) if r.pending is not None]
        self._observe_execution(len(real), len(real), executed.input_ns, executed.infer_ns, executed.output_ns)
        for row, result in real:
            p = row.pending
            assert p is not None
            if not isinstance(result, ServelabError):
                result = self._keep_state(p, result)
            if not isinstance(result, ServelabError):
                self._observe_queue(start - p.enqueue_ns + executed.queue_ns)
            with self._cond:
                self._table.finished(p, row.slot, time.perf_counter_ns())
            self._finish(p, result)

    def _keep_state(self, p: SeqPending, outputs: Outputs) -> Result:
        """Store the state outputs for the sequence's next request; drop those the client does not see."""
        if not self.policy.states:
            return outputs
        answer = dict(outputs)
        for st in self.policy.states:
            value = answer.get(st.output_name)
            if value is None:
                return InternalError(
                    f"model '{self.stats.name}' produced no state output '{st.output_name}' "
                    f"(sequence_batching.state output_name)"
                )
            if p.state is not None:
                p.state.values[st.input_name] = np.array(value, copy=True)
            if st.output_name not in self.policy.state_outputs_shown:
                del answer[st.output_name]
        return answer

    def close(self) -> None:
        with self._cond:
            self._closed = True
            left = self._table.drain()
            self._cond.notify_all()
        for p in left:
            self._finish(p, Unavailable(f"model '{self.stats.name}' was unloaded before the request ran"))
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=5)
