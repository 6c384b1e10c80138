"""The worker's calls into the server, as its BackendContext offers them to the model.

``infer`` (``ctx.infer``: a BLS call) and ``stream`` (``ctx.infer_stream``: a BLS call to a decoupled
model, its responses as they come) send a CALL / CALL_STREAM and wait for the answer while the
request runs; custom metrics (``ctx.custom_metrics``) send updates without waiting and ask the server
when the model needs an answer (creating a family, reading a value).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

from servelab.backends.base import Inputs, Outputs, StreamItem
from servelab.core.workers._channel import CALL, CALL_CANCEL, CALL_STREAM, METRIC, QUERY, Channel, error_from
from servelab.core.workers._pump import Pump
from servelab.metrics.custom import Labels, MetricSink

__all__ = ["ServerCalls"]


class ServerCalls:
    """What a worker's model reaches the server through (see the module docstring)."""

    def __init__(self, channel: Channel, pump: Pump) -> None:
        self.channel = channel
        self.pump = pump
        self._ids = itertools.count(1)
        self.metrics = _Metrics(self)

    def infer(self, model: str, version: str, inputs: Inputs) -> Outputs:
        """Run another model through the server while this request runs."""
        call_id = next(self._ids)
        self.channel.send(CALL, call_id, build=lambda put: (model, version, put(inputs)))
        answer = self.pump.answer(call_id)
        if answer[0] == 0:
            return answer[1]  # type: ignore[no-any-return]
        raise error_from(answer[1], answer[2])

    def stream(self, model: str, version: str, inputs: Inputs, parameters: dict[str, Any]) -> Iterator[StreamItem]:
        """Every response of a model to these inputs, as the server forwards them; closing the iterator
        early cancels the call."""
        call_id = next(self._ids)
        self.pump.expect_items(call_id)
        final = False
        try:
            self.channel.send(CALL_STREAM, call_id, build=lambda put: (model, version, put(inputs), parameters))
            while not final:
                entry, final, params = self.pump.next_item(call_id)
                item = StreamItem(final=final, parameters=params)
                if entry is not None:
                    if entry[0] == 0:
                        item.outputs = entry[1]
                    else:
                        item.error = error_from(entry[1], entry[2])
                yield item
        finally:
            self.pump.drop_items(call_id)
            if not final:
                self.channel.send(CALL_CANCEL, call_id)

    def query(self, *body: Any) -> Any:
        call_id = next(self._ids)
        self.channel.send(QUERY, call_id, body)
        answer = self.pump.answer(call_id)
        if answer[0] == 0:
            return answer[1]
        raise error_from(answer[1], answer[2])


class _Metrics:
    """``ctx.custom_metrics`` in a worker: the server keeps the values (and knows the owner: this worker)."""

    def __init__(self, calls: ServerCalls) -> None:
        self.calls = calls

    def bind(self, owner: str) -> MetricSink:
        return _Sink(self.calls)

    def forget(self, owner: str) -> None:
        """Nothing to do: the server forgets a worker's metrics when the worker goes."""


class _Sink:
    def __init__(self, calls: ServerCalls) -> None:
        self.calls = calls

    def family(self, name: str, description: str, kind: str) -> None:
        self.calls.query("family", name, description, kind)

    def update(self, op: str, name: str, labels: Labels, value: float = 0.0,
               buckets: Sequence[float] | None = None) -> None:
        body = (op, name, labels, float(value), list(buckets) if buckets else None)
        if op == "declare":  # the server checks labels and buckets: the model's call hears its verdict
            self.calls.query("update", *body)
        else:
            self.calls.channel.send(METRIC, 0, body)

    def value(self, name: str, labels: Labels) -> float:
        return float(self.calls.query("value", name, labels))
