"""The server's answers to what a worker asks while it runs: BLS calls, decoupled BLS calls, custom metrics.

A call (``ctx.infer`` in the worker, Triton's ``InferenceRequest.exec``) runs on a thread of the pool
through the server's data plane, so it is validated, scheduled and counted like a client's request; its
answer's blocks are freed once the worker has read it. A stream call (``exec(decoupled=True)``) is
answered by one message per response until the final one, or until the worker cancels it. Custom
metric updates are applied at once by the thread that read them; a query (create a family, read a
value) is answered at once too, so the model's call sees the server's verdict.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from servelab.backends.base import InferFn, Inputs, StreamFn, StreamItem
from servelab.core.workers._channel import (
    ACKED,
    CALL,
    CALL_CANCEL,
    CALL_ITEM,
    CALL_RESULT,
    CALL_STREAM,
    METRIC,
    QUERY,
    QUERY_RESULT,
    Channel,
    Put,
    error_entry,
)
from servelab.errors import InvalidArgument, ServelabError, Unavailable, Unsupported
from servelab.metrics.custom import MetricSink

__all__ = ["WorkerCalls", "item_body"]

log = logging.getLogger("servelab.workers")

KINDS = (CALL, CALL_STREAM, CALL_CANCEL, METRIC, QUERY)


def item_body(put: Put, item: StreamItem) -> tuple[Any, bool, dict[str, Any]]:
    """(entry, final, parameters) of one response; entry None for a response without outputs or error."""
    if item.error is not None:
        entry: Any = error_entry(item.error)
    elif item.outputs is not None:
        try:
            entry = (0, put(item.outputs))
        except Exception as exc:  # e.g. a dtype no datatype carries: this response fails
            entry = error_entry(exc)
    else:
        entry = None
    return entry, item.final, item.parameters


def _body_of(item: StreamItem, put: Put) -> tuple[Any, bool, dict[str, Any]]:
    return item_body(put, item)


class WorkerCalls:
    """Answers one worker's calls into the server (see the module docstring)."""

    def __init__(self, label: str, infer: InferFn | None, stream: StreamFn | None, metrics: MetricSink | None,
                 calls: Callable[[], Executor]) -> None:
        self.label = label
        self._infer = infer
        self._stream = stream
        self._metrics = metrics
        self._calls = calls
        self._cancelled: set[int] = set()

    def handle(self, channel: Channel, kind: int, msg_id: int, body: Any) -> None:
        """Take one message of :data:`KINDS` (the reader thread calls this; heavy work goes to the pool)."""
        if kind == METRIC:
            self._metric(body)
        elif kind == QUERY:
            self._query(channel, msg_id, body)
        elif kind == CALL_CANCEL:
            self._cancelled.add(msg_id)
        elif kind == CALL:
            model, version, descriptors = body
            self._submit(channel, CALL_RESULT, msg_id, self._answer_call, model, version,
                         channel.arrays(descriptors, copy=True))  # fmt: skip
        elif kind == CALL_STREAM:
            model, version, descriptors, parameters = body
            self._submit(channel, CALL_ITEM, msg_id, self._answer_stream, model, version,
                         channel.arrays(descriptors, copy=True), parameters)  # fmt: skip
        else:
            raise ValueError(f"unexpected message kind {kind} from the worker")

    def _submit(self, channel: Channel, reply: int, call_id: int, fn: Callable[..., None], *args: Any) -> None:
        try:
            self._calls().submit(fn, channel, call_id, *args)
        except RuntimeError:  # the server is shutting down
            entry = error_entry(Unavailable("the server is shutting down"))
            with contextlib.suppress(OSError):
                channel.send(reply, call_id, entry if reply == CALL_RESULT else (entry, True, {}))

    # ----- calls -----
    def _answer_call(self, channel: Channel, call_id: int, model: str, version: str, inputs: Inputs) -> None:
        """Run a worker's call through the server's data plane and send the answer back."""
        try:
            if self._infer is None:
                raise Unsupported(f"{self.label}: this server takes no calls to other models from workers")
            outputs = self._infer(model, version, inputs)
            channel.send(CALL_RESULT, call_id, build=lambda put: (0, put(outputs)), owner=ACKED)
        except OSError:
            return  # the worker went away meanwhile
        except Exception as exc:
            with contextlib.suppress(OSError):
                channel.send(CALL_RESULT, call_id, error_entry(exc))

    def _answer_stream(self, channel: Channel, call_id: int, model: str, version: str, inputs: Inputs,
                       parameters: dict[str, Any]) -> None:
        """Forward each response of a stream call until the final one (or the worker cancels)."""
        final = False
        try:
            if self._stream is None:
                raise Unsupported(f"{self.label}: this server takes no stream calls from workers")
            items = self._stream(model, version, inputs, parameters)
            try:
                for item in items:
                    if call_id in self._cancelled:
                        break
                    final = item.final
                    channel.send(CALL_ITEM, call_id, build=functools.partial(_body_of, item), owner=ACKED)
                    if final:
                        break
            finally:
                close = getattr(items, "close", None)
                if close is not None:
                    close()  # the stream's own clean-up (cancels the request if it is still open)
            if not final and call_id not in self._cancelled:
                channel.send(CALL_ITEM, call_id, (None, True, {}))
        except OSError:
            return
        except Exception as exc:
            if not final:
                with contextlib.suppress(OSError):
                    channel.send(CALL_ITEM, call_id, (error_entry(exc), True, {}))
        finally:
            self._cancelled.discard(call_id)

    # ----- custom metrics -----
    def _metric(self, body: Any) -> None:
        op, name, labels, value, buckets = body
        if self._metrics is None:
            return
        try:
            self._metrics.update(op, name, tuple(tuple(p) for p in labels), value, buckets)
        except ServelabError as exc:  # checked in the worker already: a model bypassing pb_utils
            log.warning("%s: custom metric update refused: %s", self.label, exc.message)

    def _query(self, channel: Channel, call_id: int, body: Any) -> None:
        try:
            if self._metrics is None:
                raise Unsupported(f"{self.label}: custom metrics are not collected by this server")
            what, *args = body
            if what == "family":
                self._metrics.family(*args)
                answer: Any = (0, None)
            elif what == "update":
                op, name, labels, value, buckets = args
                self._metrics.update(op, name, tuple(tuple(p) for p in labels), value, buckets)
                answer = (0, None)
            elif what == "value":
                answer = (0, self._metrics.value(args[0], tuple(tuple(p) for p in args[1])))
            else:
                raise InvalidArgument(f"unknown worker query {what!r}")
        except Exception as exc:
            answer = error_entry(exc)
        with contextlib.suppress(OSError):
            channel.send(QUERY_RESULT, call_id, answer)
