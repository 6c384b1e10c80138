"""Protocol-neutral data types: datatypes, tensors, inference requests and responses.

The bottom layer. Every front-end decodes its wire format into these, and every backend receives
numpy arrays described by them. Nothing here imports a web framework or a runtime.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import ml_dtypes
import numpy as np

__all__ = [
    "DataType",
    "InferRequest",
    "InferResponse",
    "RequestedOutput",
    "Tensor",
]


class DataType(str, Enum):
    """An Open Inference Protocol datatype, with its numpy dtype and Triton config name."""

    BOOL = "BOOL"
    UINT8 = "UINT8"
    UINT16 = "UINT16"
    UINT32 = "UINT32"
    UINT64 = "UINT64"
    INT8 = "INT8"
    INT16 = "INT16"
    INT32 = "INT32"
    INT64 = "INT64"
    FP16 = "FP16"
    FP32 = "FP32"
    FP64 = "FP64"
    BF16 = "BF16"
    BYTES = "BYTES"

    @property
    def numpy_dtype(self) -> np.dtype[Any]:
        return _TO_NUMPY[self]

    @property
    def triton_name(self) -> str:
        """The name used in config.pbtxt, e.g. ``TYPE_FP32`` (``TYPE_STRING`` for BYTES)."""
        return "TYPE_STRING" if self is DataType.BYTES else f"TYPE_{self.value}"

    @property
    def itemsize(self) -> int | None:
        """Bytes per element, or None for BYTES (variable length)."""
        return None if self is DataType.BYTES else _TO_NUMPY[self].itemsize

    @classmethod
    def from_triton(cls, name: str) -> DataType:
        try:
            return _FROM_TRITON[name]
        except KeyError:
            raise ValueError(f"unknown Triton datatype {name!r}; expected one of {sorted(_FROM_TRITON)}") from None

    @classmethod
    def from_numpy(cls, dtype: np.dtype[Any] | type) -> DataType:
        found = _FROM_NUMPY.get(dtype)  # type: ignore[arg-type]  # an array's dtype: no np.dtype() call
        if found is not None:
            return found
        dt = np.dtype(dtype)
        found = _FROM_NUMPY.get(dt)
        if found is not None:
            return found
        if dt.kind in ("O", "S", "U"):
            return DataType.BYTES
        raise ValueError(f"numpy dtype {dt} has no Open Inference Protocol datatype")

    @classmethod
    def parse(cls, name: str) -> DataType:
        """Parse a wire datatype name ("FP32"), raising ValueError naming the valid ones."""
        try:
            return cls(name)
        except ValueError:
            raise ValueError(f"unknown datatype {name!r}; expected one of {[d.value for d in cls]}") from None


_TO_NUMPY: dict[DataType, np.dtype[Any]] = {
    DataType.BOOL: np.dtype(np.bool_),
    DataType.UINT8: np.dtype(np.uint8),
    DataType.UINT16: np.dtype(np.uint16),
    DataType.UINT32: np.dtype(np.uint32),
    DataType.UINT64: np.dtype(np.uint64),
    DataType.INT8: np.dtype(np.int8),
    DataType.INT16: np.dtype(np.int16),
    DataType.INT32: np.dtype(np.int32),
    DataType.INT64: np.dtype(np.int64),
    DataType.FP16: np.dtype(np.float16),
    DataType.FP32: np.dtype(np.float32),
    DataType.FP64: np.dtype(np.float64),
    DataType.BF16: np.dtype(ml_dtypes.bfloat16),
    DataType.BYTES: np.dtype(np.object_),
}
_FROM_NUMPY: dict[np.dtype[Any], DataType] = {v: k for k, v in _TO_NUMPY.items()}
_FROM_TRITON: dict[str, DataType] = {d.triton_name: d for d in DataType}
_FROM_TRITON["TYPE_BYTES"] = DataType.BYTES


@dataclass(slots=True)
class Tensor:
    """A named tensor: numpy data plus its protocol datatype and shape."""

    name: str
    datatype: DataType
    shape: tuple[int, ...]
    data: np.ndarray
    parameters: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_numpy(cls, name: str, array: np.ndarray, datatype: DataType | None = None) -> Tensor:
        return cls(name, datatype or DataType.from_numpy(array.dtype), tuple(array.shape), array)


@dataclass(slots=True)
class RequestedOutput:
    """An output the client asked for; ``class_count`` > 0 asks for the classification extension."""

    name: str
    class_count: int = 0
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class InferRequest:
    model_name: str
    inputs: list[Tensor]
    model_version: str = ""
    id: str = ""
    outputs: list[RequestedOutput] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)

    def input_arrays(self) -> dict[str, np.ndarray]:
        return {t.name: t.data for t in self.inputs}


@dataclass(slots=True)
class InferResponse:
    model_name: str
    model_version: str
    outputs: list[Tensor]
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, np.ndarray]:
        return {t.name: t.data for t in self.outputs}
