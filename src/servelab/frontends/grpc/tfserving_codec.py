"""TensorFlow's TensorProto <-> numpy, without TensorFlow, as TF Serving's gRPC API carries tensors.

Decoding takes ``tensor_content`` (row-major little-endian bytes, what ``tf.make_tensor_proto``
writes for numeric arrays; a zero-copy ``np.frombuffer`` view) or the typed value fields
(``float_val``, ``int_val``, ``string_val`` ...), where TensorFlow's rules hold: fewer values than
elements repeat the last one, none means zeros. Encoding writes the typed fields, as TF Serving's
responses do by default (clients read ``outputs["y"].float_val`` directly).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from servelab.errors import InvalidArgument
from servelab.protocol import tfserving as tfs
from servelab.types import DataType

__all__ = ["from_numpy", "to_numpy"]

_T = tfs.types_pb2
#: DT_* -> (numpy dtype, typed value field)
_CODEC: dict[int, tuple[np.dtype[Any], str]] = {
    _T.DT_FLOAT: (np.dtype(np.float32), "float_val"),
    _T.DT_DOUBLE: (np.dtype(np.float64), "double_val"),
    _T.DT_INT32: (np.dtype(np.int32), "int_val"),
    _T.DT_INT16: (np.dtype(np.int16), "int_val"),
    _T.DT_INT8: (np.dtype(np.int8), "int_val"),
    _T.DT_UINT8: (np.dtype(np.uint8), "int_val"),
    _T.DT_UINT16: (np.dtype(np.uint16), "int_val"),
    _T.DT_INT64: (np.dtype(np.int64), "int64_val"),
    _T.DT_UINT32: (np.dtype(np.uint32), "uint32_val"),
    _T.DT_UINT64: (np.dtype(np.uint64), "uint64_val"),
    _T.DT_BOOL: (np.dtype(np.bool_), "bool_val"),
    _T.DT_HALF: (DataType.FP16.numpy_dtype, "half_val"),
    _T.DT_BFLOAT16: (DataType.BF16.numpy_dtype, "half_val"),
    _T.DT_STRING: (np.dtype(object), "string_val"),
}
_BY_NUMPY: dict[np.dtype[Any], int] = {dt: code for code, (dt, _) in _CODEC.items() if code != _T.DT_UINT16}
_BY_NUMPY[np.dtype(np.uint16)] = _T.DT_UINT16
_HALVES = (_T.DT_HALF, _T.DT_BFLOAT16)


def _dtype_name(code: int) -> str:
    return _T.DataType.Name(code) if code in _T.DataType.values() else str(code)


def to_numpy(proto: tfs.tensor_pb2.TensorProto, name: str, max_elements: int) -> np.ndarray:
    """The array of ``proto``; ``max_elements`` bounds what a short message may ask to allocate."""
    if proto.dtype not in _CODEC:
        raise InvalidArgument(f"input {name!r}: dtype {_dtype_name(proto.dtype)} is not supported; expected one of "
                              f"{sorted(_dtype_name(c) for c in _CODEC)}")
    dtype, field = _CODEC[proto.dtype]
    if proto.tensor_shape.unknown_rank:
        raise InvalidArgument(f"input {name!r}: tensor_shape has unknown_rank; send its dims")
    shape = tuple(int(d.size) for d in proto.tensor_shape.dim)
    if any(d < 0 for d in shape):
        raise InvalidArgument(f"input {name!r}: tensor_shape {list(shape)} has a negative dimension")
    count = math.prod(shape)
    if count > max_elements:
        raise InvalidArgument(f"input {name!r}: shape {list(shape)} has {count} elements; the limit is {max_elements}")
    if proto.tensor_content:
        return _from_content(proto, name, dtype, shape, count)
    values = getattr(proto, field)
    if proto.dtype == _T.DT_STRING:
        flat = np.empty(len(values), dtype=object)
        flat[:] = list(values)
    elif proto.dtype in _HALVES:
        flat = np.array(values, dtype=np.int32).astype(np.uint16).view(dtype)
    else:
        flat = np.array(values, dtype=dtype)
    return _filled(flat, count, name).reshape(shape)


def _from_content(
    proto: tfs.tensor_pb2.TensorProto, name: str, dtype: np.dtype[Any], shape: tuple[int, ...], count: int
) -> np.ndarray:
    if proto.dtype == _T.DT_STRING:
        raise InvalidArgument(f"input {name!r}: DT_STRING tensors carry their values in string_val, not tensor_content")
    content = proto.tensor_content
    if len(content) != count * dtype.itemsize:
        raise InvalidArgument(f"input {name!r}: tensor_content has {len(content)} bytes; shape {list(shape)} of "
                              f"{_dtype_name(proto.dtype)} needs {count * dtype.itemsize}")
    return np.frombuffer(content, dtype=dtype.newbyteorder("<")).reshape(shape)


def _filled(flat: np.ndarray, count: int, name: str) -> np.ndarray:
    """TensorFlow's rule for typed fields: the last value repeats, no values mean zeros."""
    if len(flat) == count:
        return flat
    if len(flat) > count:
        raise InvalidArgument(f"input {name!r}: {len(flat)} values for a shape of {count} elements")
    if len(flat) == 0:
        return np.zeros(count, dtype=flat.dtype) if flat.dtype != object else np.full(count, b"", dtype=object)
    return np.concatenate([flat, np.full(count - len(flat), flat[-1], dtype=flat.dtype)])


def from_numpy(array: np.ndarray, proto: tfs.tensor_pb2.TensorProto) -> None:
    """Write ``array`` into ``proto`` (dtype, shape, typed values)."""
    code = _BY_NUMPY.get(array.dtype)
    if code is None:
        if array.dtype.kind not in ("S", "U"):
            raise InvalidArgument(f"an output has numpy dtype {array.dtype}, which TF Serving cannot carry")
        code = _T.DT_STRING
    proto.dtype = code  # type: ignore[assignment]
    for d in array.shape:
        proto.tensor_shape.dim.add(size=int(d))
    field = getattr(proto, _CODEC[code][1])
    flat = array.reshape(-1)
    if code == _T.DT_STRING:
        field.extend(v if isinstance(v, bytes) else str(v).encode() for v in flat)
    elif code in _HALVES:
        field.extend(np.ascontiguousarray(flat).view(np.uint16).astype(np.int32).tolist())
    else:
        field.extend(flat.tolist())
