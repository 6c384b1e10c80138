"""Request validation against a model's config: names, datatypes, shapes, batch size, element counts.

A :class:`Signature` is computed once per loaded model from its config, so checking a request is a few
dict lookups and tuple compares. Every error names the tensor, what was expected and what came.

``reshape`` (Triton's ModelTensorReshape): an input arrives in its ``dims`` and reaches the backend in its
``reshape`` shape; an output leaves the backend in its ``reshape`` shape and reaches the client in its
``dims`` (:meth:`Signature.client_outputs`). The batch dimension, when the model batches, stays in front.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2 as mc
from servelab.types import DataType, Tensor

__all__ = ["Signature", "TensorSpec"]

#: numpy dtype -> DataType for the common case, without DataType.from_numpy's fallbacks
_DTYPES: dict[np.dtype, DataType] = {d.numpy_dtype: d for d in DataType if d is not DataType.BYTES}
_DTYPES[np.dtype(object)] = DataType.BYTES
#: input layouts a Signature remembers as passed (check_tensors)
_PASSED_MAX = 256


def _size(shape: tuple[int, ...], model: str, name: str) -> int:
    """Element count of a wire shape; a negative dimension is an error naming the tensor."""
    size = 1
    for d in shape:
        if d < 0:
            raise InvalidArgument(f"model '{model}': input '{name}' has a negative dimension in shape {list(shape)}")
        size *= d
    return size


@dataclass(frozen=True, slots=True)
class TensorSpec:
    name: str
    datatype: DataType
    dims: tuple[int, ...]
    #: shape handed to the backend instead of ``dims`` (config ``reshape``), or None
    reshape: tuple[int, ...] | None = None
    optional: bool = False

    def describe(self, batched: bool) -> str:
        dims = ("-1 (batch), " if batched else "") + ", ".join(str(d) for d in self.dims)
        return f"{self.datatype.value} [{dims}]"


def _spec(t: mc.ModelInput | mc.ModelOutput) -> TensorSpec:
    reshape = tuple(t.reshape.shape) if t.HasField("reshape") else None
    optional = bool(getattr(t, "optional", False))
    return TensorSpec(t.name, DataType.from_triton(mc.DataType.Name(t.data_type)), tuple(t.dims), reshape, optional)


class Signature:
    """The validated view of a model's inputs and outputs."""

    def __init__(self, config: mc.ModelConfig, max_tensor_elements: int = 64 * 1024 * 1024) -> None:
        self.model = config.name
        self.max_batch_size = config.max_batch_size
        self.batched = config.max_batch_size > 0
        self.inputs = {t.name: _spec(t) for t in config.input}
        self.outputs = {t.name: _spec(t) for t in config.output}
        self.required = frozenset(n for n, s in self.inputs.items() if not s.optional)
        self.max_elements = max_tensor_elements
        self._reshaped = tuple(s for s in self.outputs.values() if s.reshape is not None)
        #: input layouts that passed :meth:`check_tensors` untouched (see there)
        self._passed: set[tuple[tuple[Any, ...], ...]] = set()

    def check_arrays(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Validate numpy inputs (the in-process path); returns them, reshaped where the config says."""
        self._check_names(arrays.keys())
        out = arrays
        batch = -1
        for name, array in arrays.items():
            spec = self.inputs[name]
            datatype = _DTYPES.get(array.dtype)
            if datatype is None:
                try:
                    datatype = DataType.from_numpy(array.dtype)
                except ValueError:
                    raise InvalidArgument(
                        f"model '{self.model}': input '{name}' has numpy dtype {array.dtype}; expected "
                        f"{spec.datatype.value} ({spec.datatype.numpy_dtype})"
                    ) from None
            batch = self._check(spec, datatype, array.shape, batch, array.size)
            if spec.reshape is not None:
                if out is arrays:
                    out = dict(arrays)
                out[name] = self._reshape(spec, array, array.shape)
        return out

    def check_tensors(self, tensors: list[Tensor]) -> dict[str, np.ndarray]:
        """Validate decoded wire tensors; returns name -> array for the backend.

        A layout (names, datatypes, shapes, array dtypes and shapes, in order) that passed before with every
        array going to the backend as it came passes again at the cost of one set lookup: clients send the
        same few layouts over and over. At most ``_PASSED_MAX`` are kept per signature."""
        layout = tuple([(t.name, t.datatype, t.shape, t.data.dtype, t.data.shape) for t in tensors])
        try:
            if layout in self._passed:
                return {t.name: t.data for t in tensors}
        except TypeError:  # a shape given as a list: checked in full, not kept
            return self._check_tensors(tensors)
        arrays = self._check_tensors(tensors)
        if len(self._passed) < _PASSED_MAX and all(arrays[t.name] is t.data for t in tensors):
            self._passed.add(layout)
        return arrays

    def _check_tensors(self, tensors: list[Tensor]) -> dict[str, np.ndarray]:
        arrays: dict[str, np.ndarray] = {}
        for t in tensors:
            if t.name in arrays:
                raise InvalidArgument(f"model '{self.model}': input '{t.name}' appears twice in the request")
            arrays[t.name] = t.data
        self._check_names(arrays.keys())
        batch = -1
        for t in tensors:
            spec = self.inputs[t.name]
            batch = self._check(spec, t.datatype, t.shape, batch, _size(t.shape, self.model, spec.name))
            data = t.data
            if data.dtype != spec.datatype.numpy_dtype and spec.datatype is not DataType.BYTES:
                data = data.astype(spec.datatype.numpy_dtype)
            if tuple(data.shape) != tuple(t.shape) or spec.reshape is not None:
                data = self._reshape(spec, data, t.shape)
            arrays[t.name] = data
        return arrays

    def client_outputs(self, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The backend's outputs with every ``reshape`` output in its config ``dims`` (views, no copy)."""
        if not self._reshaped:
            return outputs
        out = dict(outputs)
        for spec in self._reshaped:
            array = out.get(spec.name)
            if array is not None:
                out[spec.name] = self._client_shape(spec, array)
        return out

    def _client_shape(self, spec: TensorSpec, array: np.ndarray) -> np.ndarray:
        lead = array.shape[:1] if self.batched else ()
        dims = list(spec.dims)
        wild = [i for i, d in enumerate(dims) if d < 0]
        if len(wild) > 1:  # variable dims take the backend's variable sizes, in order
            assert spec.reshape is not None
            given = array.shape[len(lead):]
            sizes = [given[i] for i, d in enumerate(spec.reshape) if d < 0 and i < len(given)]
            for i, size in zip(wild, sizes, strict=False):
                dims[i] = size
        try:
            return array.reshape(lead + tuple(dims))
        except ValueError:
            raise InvalidArgument(
                f"model '{self.model}': output '{spec.name}' has shape {list(array.shape)}, which does not reshape "
                f"to its config dims {list(spec.dims)} (config reshape {list(spec.reshape or ())})"
            ) from None

    def check_outputs(self, names: list[str]) -> None:
        for name in names:
            if name not in self.outputs:
                raise InvalidArgument(
                    f"model '{self.model}': unknown requested output '{name}'; expected one of {sorted(self.outputs)}"
                )

    def _check_names(self, names: object) -> None:
        given = set(names)  # type: ignore[call-overload]
        if given == self.required:
            return
        unknown = given - self.inputs.keys()
        if unknown:
            raise InvalidArgument(
                f"model '{self.model}': unknown input {sorted(unknown)}; expected inputs {sorted(self.inputs)}"
            )
        missing = self.required - given
        if missing:
            raise InvalidArgument(
                f"model '{self.model}': missing input {sorted(missing)}; expected inputs {sorted(self.inputs)}"
            )

    def _check(self, spec: TensorSpec, datatype: DataType, shape: tuple[int, ...], batch: int, size: int) -> int:
        if datatype is not spec.datatype:
            raise InvalidArgument(
                f"model '{self.model}': input '{spec.name}' has datatype {datatype.value}; expected "
                f"{spec.datatype.value}"
            )
        dims = shape
        if self.batched:
            if not shape:
                raise InvalidArgument(
                    f"model '{self.model}': input '{spec.name}' has shape []; expected {spec.describe(True)} "
                    "(the first dimension is the batch)"
                )
            rows = shape[0]
            if rows < 1 or rows > self.max_batch_size:
                raise InvalidArgument(
                    f"model '{self.model}': input '{spec.name}' has batch size {rows}; expected 1 to "
                    f"{self.max_batch_size} (max_batch_size)"
                )
            if batch != -1 and batch != rows:
                raise InvalidArgument(
                    f"model '{self.model}': input '{spec.name}' has batch size {rows} but another input has {batch}"
                )
            batch = rows
            dims = shape[1:]
        expected = spec.dims
        if len(dims) != len(expected):
            self._shape_error(spec, shape)
        for e, d in zip(expected, dims):  # noqa: B905 - lengths checked above
            if e != d and e != -1:
                self._shape_error(spec, shape)
        if size > self.max_elements:
            raise InvalidArgument(
                f"model '{self.model}': input '{spec.name}' has {size} elements; the limit is {self.max_elements}"
            )
        return batch

    def _shape_error(self, spec: TensorSpec, shape: tuple[int, ...]) -> None:
        raise InvalidArgument(
            f"model '{self.model}': input '{spec.name}' has shape {list(shape)}; expected {spec.describe(self.batched)}"
        )

    def _reshape(self, spec: TensorSpec, data: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """``data`` in the shape the backend gets; InvalidArgument when the config ``reshape`` cannot take it."""
        try:
            return data.reshape(self._backend_shape(spec, shape))
        except ValueError:
            raise InvalidArgument(
                f"model '{self.model}': input '{spec.name}' has shape {list(shape)}, which does not reshape to the "
                f"model's shape {list(spec.reshape or ())} (config reshape)"
            ) from None

    def _backend_shape(self, spec: TensorSpec, shape: tuple[int, ...]) -> tuple[int, ...]:
        if spec.reshape is None:
            return tuple(shape)
        return ((shape[0],) if self.batched else ()) + spec.reshape
