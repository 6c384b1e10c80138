"""``ModelInferRequest`` <-> :class:`InferRequest` and :class:`InferResponse` -> ``ModelInferResponse``.

Inputs arrive either all in ``raw_input_contents`` (one entry per input, by position; what tritonclient
sends) or each in the typed ``contents`` field that matches its datatype, or in a registered system
shared-memory region (``shared_memory_region`` parameters; those inputs have no raw entry). Raw
fixed-size tensors are zero-copy ``np.frombuffer`` views, shared-memory ones read-only views of the
mapping; typed contents are converted in one numpy call per tensor. FP16 and BF16 can only travel raw.
Responses always carry ``raw_output_contents``, as tritonclient expects (an empty entry for an output
written into shared memory).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servelab.config.settings import LimitSettings
from servelab.errors import InvalidArgument
from servelab.frontends.shapes import check_shape
from servelab.frontends.shared_memory import RegionSlice, SharedMemory, slice_from_parameters
from servelab.protocol import grpc_service_pb2 as pb
from servelab.protocol.codecs import array_from_raw, array_to_raw
from servelab.types import DataType, InferRequest, InferResponse, RequestedOutput, Tensor

__all__ = [
    "CONTENTS_FIELD",
    "decode_infer",
    "decode_parameters",
    "decode_plain",
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
#: wire name -> (datatype, numpy dtype) for the datatypes of one fixed size per element (all but BYTES)
_FIXED_SIZE: dict[str, tuple[DataType, np.dtype[Any]]] = {
    d.value: (d, d.numpy_dtype) for d in DataType if d is not DataType.BYTES
}
CLASSIFICATION = "classification"
_DEFAULT_LIMITS = LimitSettings()
#: the datatype Triton names for data sent in each typed field
_FIELD_TYPE = {
    "bool_contents": "BOOL", "int_contents": "INT32", "int64_contents": "INT64", "uint_contents": "UINT32",
    "uint64_contents": "UINT64", "fp32_contents": "FP32", "fp64_contents": "FP64", "bytes_contents": "BYTES",
}  # fmt: skip


def decode_parameters(params: Any, where: str) -> dict[str, Any]:
    """A ``map<string, InferParameter>`` as a plain dict (bool, int, str or float values)."""
    out: dict[str, Any] = {}
    for key in params:  # keys, then indexing: half the cost of items() on upb's maps
        p = params[key]
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
    """Validate and decode a wire request that uses no shared memory (see :func:`decode_infer`)."""
    return decode_infer(msg, limits)[0]


def decode_infer(
    msg: pb.ModelInferRequest, limits: LimitSettings = _DEFAULT_LIMITS, shared_memory: SharedMemory | None = None
) -> tuple[InferRequest, dict[str, RegionSlice]]:
    """(request, requested outputs to write into shared memory by name); errors name the tensor and what
    was expected.

    ``raw_input_contents`` holds one entry per input that is neither in shared memory nor in typed
    ``contents``, in the order of ``inputs`` (what tritonclient sends); shared-memory inputs are read from
    ``shared_memory``'s regions (InvalidArgument when it is None).
    """
    plain = decode_plain(msg, limits)
    if plain is not None:
        return plain, {}
    return _decode_general(msg, limits, shared_memory)


def _decode_general(
    msg: pb.ModelInferRequest, limits: LimitSettings, shared_memory: SharedMemory | None
) -> tuple[InferRequest, dict[str, RegionSlice]]:
    """Every form a request may take (typed contents, shared memory, parameters), and every error."""
    raw = list(msg.raw_input_contents)
    params_of = [decode_parameters(i.parameters, f"input '{i.name}'") if i.parameters else {} for i in msg.inputs]
    regions = [slice_from_parameters(p, f"input '{i.name}'") for p, i in zip(params_of, msg.inputs, strict=True)]
    wants_raw = sum(1 for r in regions if r is None)
    if raw and len(raw) != wants_raw:
        outside = [i.name for i, r in zip(msg.inputs, regions, strict=True) if r is None]
        head = f"{_no_data(outside[len(raw)], msg.model_name)}: " if len(raw) < wants_raw else ""
        raise InvalidArgument(
            f"{head}the request has {wants_raw} inputs outside shared memory but "
            f"{len(raw)} raw_input_contents entries; send exactly one raw entry per such input, in the order of "
            "'inputs'"
        )
    tensors: list[Tensor] = []
    next_raw = iter(raw)
    for inp, params, region in zip(msg.inputs, params_of, regions, strict=True):
        datatype = _datatype(inp.datatype, f"input '{inp.name}'")
        shape, count = check_shape(tuple(inp.shape), f"input '{inp.name}'", limits)
        has_contents = inp.HasField("contents") and bool(inp.contents.ListFields())
        if region is not None:
            if has_contents:
                raise InvalidArgument(f"input '{inp.name}': sets both shared_memory_region and typed 'contents'")
            data = _shared(shared_memory, f"input '{inp.name}'").read(region, datatype, shape, inp.name)
        elif raw:
            if has_contents:
                raise InvalidArgument(
                    f"contents field must not be specified when using raw_input_contents for '{inp.name}' for "
                    f"model '{msg.model_name}': input '{inp.name}' sets typed 'contents' while the request uses "
                    "raw_input_contents; use one form for every input"
                )
            data = _from_raw(next(next_raw), datatype, shape, count, inp.name, msg.model_name)
        else:
            data = _from_contents(inp, datatype, shape, count, msg.model_name)
        tensors.append(Tensor(inp.name, datatype, shape, data, params))
    requested = [_requested(o) for o in msg.outputs]
    out_regions = {o.name: r for o, r in requested if r is not None}
    if out_regions:
        _shared(shared_memory, f"requested output '{next(iter(out_regions))}'")
    request = InferRequest(
        model_name=msg.model_name,
        inputs=tensors,
        model_version=msg.model_version,
        id=msg.id,
        outputs=[o for o, _ in requested],
        parameters=decode_parameters(msg.parameters, "request") if msg.parameters else {},
    )
    return request, out_regions


def decode_plain(msg: pb.ModelInferRequest, limits: LimitSettings) -> InferRequest | None:
    """What tritonclient sends nearly always, decoded with the least work, or None for the general decoder:
    every input raw, fixed-size and of the right byte size, one raw entry each; no parameters on inputs or
    outputs. Request-level parameters are taken as they are: perf_analyzer sets
    ``triton_enable_empty_final_response`` on every call, unary ones included.

    It accepts only requests the general decoder accepts, with the same result; anything else, an error
    included, is left to it (so errors read the same either way). It is a third of the general decoder's
    cost on a small request (16 -> 7 us for Triton's add_sub).
    """
    # upb's repeated fields are read as slices: a slice is one C call, iterating one is a call per element
    inputs, raw = msg.inputs[:], msg.raw_input_contents[:]
    if len(raw) != len(inputs):
        return None
    params: dict[str, Any] = {}
    if msg.parameters:
        try:
            params = decode_parameters(msg.parameters, "request")
        except InvalidArgument:
            return None  # the general decoder says so, after the checks it makes first
    tensors: list[Tensor] = []
    max_rank, max_elements = limits.max_tensor_rank, limits.max_tensor_elements
    for inp, data in zip(inputs, raw, strict=False):  # lengths compared above; strict costs a check per item
        fixed = _FIXED_SIZE.get(inp.datatype)
        if fixed is None or inp.parameters or inp.HasField("contents"):
            return None
        datatype, dtype = fixed
        shape = tuple(inp.shape[:])  # int64s from the wire: only the limits can refuse them
        if len(shape) == 1:
            count = shape[0]
            if count <= 0 or count > max_elements or len(data) != count * dtype.itemsize:
                return None
            array = np.frombuffer(data, dtype)  # already of this shape
        else:
            count = 1
            for d in shape:
                count *= d
            if len(shape) > max_rank or min(shape, default=1) <= 0 or count > max_elements:
                return None  # zero-size, negative or too large: check_shape's rules and texts, in the general decoder
            if len(data) != count * dtype.itemsize:
                return None
            array = np.frombuffer(data, dtype).reshape(shape)
        tensors.append(Tensor(inp.name, datatype, shape, array, {}))
    outputs: list[RequestedOutput] = []
    for out in msg.outputs[:]:
        if out.parameters:
            return None
        outputs.append(RequestedOutput(out.name, 0, {}))
    return InferRequest(msg.model_name, tensors, msg.model_version, msg.id, outputs, params)


def encode_response(
    response: InferResponse,
    regions: dict[str, RegionSlice] | None = None,
    shared_memory: SharedMemory | None = None,
) -> pb.ModelInferResponse:
    """The wire response; outputs named in ``regions`` are written into ``shared_memory`` and keep an empty
    ``raw_output_contents`` entry, so that the entries still line up with ``outputs`` (as in Triton)."""
    msg = pb.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    if response.parameters:
        encode_parameters(response.parameters, msg.parameters)
    raw = msg.raw_output_contents
    for t in response.outputs:
        out = msg.outputs.add(name=t.name, datatype=t.datatype.value, shape=t.shape)
        if t.parameters:
            encode_parameters(t.parameters, out.parameters)
        region = regions.get(t.name) if regions else None
        if region is not None and shared_memory is not None:
            shared_memory.write(region, t.data, t.datatype, t.name)
            raw.append(b"")
        else:
            raw.append(array_to_raw(t.data, t.datatype))
    return msg


def _no_data(name: str, model: str) -> str:
    return f"unable to find data for input tensor '{name}' for model '{model}' in request"


def _from_raw(raw: bytes, datatype: DataType, shape: tuple[int, ...], count: int, name: str, model: str) -> np.ndarray:
    size = datatype.itemsize
    if size is not None and len(raw) != count * size:
        raise InvalidArgument(
            f"input byte size mismatch for input '{name}' for model '{model}'. Expected {count * size}, got "
            f"{len(raw)}: tensor '{name}': {datatype.value} {list(shape)} needs {count * size} bytes of data"
        )
    return array_from_raw(raw, datatype, shape, name)


def _shared(shared_memory: SharedMemory | None, where: str) -> SharedMemory:
    if shared_memory is None:
        raise InvalidArgument(f"{where}: shared memory is not offered on this endpoint; send the data in the request")
    return shared_memory


def _datatype(name: str, where: str) -> DataType:
    try:
        return DataType.parse(name)
    except ValueError as exc:
        raise InvalidArgument(f"{where}: {exc}") from None


def _requested(out: pb.ModelInferRequest.InferRequestedOutputTensor) -> tuple[RequestedOutput, RegionSlice | None]:
    params = decode_parameters(out.parameters, f"requested output '{out.name}'")
    region = slice_from_parameters(params, f"requested output '{out.name}'")
    count = params.pop(CLASSIFICATION, 0)
    if isinstance(count, bool) or not isinstance(count, int):
        raise InvalidArgument(
            f"requested output '{out.name}': parameter 'classification' must be an integer (int64_param); "
            f"got {count!r}"
        )
    return RequestedOutput(out.name, count, params), region


def _from_contents(
    inp: pb.ModelInferRequest.InferInputTensor, datatype: DataType, shape: tuple[int, ...], count: int, model: str
) -> np.ndarray:
    """Typed contents as an array; errors start with Triton's texts (which clients and tests match on)."""
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
            f"unexpected explicit tensor data for input tensor '{inp.name}' for model '{model}' of type "
            f"'{_FIELD_TYPE.get(wrong[0], wrong[0])}', expected datatype '{datatype.value}': datatype "
            f"{datatype.value} carries its data in contents.{field}; got {wrong}"
        )
    values = getattr(inp.contents, field)
    if len(values) != count:
        if not given and count:
            raise InvalidArgument(
                f"{_no_data(inp.name, model)}: input '{inp.name}' has no data; send it in raw_input_contents or "
                f"contents.{field}"
            )
        size = datatype.itemsize
        mismatch = (
            f"input byte size mismatch for input '{inp.name}' for model '{model}'. Expected {count * size}, got "
            f"{len(values) * size}: " if size else ""
        )
        raise InvalidArgument(
            f"{mismatch}input '{inp.name}': shape {list(shape)} needs {count} elements; contents.{field} has "
            f"{len(values)}"
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
