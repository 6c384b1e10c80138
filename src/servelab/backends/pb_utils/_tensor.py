"""``pb_utils.Tensor`` and Triton's datatype helpers (numpy <-> ``TYPE_*`` names and TRITONSERVER codes).

A Tensor is a name and a numpy array, nothing else: on servelab every tensor lies in CPU memory (inputs
are numpy views into the server's shared memory, outputs are the model's arrays). DLPack goes through
numpy's own ``from_dlpack`` / ``__dlpack__``, so a CPU torch tensor crosses without a copy and a tensor
on another device is refused by numpy with its reason.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from servelab.backends.pb_utils._errors import TritonModelException

__all__ = [
    "TRITON_STRING_TO_NUMPY",
    "Tensor",
    "deserialize_bytes_tensor",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
]

#: config.pbtxt ``data_type`` names -> numpy types (TYPE_STRING is Triton's BYTES)
TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

#: TRITONSERVER_DataType codes (tritonserver.h) in order: 1 BOOL ... 13 BYTES
_CODES: tuple[Any, ...] = (
    None, np.bool_, np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int16, np.int32, np.int64,
    np.float16, np.float32, np.float64, np.object_,
)  # fmt: skip
_BYTES_CODE = 13


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """The numpy type of a config ``data_type`` name (``"TYPE_FP32"`` -> ``np.float32``)."""
    try:
        return TRITON_STRING_TO_NUMPY[triton_type_string]
    except KeyError:
        raise KeyError(
            f"unknown Triton data_type {triton_type_string!r}; expected one of {sorted(TRITON_STRING_TO_NUMPY)}"
        ) from None


def triton_to_numpy_type(data_type: int) -> Any:
    """The numpy type of a TRITONSERVER_DataType code (None for codes numpy has no type for)."""
    return _CODES[data_type] if 0 < data_type < len(_CODES) else None


def numpy_to_triton_type(data_type: Any) -> int | None:
    """The TRITONSERVER_DataType code of a numpy type (object and bytes_ are BYTES, 13)."""
    dtype = np.dtype(data_type)
    if dtype.kind in "OSU":
        return _BYTES_CODE
    for code, known in enumerate(_CODES):
        if known is not None and known is not np.object_ and dtype == np.dtype(known):
            return code
    return None


def serialize_byte_tensor(input_tensor: np.ndarray) -> bytes | None:
    """BYTES elements in Triton's layout: each a 4-byte little-endian length, then its bytes, in C order."""
    if input_tensor.size == 0:
        return b""
    if input_tensor.dtype.kind not in "OS":
        return None
    parts: list[bytes] = []
    for item in input_tensor.reshape(-1):
        raw = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(raw)))
        parts.append(raw)
    return b"".join(parts)


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray:
    """The 1-D object array of the elements of a Triton-layout BYTES buffer."""
    items: list[bytes] = []
    view = memoryview(encoded_tensor)
    offset = 0
    while offset < len(view):
        (n,) = struct.unpack_from("<I", view, offset)
        offset += 4
        items.append(bytes(view[offset : offset + n]))
        offset += n
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out


def _as_tensor_array(value: Any, name: str) -> np.ndarray:
    """The numpy array a Tensor holds: BYTES as an object array of bytes (str elements UTF-8 encoded)."""
    array = value if isinstance(value, np.ndarray) else np.asarray(value)
    kind = array.dtype.kind
    if kind in "biuf":  # nearly always: as it is
        return array
    if kind == "U":
        flat = np.empty(array.size, dtype=np.object_)
        flat[:] = [s.encode("utf-8") for s in array.reshape(-1)]
        return flat.reshape(array.shape)
    if kind == "S":
        return array.astype(np.object_)
    if kind != "O" and array.dtype.name != "bfloat16":
        raise TritonModelException(f"tensor '{name}': numpy dtype {array.dtype} has no Triton datatype")
    return array


class _Capsule:
    """Gives a bare DLPack capsule (``torch.utils.dlpack.to_dlpack``) the protocol ``np.from_dlpack`` reads;
    numpy checks the device written in the capsule itself."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU; a capsule of another device is refused when numpy opens it


class Tensor:
    """A named tensor (Triton's ``pb_utils.Tensor(name, numpy_array)``)."""

    __slots__ = ("_array", "_name")

    def __init__(self, name: str, array: Any) -> None:
        if not isinstance(name, str):
            raise TritonModelException(f"a Tensor's name must be a str, got {type(name).__name__}")
        self._name = name
        self._array = _as_tensor_array(array, name)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        """The data as a numpy array (inputs: a view valid while the request runs; copy it to keep it)."""
        return self._array

    def shape(self) -> list[int]:
        return [int(d) for d in self._array.shape]

    def triton_dtype(self) -> int:
        """The TRITONSERVER_DataType code (e.g. 11 for FP32, 13 for BYTES)."""
        if self._array.dtype.name == "bfloat16":
            return 14
        code = numpy_to_triton_type(self._array.dtype)
        if code is None:
            raise TritonModelException(f"tensor '{self._name}': dtype {self._array.dtype} has no Triton datatype")
        return code

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        """A DLPack capsule of the data, without a copy (BYTES tensors have no DLPack form)."""
        if self._array.dtype == np.object_:
            raise TritonModelException(f"tensor '{self._name}' holds BYTES, which DLPack cannot carry")
        return np.ascontiguousarray(self._array).__dlpack__()

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return np.ascontiguousarray(self._array).__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)

    @staticmethod
    def from_dlpack(name: str, dlpack: Any) -> Tensor:
        """A Tensor from a DLPack capsule or any object with ``__dlpack__`` (a CPU torch tensor ...)."""
        source = dlpack if hasattr(dlpack, "__dlpack__") else _Capsule(dlpack)
        try:
            array = np.from_dlpack(source)
        except (BufferError, RuntimeError, TypeError, ValueError) as exc:
            raise TritonModelException(
                f"tensor '{name}': cannot read this DLPack tensor ({exc}); servelab's python backend holds "
                "tensors in CPU memory, so move it to the CPU first"
            ) from exc
        return Tensor(name, array)

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={self.shape()}, dtype={self._array.dtype})"
