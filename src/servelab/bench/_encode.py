"""Encode request tensors into wire bodies once, before the load starts."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from servelab.bench.inputs import Request
from servelab.types import DataType

__all__ = ["datatype_of", "oip_binary_body", "oip_json_body", "raw_bytes", "tensor_bytes", "tfserving_body"]


def datatype_of(array: np.ndarray) -> str:
    return DataType.from_numpy(array.dtype).value


def tensor_bytes(array: np.ndarray) -> bytes:
    """The binary-extension bytes of a tensor (BYTES: 4-byte little-endian length before each element)."""
    if array.dtype.kind in ("O", "S", "U"):
        parts: list[bytes] = []
        for item in array.ravel():
            b = item.encode() if isinstance(item, str) else bytes(item)
            parts.append(len(b).to_bytes(4, "little") + b)
        return b"".join(parts)
    return np.ascontiguousarray(array).tobytes()


def _json_data(array: np.ndarray) -> list[Any]:
    if array.dtype.kind in ("O", "S", "U"):
        return [x.decode() if isinstance(x, bytes) else str(x) for x in array.ravel()]
    return array.ravel().tolist()


def oip_binary_body(request: Request) -> tuple[bytes, int]:
    """(body, JSON header length) for OIP HTTP with the binary tensor data extension."""
    raws = [tensor_bytes(a) for a in request.values()]
    header = {
        "inputs": [
            {
                "name": n,
                "shape": list(a.shape),
                "datatype": datatype_of(a),
                "parameters": {"binary_data_size": len(r)},
            }
            for (n, a), r in zip(request.items(), raws, strict=True)
        ],
        "parameters": {"binary_data_output": True},
    }
    head = orjson.dumps(header)
    return head + b"".join(raws), len(head)


def oip_json_body(request: Request) -> bytes:
    return orjson.dumps(
        {
            "inputs": [
                {"name": n, "shape": list(a.shape), "datatype": datatype_of(a), "data": _json_data(a)}
                for n, a in request.items()
            ]
        }
    )


def tfserving_body(request: Request) -> bytes:
    """TF Serving's columnar REST format: ``{"inputs": {name: nested list}}``."""
    return orjson.dumps(
        {"inputs": {n: a.tolist() if a.dtype.kind != "O" else _json_data(a) for n, a in request.items()}}
    )


def raw_bytes(request: Request) -> bytes | None:
    """The raw body for a single BYTES tensor holding one element (a file sample), else None."""
    if len(request) != 1:
        return None
    (array,) = request.values()
    if array.dtype.kind == "O" and array.size == 1:
        item = array.ravel()[0]
        return item.encode() if isinstance(item, str) else bytes(item)
    return None
