"""A TorchServe request and response as servelab tensors: the interface of every ``torchserve_handler`` model.

TorchServe hands a handler a list of requests, each a set of named *parameters* (the body, or the parts
of a multipart form, or the entries of a gRPC ``input`` map) with their content types, plus the request
headers; the handler answers each with bytes (or text, or JSON) and may set a status, a content type
and headers per request. servelab carries that through its one data path as BYTES tensors, so the
batcher, the worker processes, statistics and every front door treat these models like any other:

inputs (per row: one TorchServe request)
    ``body`` BYTES ``[-1]``: the parameter values, in order.
    ``request`` BYTES ``[1]``, optional: JSON ``{"names": [...], "content_types": [...], "headers": {...}}``.
    Without it each value is named ``body`` (then ``body1``, ...) with no content type: the handler
    sees raw bytes, as for a TorchServe gRPC call.
outputs (per row)
    ``response`` BYTES ``[-1]``: the answer's parts; one, or several for a handler that streams
    (``send_intermediate_predict_response``).
    ``response_meta`` BYTES ``[1]``: JSON ``{"status", "phrase", "content_type", "headers", "error"}``;
    ``error`` is non-empty when the handler failed as a whole (TorchServe's "Prediction failed" 503).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from servelab.errors import InvalidArgument

__all__ = [
    "BODY",
    "REQUEST",
    "RESPONSE",
    "RESPONSE_META",
    "STREAM_HEADER",
    "TsRequest",
    "TsResponse",
]

BODY = "body"
REQUEST = "request"
RESPONSE = "response"
RESPONSE_META = "response_meta"
#: the response header TorchServe's streaming handlers set on every part ("true" until the last)
STREAM_HEADER = "ts_stream_next"


def _object_array(values: list[bytes]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


@dataclass
class TsRequest:
    """One TorchServe request: ``(name, content type, value)`` parameters and the request headers."""

    parameters: list[tuple[str, str, bytes]]
    headers: dict[str, str] = field(default_factory=dict)

    def to_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """``(body, request)`` as one batch row each: shapes ``[1, n]`` and ``[1, 1]``."""
        meta = {
            "names": [p[0] for p in self.parameters],
            "content_types": [p[1] for p in self.parameters],
            "headers": self.headers,
        }
        body = _object_array([p[2] for p in self.parameters]).reshape(1, -1)
        return body, _object_array([orjson.dumps(meta)]).reshape(1, 1)

    @classmethod
    def from_row(cls, body: np.ndarray, request: np.ndarray | None) -> TsRequest:
        """The request of one row (``body`` of shape ``[n]``, ``request`` of shape ``[1]`` or None)."""
        values = [bytes(v) for v in body.reshape(-1)]
        if request is None:
            names = [BODY if i == 0 else f"{BODY}{i}" for i in range(len(values))]
            return cls([(n, "", v) for n, v in zip(names, values, strict=True)])
        meta = _json_object(bytes(request.reshape(-1)[0]), REQUEST)
        names = _strings(meta.get("names", []), "names")
        types = _strings(meta.get("content_types", [""] * len(names)), "content_types")
        headers = meta.get("headers", {})
        if len(names) != len(values) or len(types) != len(values):
            raise InvalidArgument(
                f"input '{REQUEST}': 'names' ({len(names)}) and 'content_types' ({len(types)}) must list one "
                f"entry per element of input '{BODY}' ({len(values)})"
            )
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            raise InvalidArgument(f"input '{REQUEST}': 'headers' must be an object of strings")
        return cls(list(zip(names, types, values, strict=True)), dict(headers))


@dataclass
class TsResponse:
    """The handler's answer to one request, as TorchServe's frontend would send it."""

    parts: list[bytes]
    status: int = 200
    phrase: str = ""
    content_type: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    #: TorchServe's message when the whole batch failed (the frontend then sends its error JSON)
    error: str = ""

    @property
    def streamed(self) -> bool:
        return STREAM_HEADER in self.headers

    @property
    def body(self) -> bytes:
        return b"".join(self.parts)

    def to_outputs(self) -> dict[str, np.ndarray]:
        """The two output tensors of one row, shapes ``[1, k]`` and ``[1, 1]``."""
        meta = {"status": self.status, "phrase": self.phrase, "content_type": self.content_type,
                "headers": self.headers, "error": self.error}  # fmt: skip
        return {
            RESPONSE: _object_array(self.parts).reshape(1, -1),
            RESPONSE_META: _object_array([orjson.dumps(meta)]).reshape(1, 1),
        }

    @classmethod
    def from_outputs(cls, response: np.ndarray, meta: np.ndarray) -> TsResponse:
        """The answer in one row's outputs (any shape holding the row's elements)."""
        data = _json_object(bytes(meta.reshape(-1)[0]), RESPONSE_META)
        return cls(
            [bytes(p) for p in response.reshape(-1)],
            int(data.get("status", 200)),
            str(data.get("phrase") or ""),
            str(data.get("content_type") or ""),
            {str(k): str(v) for k, v in (data.get("headers") or {}).items()},
            str(data.get("error") or ""),
        )


def _json_object(raw: bytes, name: str) -> dict[str, Any]:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgument(f"input '{name}' must hold one JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidArgument(f"input '{name}' must hold one JSON object, got {type(value).__name__}")
    return value


def _strings(value: object, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidArgument(f"input '{REQUEST}': '{key}' must be a list of strings")
    return value
