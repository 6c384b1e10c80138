"""JSON values of the compatibility APIs (TF Serving, TorchServe) -> Tensors: shape from nesting, b64.

Shapes come from the nesting of the lists, so they are checked (rank, element count) like any wire
shape before numpy sees them, and ``{"b64": ...}`` values are unwrapped no deeper than the rank limit
(a body nested a thousand levels deep is a 400, not a RecursionError).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from servelab.config.settings import LimitSettings
from servelab.errors import InvalidArgument
from servelab.frontends.shapes import check_shape
from servelab.protocol.codecs import array_from_json
from servelab.types import DataType, Tensor

__all__ = ["shape_of", "tensor_from_value", "unb64"]


def unb64(value: Any, max_depth: int = 64) -> Any:
    """``value`` with every ``{"b64": "..."}`` replaced by its bytes; lists nest at most ``max_depth`` deep."""
    return _unb64(value, 0, max_depth)


def _unb64(value: Any, depth: int, max_depth: int) -> Any:
    if isinstance(value, dict):
        if set(value) != {"b64"} or not isinstance(value["b64"], str):
            raise InvalidArgument(f"a binary value must be {{\"b64\": \"<base64>\"}}; got {value!r:.80}")
        try:
            return base64.b64decode(value["b64"], validate=True)
        except binascii.Error as exc:
            raise InvalidArgument(f"invalid base64 in {{\"b64\": ...}}: {exc}") from None
    if isinstance(value, list):
        if depth >= max_depth:
            raise InvalidArgument(f"lists nest more than {max_depth} levels deep (settings limits.max_tensor_rank)")
        return [_unb64(v, depth + 1, max_depth) for v in value]
    return value


def shape_of(value: Any) -> tuple[int, ...]:
    shape: list[int] = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return tuple(shape)


def tensor_from_value(name: str, datatype: DataType, value: Any, limits: LimitSettings) -> Tensor:
    if datatype is DataType.BYTES:
        value = unb64(value, limits.max_tensor_rank)
    shape, _ = check_shape(shape_of(value), f"input '{name}'", limits)
    return Tensor(name, datatype, shape, array_from_json(value, datatype, shape, name))
