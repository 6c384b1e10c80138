"""``ModelInferRequest`` <-> :class:`InferRequest` and :class:`InferResponse` -> ``ModelInferResponse``.

Inputs arrive either all in ``raw_input_contents`` (one entry per input, by position; what tritonclient
sends) or each in the typed ``contents`` field that matches its datatype. Raw fixed-size tensors are
zero-copy ``np.frombuffer`` views; typed contents are converted in one numpy call per tensor. FP16 and
BF16 can only travel raw. Responses always carry ``raw_output_contents``, as tritonclient expects.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servelab.config.settings import LimitSettings
from servelab.errors import InvalidArgument, Unsupported
from servelab.frontends.shapes import check_shape
from servelab.protocol import grpc_service_pb2 as pb
from servelab.protocol.codecs import array_from_raw, array_to_raw
from servelab.types import DataType, InferRequest, InferResponse, RequestedOutput, Tensor

__all__ = [
    "CONTENTS_FIELD",
    "decode_parameters",
    "decode_request",
    "encode_parameters",
    "encode_response",
    "payload_bytes",
]

#: The typed ``InferTensorContents`` field that carries each datatype (FP16 and BF16 have none).
CONTENTS_FIELD: dict[DataType, str] = {
    DataType.BOOL: "bool_contents",
    DataType.INT8: "int_contents",
    DataType.INT16: "int_contents",
    DataType.INT32: "int_contents",
    DataType.INT64: "int64_contents",
    DataType.UINT8: "uint_contents",
    DataType.UINT16: "uint_contents",
    DataType.UINT32: "uint_contents",
    DataType.UINT64: "uint64_contents",
    DataType.FP32: "fp32_contents",
    DataType.FP64: "fp64_contents",
    DataType.BYTES: "bytes_contents",
}
#: Wide numpy type each typed field is read into before the range check and narrowing.
_WIDE: dict[str, np.dtype[Any]] = {
    "int_contents": np.dtype(np.int64),
    "uint_contents": np.dtype(np.uint64),
}
_SHARED_MEMORY_KEYS = ("shared_memory_region", "shared_memory_byte_size", "shared_memory_offset")
CLASSIFICATION = "classification"
_DEFAULT_LIMITS = LimitSettings()


def decode_parameters(params: Any, where: str) -> dict[str, Any]:
    """A ``map<string, InferParameter>`` as a plain dict (bool, int, str or float values)."""
    out: dict[str, Any] = {}
    for key, p in params.items():
        choice = p.WhichOneof("parameter_choice")
        if choice is None:
            raise InvalidArgument(
                f"{where}: parameter '{key}' has no value; set one of bool_param, "
                "int64_param, uint64_param, double_param or string_param"
            )
        out[key] = getattr(p, choice)
    return out


def encode_parameters(values: dict[str, Any], target: Any) -> None:
    """Write a plain dict into a ``map<string, InferParameter>``; values of other types become strings."""
    for key, value in values.items():
        p = target[key]
        if isinstance(value, bool):
            p.bool_param = value
        elif isinstance(value, int | np.integer):
            if value > np.iinfo(np.int64).max:
                p.uint64_param = int(value)
            else:
                p.int64_param = int(value)
        elif isinstance(value, float | np.floating):
            p.double_param = float(value)
        else:
            p.string_param = value if isinstance(value, str) else str(value)


def payload_bytes(msg: pb.ModelInferRequest) -> int:
    """About how many bytes of tensor data a request carries (cheap: no field is copied)."""
    size = sum(len(r) for r in msg.raw_input_contents)
    for inp in msg.inputs:
        if inp.HasField("contents"):
            size += sum(8 * len(values) for _, values in inp.contents.ListFields())
    return size


def decode_request(msg: pb.ModelInferRequest, limits: LimitSettings = _DEFAULT_LIMITS) -> InferRequest:
    """Validate and decode a wire request; every error names the tensor and what was expected."""
    raw = msg.raw_input_contents
    if raw and len(raw) != len(msg.inputs):
        raise InvalidArgument(
            f"request has {len(msg.inputs)} inputs but {len(raw)} raw_input_contents entries; send exactly "
            "one raw entry per input, in the order of 'inputs'"
        )
    tensors: list[Tensor] = []
    for i, inp in enumerate(msg.inputs):
        datatype = _datatype(inp.datatype, f"input '{inp.name}'")
        shape, count = check_shape(tuple(inp.shape), f"input '{inp.name}'", limits)
        params = decode_parameters(inp.parameters, f"input '{inp.name}'") if inp.parameters else {}
        if params:
            _refuse_shared_memory(params, f"input '{inp.name}'")
        if raw:
            if inp.HasField("contents") and inp.contents.ListFields():
                raise InvalidArgument(
                    f"input '{inp.name}': sets typed 'contents' while the request uses raw_input_contents; "
                    "use one form for every input"
                )
            data = array_from_raw(raw[i], datatype, shape, inp.name)
        else:
            data = _from_contents(inp, datatype, shape, count)
        tensors.append(Tensor(inp.name, datatype, shape, data, params))
    return InferRequest(
        model_name=msg.model_name,
        inputs=tensors,
        model_version=msg.model_version,
        id=msg.id,
        outputs=[_requested(o) for o in msg.outputs],
        parameters=decode_parameters(msg.parameters, "request") if msg.parameters else {},
    )


def encode_response(response: InferResponse) -> pb.ModelInferResponse:
    msg = pb.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    if response.parameters:
        encode_parameters(response.parameters, msg.parameters)
    for t in response.outputs:
        out = msg.outputs.add()
        out.name = t.name
        out.datatype = t.datatype.value
        out.shape.extend(t.shape)
        if t.parameters:
            encode_parameters(t.parameters, out.parameters)
        msg.raw_output_contents.append(array_to_raw(t.data, t.datatype))
    return msg


def _datatype(name: str, where: str) -> DataType:
    try:
        return DataType.parse(name)
    except ValueError as exc:
        raise InvalidArgument(f"{where}: {exc}") from None


def _refuse_shared_memory(params: dict[str, Any], where: str) -> None:
    if any(k in params for k in _SHARED_MEMORY_KEYS):
        raise Unsupported(
            f"{where}: shared-memory tensors are not supported by this server; send the data in "
            "raw_input_contents instead"
        )


def _requested(out: pb.ModelInferRequest.InferRequestedOutputTensor) -> RequestedOutput:
    params = decode_parameters(out.parameters, f"requested output '{out.name}'")
    _refuse_shared_memory(params, f"requested output '{out.name}'")
    count = params.pop(CLASSIFICATION, 0)
    if isinstance(count, bool) or not isinstance(count, int):
        raise InvalidArgument(
            f"requested output '{out.name}': parameter 'classification' must be an integer (int64_param); "
            f"got {count!r}"
        )
    return RequestedOutput(out.name, count, params)


def _from_contents(
    inp: pb.ModelInferRequest.InferInputTensor, datatype: DataType, shape: tuple[int, ...], count: int
) -> np.ndarray:
    given = [f.name for f, _ in inp.contents.ListFields()] if inp.HasField("contents") else []
    field = CONTENTS_FIELD.get(datatype)
    if field is None:
        if count == 0 and not given:
            return np.empty(shape, dtype=datatype.numpy_dtype)
        raise InvalidArgument(
            f"input '{inp.name}': {datatype.value} data can only be sent in raw_input_contents"
        )
    wrong = [g for g in given if g != field]
    if wrong:
        raise InvalidArgument(
            f"input '{inp.name}': datatype {datatype.value} carries its data in contents.{field}; got {wrong}"
        )
    values = getattr(inp.contents, field)
    if len(values) != count:
        if not given and count:
            raise InvalidArgument(
                f"input '{inp.name}' has no data; send it in raw_input_contents or contents.{field}"
            )
        raise InvalidArgument(
            f"input '{inp.name}': shape {list(shape)} needs {count} elements; contents.{field} has {len(values)}"
        )
    if datatype is DataType.BYTES:
        array = np.empty(count, dtype=object)
        array[:] = list(values)
        return array.reshape(shape)
    wide = _WIDE.get(field)
    if wide is None:
        return np.array(values, dtype=datatype.numpy_dtype).reshape(shape)
    array = np.array(values, dtype=wide)
    target = datatype.numpy_dtype
    if array.size and target != wide:
        info = np.iinfo(target)
        low, high = array.min(), array.max()
        if low < info.min or high > info.max:
            raise InvalidArgument(
                f"input '{inp.name}': values from {low} to {high} do not fit {datatype.value} "
                f"({info.min} to {info.max})"
            )
    return array.astype(target).reshape(shape)
