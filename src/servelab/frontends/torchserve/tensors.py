"""TorchServe predictions for a model that is not a TorchServe archive: its body mapped to the model's tensors.

How a request body maps to the model's inputs (the model's config is the handler here):

- JSON object whose keys are the model's input names: each value is that input's tensor as nested
  lists (strings for BYTES, ``{"b64": ...}`` for binary).
- JSON array (or any other JSON value) for a single-input model: the value is that input's tensor.
- Anything else that is not JSON, for a single-input BYTES model: the raw body is one element.
- A tensor whose rank equals the model's per-example rank (batched models) is one example: a batch
  dimension of 1 is added, and removed again from the outputs.

The answer is the output's value for a single-output model, else ``{output_name: value}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from servelab.config.settings import LimitSettings
from servelab.errors import InvalidArgument
from servelab.frontends.rest._values import shape_of, tensor_from_value, unb64
from servelab.types import DataType, InferResponse, Tensor

__all__ = ["decode_body", "encode_outputs"]


def _parse(body: bytes | bytearray, content_type: str) -> tuple[bool, Any]:
    """(is JSON, value)."""
    try:
        return True, orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if "json" in content_type:
            raise InvalidArgument(f"the body is declared as JSON but does not parse: {exc}") from None
        return False, body


def _inputs(parsed: Any, is_json: bool, inputs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    names = [m["name"] for m in inputs]
    if is_json and isinstance(parsed, dict) and set(parsed) == set(names) and "b64" not in parsed:
        return parsed
    if len(names) != 1:
        raise InvalidArgument(
            f"model '{name}' has inputs {names}: send a JSON object with one key per input"
        )
    if not is_json and inputs[0]["datatype"] != DataType.BYTES.value:
        raise InvalidArgument(
            f"model '{name}' takes {inputs[0]['datatype']} input '{names[0]}': send it as a JSON array; "
            "raw bytes are only for BYTES inputs"
        )
    return {names[0]: parsed}


def decode_body(
    body: bytes | bytearray, content_type: str, meta: dict[str, Any], name: str, limits: LimitSettings
) -> tuple[list[Tensor], bool]:
    """(input tensors, whether a batch dimension was added) of a predictions body."""
    is_json, parsed = _parse(body, content_type)
    batched = bool(meta["inputs"]) and meta["inputs"][0]["shape"][:1] == [-1]
    values = _inputs(parsed, is_json, meta["inputs"], name)
    by_name = {m["name"]: m for m in meta["inputs"]}
    tensors: list[Tensor] = []
    added = False
    for input_name, value in values.items():
        tensor, was_added = _one_tensor(by_name[input_name], value, batched, limits)
        tensors.append(tensor)
        added = added or was_added
    return tensors, added


def _one_tensor(meta: dict[str, Any], value: Any, batched: bool, limits: LimitSettings) -> tuple[Tensor, bool]:
    datatype = DataType(meta["datatype"])
    per_example = len(meta["shape"]) - (1 if batched else 0)
    if isinstance(value, bytes | bytearray):
        value = [bytes(value)]
        if batched:
            value = [value] if per_example == 1 else value
        added = batched
    else:
        if datatype is DataType.BYTES:
            value = unb64(value, limits.max_tensor_rank)
        added = batched and len(shape_of(value)) == per_example
        if added:
            value = [value]
    return tensor_from_value(meta["name"], datatype, value, limits), added


def encode_outputs(response: InferResponse, added: bool) -> Any:
    """The JSON value of the answer: the one output's value, else ``{name: value}``."""
    outputs: dict[str, Any] = {}
    for t in response.outputs:
        data = t.data[0] if added and t.data.ndim else t.data
        if t.datatype is DataType.BYTES:
            text = [b.decode("utf-8", "replace") for b in data.reshape(-1)]
            outputs[t.name] = np.array(text, dtype=object).reshape(data.shape).tolist()
        else:
            outputs[t.name] = data.astype("float32") if t.datatype in (DataType.FP16, DataType.BF16) else data
    return next(iter(outputs.values())) if len(outputs) == 1 else outputs
