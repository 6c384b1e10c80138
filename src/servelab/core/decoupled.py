"""Decoupled models' responses (``model_transaction_policy { decoupled: true }``): any number per request.

What the data plane's streams are made of: :class:`Streamed` items, Triton's final-response parameters,
the next item of a model's stream within the request's time, and a client response built from an item.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from servelab.backends.base import StreamItem
from servelab.core.records import LoadedVersion
from servelab.core.workers import AsyncSink
from servelab.errors import ServelabError, Unavailable
from servelab.types import DataType, InferRequest, InferResponse, Tensor

__all__ = ["EMPTY_FINAL", "FINAL", "Streamed", "is_decoupled", "next_item", "streamed_response"]

#: request parameter (Triton's): also send the final response of a decoupled model when it has no outputs
EMPTY_FINAL = "triton_enable_empty_final_response"
#: response parameter (Triton's): whether this is the request's last response
FINAL = "triton_final_response"


@dataclass(slots=True)
class Streamed:
    """One response of :meth:`DataPlane.infer_stream`: the response or the error that fails it (its
    request may still send more unless ``final``)."""

    response: InferResponse | None
    error: ServelabError | None = None
    final: bool = True


def is_decoupled(lv: LoadedVersion) -> bool:
    return lv.config.model_transaction_policy.decoupled


async def next_item(lv: LoadedVersion, sink: AsyncSink, timeout_s: float) -> StreamItem:
    """The model's next response, or a final error item when none came within ``timeout_s``."""
    try:
        async with asyncio.timeout(timeout_s):
            return await sink.get()
    except TimeoutError:
        return StreamItem(error=Unavailable(
            f"model '{lv.name}' sent no response within {timeout_s:g} s"), final=True)


def streamed_response(lv: LoadedVersion, request: InferRequest, item: StreamItem) -> InferResponse:
    """A decoupled model's response: the requested outputs it holds (all it holds when none were asked)."""
    outputs = item.outputs or {}
    asked = {r.name: r for r in request.outputs}
    names = [n for n in asked if n in outputs] if asked else list(outputs)
    tensors = [Tensor(n, DataType.from_numpy(outputs[n].dtype), tuple(outputs[n].shape), outputs[n],
                      dict(asked[n].parameters) if n in asked else {}) for n in names]  # fmt: skip
    return InferResponse(lv.name, str(lv.version), tensors, request.id, {**item.parameters, FINAL: item.final})
