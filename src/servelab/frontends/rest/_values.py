"""JSON values of the compatibility APIs (TF Serving, TorchServe) -> Tensors: shape from nesting, b64."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from servelab.errors import InvalidArgument
from servelab.protocol.codecs import array_from_json
from servelab.types import DataType, Tensor

__all__ = ["shape_of", "tensor_from_value", "unb64"]


def unb64(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) != {"b64"} or not isinstance(value["b64"], str):
            raise InvalidArgument(f"a binary value must be {{\"b64\": \"<base64>\"}}; got {value!r:.80}")
        try:
            return base64.b64decode(value["b64"], validate=True)
        except binascii.Error as exc:
            raise InvalidArgument(f"invalid base64 in {{\"b64\": ...}}: {exc}") from None
    if isinstance(value, list):
        return [unb64(v) for v in value]
    return value


def shape_of(value: Any) -> tuple[int, ...]:
    shape: list[int] = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return tuple(shape)


def tensor_from_value(name: str, datatype: DataType, value: Any) -> Tensor:
    if datatype is DataType.BYTES:
        value = unb64(value)
    shape = shape_of(value)
    return Tensor(name, datatype, shape, array_from_json(value, datatype, shape, name))
