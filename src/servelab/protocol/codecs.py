"""Tensor codecs shared by the front-ends: raw bytes and JSON data <-> numpy, without per-element work.

Raw layout is the one of Triton's binary tensor data extension and of gRPC ``raw_input_contents``:
fixed-size types little-endian, row-major; BYTES as a 4-byte little-endian length before each element.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from servelab.errors import InvalidArgument
from servelab.types import DataType

__all__ = ["array_from_json", "array_from_raw", "array_to_json", "array_to_raw", "element_count"]

_LEN = struct.Struct("<I")


def element_count(shape: list[int] | tuple[int, ...], name: str) -> int:
    for d in shape:
        if not isinstance(d, int) or isinstance(d, bool) or d < 0:
            raise InvalidArgument(f"tensor '{name}': shape {list(shape)} must hold non-negative integers")
    return math.prod(shape)


def array_from_raw(raw: bytes | memoryview, datatype: DataType, shape: tuple[int, ...], name: str) -> np.ndarray:
    """Decode a raw buffer; fixed-size types are zero-copy views. Size mismatches name the tensor."""
    count = element_count(shape, name)
    if datatype is DataType.BYTES:
        return _bytes_from_raw(raw, shape, count, name)
    dtype = datatype.numpy_dtype
    expected = count * dtype.itemsize
    if len(raw) != expected:
        raise InvalidArgument(
            f"tensor '{name}': {datatype.value} {list(shape)} needs {expected} bytes of data; got {len(raw)}"
        )
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def _bytes_from_raw(raw: bytes | memoryview, shape: tuple[int, ...], count: int, name: str) -> np.ndarray:
    view = memoryview(raw)
    if count * 4 > len(view):  # every element needs its 4-byte length: refuse before allocating
        raise InvalidArgument(
            f"tensor '{name}': BYTES {list(shape)} needs at least {count * 4} bytes of data; got {len(view)}"
        )
    out = np.empty(count, dtype=object)
    pos, end = 0, len(view)
    for i in range(count):
        if pos + 4 > end:
            raise InvalidArgument(f"tensor '{name}': BYTES data ends after {i} of {count} elements")
        (n,) = _LEN.unpack_from(view, pos)
        pos += 4
        if pos + n > end:
            raise InvalidArgument(f"tensor '{name}': BYTES element {i} claims {n} bytes but only {end - pos} remain")
        out[i] = bytes(view[pos : pos + n])
        pos += n
    if pos != end:
        raise InvalidArgument(f"tensor '{name}': {end - pos} bytes left over after {count} BYTES elements")
    return out.reshape(shape)


def array_to_raw(array: np.ndarray, datatype: DataType) -> bytes:
    if datatype is DataType.BYTES:
        parts: list[bytes] = []
        for item in array.reshape(-1):
            b = item if isinstance(item, bytes) else str(item).encode() if not isinstance(item, bytearray) else bytes(item)
            parts.append(_LEN.pack(len(b)))
            parts.append(b)
        return b"".join(parts)
    dtype = datatype.numpy_dtype
    # tobytes is C order whatever the layout: only another dtype needs a conversion first
    return array.tobytes() if array.dtype == dtype else np.ascontiguousarray(array, dtype=dtype).tobytes()


def array_from_json(data: Any, datatype: DataType, shape: tuple[int, ...], name: str) -> np.ndarray:
    """JSON ``data`` (flat or nested, row-major) to numpy in one call; element counts are checked."""
    count = element_count(shape, name)
    try:
        if datatype is DataType.BYTES:
            # REST front-end fix: only str/bytes elements. bytes(n) of an int would allocate n zero bytes
            # (a one-line JSON body could make the server allocate gigabytes).
            items = _flatten(data)
            bad = next((s for s in items if not isinstance(s, str | bytes)), None)
            if bad is not None:
                raise InvalidArgument(f"tensor '{name}': BYTES data must be strings; got {type(bad).__name__} {bad!r:.40}")
            flat = np.empty(len(items), dtype=object)
            flat[:] = [s.encode() if isinstance(s, str) else s for s in items]
        elif datatype is DataType.BF16 or datatype is DataType.FP16:
            flat = np.asarray(data, dtype=np.float32).astype(datatype.numpy_dtype).reshape(-1)
        elif datatype is DataType.BOOL:
            arr = np.asarray(data)
            if arr.size and arr.dtype != np.bool_:
                raise InvalidArgument(f"tensor '{name}': BOOL data must be true/false values")
            flat = arr.astype(np.bool_).reshape(-1)
        else:
            flat = np.asarray(data, dtype=datatype.numpy_dtype).reshape(-1)
    except InvalidArgument:
        raise
    except (ValueError, TypeError, OverflowError) as exc:
        raise InvalidArgument(f"tensor '{name}': data does not fit datatype {datatype.value}: {exc}") from None
    if flat.size != count:
        raise InvalidArgument(
            f"tensor '{name}': shape {list(shape)} needs {count} elements; data has {flat.size}"
        )
    return flat.reshape(shape)


def _flatten(data: Any) -> list[Any]:
    if not isinstance(data, list):
        return [data]
    out: list[Any] = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            out.append(item)
        else:
            stack.pop()
    return out


def array_to_json(array: np.ndarray, datatype: DataType) -> list[Any]:
    """Flat row-major list for a JSON response (BYTES as UTF-8 text where it decodes)."""
    if datatype is DataType.BYTES:
        return [b.decode("utf-8", errors="replace") if isinstance(b, bytes) else str(b) for b in array.reshape(-1)]
    if datatype in (DataType.BF16, DataType.FP16):
        return array.astype(np.float32).reshape(-1).tolist()
    return array.reshape(-1).tolist()
