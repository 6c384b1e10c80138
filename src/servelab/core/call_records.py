"""One request between routing and its answer, and what its end records.

Every entry point of the data plane records the same way: the version's request statistics, and for a
routed model the router's count for the variant (which may send a shadow copy). A request the model
refused as invalid is the client's error, not the version's; a stream counts its executions and
latency only (its outputs are many: no shadow comparison).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import TracebackType

from servelab.backends.base import Inputs, Outputs
from servelab.core.records import LoadedVersion
from servelab.core.routing import Routed
from servelab.core.scheduling import request_rows
from servelab.core.workers import StreamSink
from servelab.errors import ErrorCode, ServelabError

__all__ = ["Call"]


@dataclass(slots=True)
class Call:
    """One request between routing and its answer.

    Used as ``with call:`` around running the model and building the answer: leaving the block records
    a success (with what :meth:`served` noted) or, on a :class:`ServelabError`, a failure; the error
    still propagates.
    """

    lv: LoadedVersion
    routed: Routed | None
    inputs: Inputs
    t0: int
    outputs: Outputs | None = None
    serve_ns: int = 0

    def served(self, outputs: Outputs, t0: int) -> None:
        """The model answered ``outputs``; its serving time ran from ``t0`` (perf_counter_ns) to now."""
        self.serve_ns = time.perf_counter_ns() - t0
        self.outputs = outputs

    def __enter__(self) -> Call:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            self._succeeded()
        elif isinstance(exc, ServelabError):
            self._failed(exc)

    def _succeeded(self) -> None:
        self.lv.stats.record_request(True, time.perf_counter_ns() - self.t0)
        if self.routed is not None:
            self.routed.done(True, self.serve_ns / 1e9, self.inputs, self.outputs)

    def _failed(self, exc: ServelabError) -> None:
        self.lv.stats.record_request(False, time.perf_counter_ns() - self.t0)
        if self.routed is not None:  # a request the model refused is the client's error, not the version's
            self.routed.done(exc.code is ErrorCode.INVALID_ARG, None, self.inputs, None)

    def stream_ended(self, sink: StreamSink, ok: bool) -> None:
        """A decoupled model's stream is over: its executions, queue time, and the request's outcome."""
        lv = self.lv
        executed = sink.executed
        if executed is not None:
            rows = request_rows(self.inputs, lv.config.max_batch_size > 0)
            lv.stats.record_execution(rows, 1, executed.input_ns, executed.infer_ns, executed.output_ns)
            if ok:
                lv.stats.record_queue(executed.queue_ns)
        elapsed_ns = time.perf_counter_ns() - self.t0
        lv.stats.record_request(ok, elapsed_ns)
        if self.routed is not None:  # a stream's outputs are many: no shadow comparison, counts and latency only
            self.routed.done(ok, elapsed_ns / 1e9 if ok else None, self.inputs, None)
