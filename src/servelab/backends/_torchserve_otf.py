"""TorchServe's frontend-to-worker frames ("OTF"), both ways, so that a handler runs through TorchServe's own
Python code (``ts.service.Service.predict``) exactly as TorchServe's Java frontend drives it.

Requests are written the way the frontend's ``ModelRequestEncoder`` writes them and read back by
``ts.protocol.otf_message_handler.retrieve_msg`` (which decodes ``application/json`` and ``text/*``
values as TorchServe does); answers are the bytes ``create_predict_response`` builds, read here the way
the frontend's ``ModelResponseDecoder`` reads them. Big-endian int32 lengths throughout.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from servelab.protocol.torchserve_envelope import TsRequest

__all__ = ["BufferConnection", "Prediction", "WorkerResponse", "encode_batch", "parse_response"]

_INT = struct.Struct("!i")


def _field(out: bytearray, value: bytes) -> None:
    out += _INT.pack(len(value))
    out += value


def encode_batch(requests: list[tuple[str, TsRequest]]) -> bytes:
    """The inference message (``b"I"`` + requests + end of list) for ``(request id, request)`` pairs."""
    out = bytearray(b"I")
    for request_id, request in requests:
        _field(out, request_id.encode())
        for name, value in request.headers.items():
            _field(out, name.encode())
            _field(out, value.encode())
        out += _INT.pack(-1)
        for name, content_type, data in request.parameters:
            _field(out, name.encode())
            _field(out, content_type.encode())
            _field(out, data)
        out += _INT.pack(-1)
    out += _INT.pack(-1)
    return bytes(out)


class BufferConnection:
    """A socket-like reader over bytes: what ``retrieve_msg(conn)`` reads from (``recv``)."""

    def __init__(self, data: bytes) -> None:
        self._view = memoryview(data)
        self._at = 0

    def recv(self, size: int) -> bytes:
        chunk = self._view[self._at : self._at + size]
        self._at += len(chunk)
        return bytes(chunk)


@dataclass
class Prediction:
    """One request's answer in a worker response."""

    request_id: str
    content_type: str
    status: int
    phrase: str
    headers: dict[str, str]
    value: bytes


@dataclass
class WorkerResponse:
    """A whole worker response: the batch's code and message, and each request's prediction."""

    code: int
    message: str
    predictions: list[Prediction] = field(default_factory=list)


class _Reader:
    def __init__(self, data: bytes | bytearray) -> None:
        self.data = bytes(data)
        self.at = 0

    def number(self) -> int:
        (value,) = _INT.unpack_from(self.data, self.at)
        self.at += 4
        return int(value)

    def take(self, length: int) -> bytes:
        out = self.data[self.at : self.at + length]
        if len(out) != length:
            raise ValueError("truncated TorchServe worker response")
        self.at += length
        return out

    def text(self) -> str:
        return self.take(self.number()).decode("utf-8", "replace")


def parse_response(data: bytes | bytearray) -> WorkerResponse:
    """Read what ``create_predict_response`` wrote (raises ValueError on a malformed message)."""
    r = _Reader(data)
    response = WorkerResponse(r.number(), r.text())
    while True:
        length = r.number()
        if length == -1:
            return response
        request_id = r.take(length).decode("utf-8", "replace")
        content_type = r.text()
        status = r.number()
        phrase = r.text()
        headers = {}
        for _ in range(r.number()):
            key = r.text()
            headers[key] = r.text()
        value = r.take(r.number())
        response.predictions.append(Prediction(request_id, content_type, status, phrase, headers, value))
