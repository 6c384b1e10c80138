"""OIP REST JSON (+ Triton's binary tensor data extension) <-> InferRequest / InferResponse.

A request body is a JSON header, optionally followed by raw tensors in the order of the JSON inputs
that carry ``parameters.binary_data_size`` (header length in ``Inference-Header-Content-Length``). A
response carries outputs as JSON ``data`` or, when asked (``binary_data`` per output, or the request
parameter ``binary_data_output``), as raw bytes after the JSON with ``binary_data_size``. Inputs and
requested outputs may instead name a registered shared-memory region (``shared_memory_region``,
``shared_memory_byte_size``, ``shared_memory_offset``): such inputs are read from it, such outputs written
into it, their response entries carrying only name, datatype and shape (:mod:`..shared_memory`).
Every malformed piece is an :class:`InvalidArgument` naming the field and what was expected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from servelab.config.settings import LimitSettings
from servelab.errors import InvalidArgument
from servelab.frontends.rest._numeric_lists import MIN_LIST_BYTES, LiftedLists, NotLifted, lift_lists
from servelab.frontends.shapes import check_shape
from servelab.frontends.shared_memory import RegionSlice, SharedMemory, slice_from_parameters
from servelab.protocol.codecs import array_from_json, array_from_raw, array_to_json, array_to_raw
from servelab.types import DataType, InferRequest, InferResponse, RequestedOutput, Tensor

__all__ = ["DecodedRequest", "decode_body", "decode_infer", "encode_infer", "parse_json_object", "split_body"]

#: dtypes orjson serialises straight from numpy (no per-element Python objects)
_ORJSON_NUMPY = frozenset(
    {
        DataType.BOOL, DataType.UINT8, DataType.UINT16, DataType.UINT32, DataType.UINT64, DataType.INT8,
        DataType.INT16, DataType.INT32, DataType.INT64, DataType.FP16, DataType.FP32, DataType.FP64,
    }
)


@dataclass(slots=True)
class DecodedRequest:
    request: InferRequest
    #: request-wide ``binary_data_output``
    binary_default: bool = False
    #: per-output ``binary_data`` settings (they override the default)
    binary_outputs: dict[str, bool] = field(default_factory=dict)
    #: outputs the client asked to have written into its shared memory, by name
    output_regions: dict[str, RegionSlice] = field(default_factory=dict)


def split_body(body: bytes | bytearray, header_length: str | None) -> tuple[bytes | bytearray | memoryview, memoryview]:
    """(JSON header, binary tail) from ``Inference-Header-Content-Length``; a lying length is a 400."""
    if header_length is None:
        return body, memoryview(b"")
    try:
        n = int(header_length)
    except ValueError:
        raise InvalidArgument(
            f"Inference-Header-Content-Length {header_length!r} is not an integer; expected the byte length "
            "of the JSON header"
        ) from None
    if n < 0 or n > len(body):
        raise InvalidArgument(
            f"Inference-Header-Content-Length is {n} but the body has only {len(body)} bytes; expected the "
            "byte length of the JSON header, at most the body length"
        )
    view = memoryview(body)
    return view[:n], view[n:]


def parse_json_object(raw: bytes | bytearray | memoryview, what: str) -> dict[str, Any]:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        hint = ""
        if isinstance(raw, memoryview) or raw[:1] not in (b"{", b"[", b" ", b"\n"):
            hint = " (binary tensors after the JSON need the Inference-Header-Content-Length header)"
        raise InvalidArgument(f"{what} is not valid JSON: {exc}{hint}") from None
    if not isinstance(value, dict):
        raise InvalidArgument(f"{what} must be a JSON object; got {type(value).__name__}")
    return value


def _parameters(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgument(f"{where}: 'parameters' must be an object; got {type(value).__name__}")
    return value


def _one_field(problem: str, where: str, detail: str) -> str:
    """Triton's text for an input without exactly one source of data (clients match on it), then ours."""
    return (
        "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
        f"'shared_memory_region' in 'parameters'. But {problem}: {where} {detail}; send one of them"
    )


@dataclass(frozen=True, slots=True)
class _Sources:
    """Where input bytes may come from besides JSON: the binary tail and the client's shared memory."""

    tail: memoryview
    limits: LimitSettings
    lifted: LiftedLists | None = None
    shared_memory: SharedMemory | None = None


def _from_region(
    item: dict[str, Any], where: str, region: RegionSlice, datatype: DataType, shape: tuple[int, ...],
    sources: _Sources,
) -> np.ndarray:
    if "data" in item:
        raise InvalidArgument(_one_field("multiple fields are set", where, "has both 'data' and shared_memory_region"))
    if sources.shared_memory is None:
        raise InvalidArgument(f"{where}: shared memory is not available on this endpoint; send 'data'")
    return sources.shared_memory.read(region, datatype, shape, str(item["name"]))


def _input_tensor(item: Any, index: int, offset: int, sources: _Sources) -> tuple[Tensor, int]:
    if not isinstance(item, dict):
        raise InvalidArgument(f"inputs[{index}] must be an object with name, shape, datatype and data")
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"inputs[{index}]: 'name' must be a non-empty string")
    where = f"input '{name}'"
    shape, count = check_shape(item.get("shape"), where, sources.limits)
    datatype_name = item.get("datatype")
    if not isinstance(datatype_name, str):
        raise InvalidArgument(f"{where}: 'datatype' must be a string such as \"FP32\"; got {datatype_name!r}")
    try:
        datatype = DataType.parse(datatype_name)
    except ValueError as exc:
        raise InvalidArgument(f"{where}: {exc}") from None
    params = _parameters(item.get("parameters"), where)
    region = slice_from_parameters(params, where)
    if region is not None:
        return Tensor(name, datatype, shape, _from_region(item, where, region, datatype, shape, sources), params), offset
    tail = sources.tail
    size = params.get("binary_data_size")
    if size is not None:
        if "data" in item:
            raise InvalidArgument(_one_field("multiple fields are set", where, "has both 'data' and binary_data_size"))
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise InvalidArgument(f"{where}: parameters.binary_data_size must be a non-negative integer")
        if offset + size > len(tail):
            raise InvalidArgument(
                f"{where}: binary_data_size {size} at offset {offset} runs past the {len(tail)} bytes of "
                "binary data after the JSON header"
            )
        raw = tail[offset : offset + size]
        if datatype is DataType.BYTES and 4 * count > size:
            raise InvalidArgument(f"{where}: BYTES {list(shape)} needs at least {4 * count} bytes; got {size}")
        array = array_from_raw(raw, datatype, shape, name)
        params = {k: v for k, v in params.items() if k != "binary_data_size"}
        return Tensor(name, datatype, shape, array, params), offset + size
    if "data" not in item:
        raise InvalidArgument(_one_field("no field is set", where, "has no 'data' and no binary_data_size"))
    data = item["data"]
    lifted = sources.lifted
    taken = lifted.take(data, datatype, shape, count, name) if lifted is not None else None
    array = taken if taken is not None else array_from_json(data, datatype, shape, name)
    return Tensor(name, datatype, shape, array, params), offset


def _requested(value: Any) -> tuple[list[RequestedOutput], dict[str, bool], dict[str, RegionSlice]]:
    if value is None:
        return [], {}, {}
    if not isinstance(value, list):
        raise InvalidArgument(f"'outputs' must be a list of {{\"name\": ...}} objects; got {type(value).__name__}")
    outputs: list[RequestedOutput] = []
    binary: dict[str, bool] = {}
    regions: dict[str, RegionSlice] = {}
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise InvalidArgument(f"outputs[{i}] must be an object with a string 'name'")
        name = item["name"]
        params = _parameters(item.get("parameters"), f"requested output '{name}'")
        region = slice_from_parameters(params, f"requested output '{name}'")
        if region is not None:
            regions[name] = region
        classes = params.get("classification", 0)
        if not isinstance(classes, int) or isinstance(classes, bool) or classes < 0:
            raise InvalidArgument(f"requested output '{name}': parameters.classification must be an integer >= 0")
        if "binary_data" in params:
            if not isinstance(params["binary_data"], bool):
                raise InvalidArgument(f"requested output '{name}': parameters.binary_data must be true or false")
            binary[name] = params["binary_data"]
        outputs.append(RequestedOutput(name, classes, params))
    return outputs, binary, regions


def decode_body(
    body: bytes | bytearray,
    header_length: str | None,
    model: str,
    version: str,
    limits: LimitSettings,
    shared_memory: SharedMemory | None = None,
) -> DecodedRequest:
    """A whole infer body (JSON header, optional binary tail) as a DecodedRequest.

    Long flat number lists of a large header are decoded chunk-wise (:mod:`._numeric_lists`), so
    that peak memory stays near the body's size; whatever that path cannot take is decoded as usual.
    """
    header_raw, tail = split_body(body, header_length)
    if len(header_raw) >= MIN_LIST_BYTES:
        lifted = lift_lists(header_raw if not isinstance(header_raw, memoryview) else bytes(header_raw))
        if lifted is not None:
            try:
                header = orjson.loads(lifted[0])
                if isinstance(header, dict):
                    return decode_infer(header, tail, model, version, limits, lifted[1], shared_memory)
            except (orjson.JSONDecodeError, NotLifted):
                pass  # the original body decodes below, and its errors name the right places
    header = parse_json_object(header_raw, "inference request")
    return decode_infer(header, tail, model, version, limits, shared_memory=shared_memory)


def decode_infer(
    header: dict[str, Any],
    tail: memoryview,
    model: str,
    version: str,
    limits: LimitSettings,
    lifted: LiftedLists | None = None,
    shared_memory: SharedMemory | None = None,
) -> DecodedRequest:
    """Decode a parsed JSON header plus its binary tail (and shared-memory inputs) into an InferRequest."""
    inputs_json = header.get("inputs")
    if not isinstance(inputs_json, list):
        raise InvalidArgument("request must have an 'inputs' list of {name, shape, datatype, data} objects")
    request_id = header.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgument(f"'id' must be a string; got {type(request_id).__name__}")
    params = _parameters(header.get("parameters"), "request")
    binary_default = params.get("binary_data_output", False)
    if not isinstance(binary_default, bool):
        raise InvalidArgument("request parameters.binary_data_output must be true or false")
    tensors: list[Tensor] = []
    offset = 0
    sources = _Sources(tail, limits, lifted, shared_memory)
    for i, item in enumerate(inputs_json):
        tensor, offset = _input_tensor(item, i, offset, sources)
        tensors.append(tensor)
    if lifted is not None:
        lifted.check_all_taken()
    if offset != len(tail):
        raise InvalidArgument(
            f"the inputs' binary_data_size values add up to {offset} bytes but {len(tail)} bytes follow the "
            "JSON header (check Inference-Header-Content-Length and each binary_data_size)"
        )
    outputs, binary, regions = _requested(header.get("outputs"))
    if regions and shared_memory is None:
        raise InvalidArgument("requested outputs name shared_memory_region, which this endpoint does not offer")
    request = InferRequest(model, tensors, version, request_id, outputs, params)
    return DecodedRequest(request, binary_default, binary, regions)


def raw_request(
    body: bytes | bytearray, metadata: dict[str, Any], model: str, version: str, limits: LimitSettings
) -> DecodedRequest:
    """Triton's raw binary request (header length 0): the body is the one input's bytes, batch 1."""
    inputs = metadata["inputs"]
    if len(inputs) != 1:
        raise InvalidArgument(
            f"Inference-Header-Content-Length 0 (raw binary request) needs a model with exactly one input; "
            f"model '{model}' has {len(inputs)}"
        )
    spec = inputs[0]
    datatype = DataType.parse(spec["datatype"])
    shape = [1 if i == 0 and d == -1 else d for i, d in enumerate(spec["shape"])]
    if datatype is DataType.BYTES:
        array = np.array([bytes(body)], dtype=object).reshape([1] * len(shape))
        shape = [1] * len(shape)
    else:
        unknown = [i for i, d in enumerate(shape) if d == -1]
        if len(unknown) > 1:
            raise InvalidArgument(f"raw binary request: input shape {spec['shape']} has more than one variable dimension")
        item = datatype.itemsize or 1
        known = math.prod(d for d in shape if d != -1) * item
        if unknown:
            if known == 0 or len(body) % known:
                raise InvalidArgument(f"raw binary request: {len(body)} bytes do not fit shape {spec['shape']}")
            shape[unknown[0]] = len(body) // known
        checked, _ = check_shape(shape, f"raw binary request for input '{spec['name']}'", limits)
        array = array_from_raw(memoryview(body), datatype, checked, spec["name"])
    tensor = Tensor(spec["name"], datatype, tuple(shape), array)
    return DecodedRequest(InferRequest(model, [tensor], version), binary_default=True)


def _json_data(array: np.ndarray, datatype: DataType) -> Any:
    if datatype in _ORJSON_NUMPY and array.dtype == datatype.numpy_dtype:
        return np.ascontiguousarray(array).reshape(-1)
    return array_to_json(array, datatype)


def encode_infer(
    response: InferResponse, decoded: DecodedRequest, shared_memory: SharedMemory | None = None
) -> tuple[bytes, int | None]:
    """(body, JSON header length or None when every output is JSON).

    Outputs asked for in shared memory are written there; their entries carry only name, datatype and
    shape, as in Triton."""
    outputs: list[dict[str, Any]] = []
    chunks: list[bytes] = []
    for t in response.outputs:
        entry: dict[str, Any] = {"name": t.name, "datatype": t.datatype.value, "shape": list(t.shape)}
        region = decoded.output_regions.get(t.name)
        if region is not None and shared_memory is not None:
            shared_memory.write(region, t.data, t.datatype, t.name)
        elif decoded.binary_outputs.get(t.name, decoded.binary_default):
            raw = array_to_raw(t.data, t.datatype)
            entry["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            entry["data"] = _json_data(t.data, t.datatype)
        outputs.append(entry)
    body: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        body["id"] = response.id
    if response.parameters:
        body["parameters"] = response.parameters
    body["outputs"] = outputs
    header = orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)
    if not chunks:
        return header, None
    return b"".join([header, *chunks]), len(header)  # one copy of the outputs, not two
