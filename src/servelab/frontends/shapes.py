"""The wire shape of a request tensor, checked before any array is made: every front-end's decoder.

A shape is refused (InvalidArgument, so 400 / INVALID_ARGUMENT) when a dimension is not a non-negative
integer, when it has more dimensions than ``max_rank``, or when the product of its non-zero dimensions
passes ``max_elements``. The last rule also covers zero-size shapes such as ``[0, 2**62]``: their
element count is 0, yet numpy refuses to build them ("array is too big"), so they must not get that far.
"""

from __future__ import annotations

from typing import Any

from servelab.config.settings import LimitSettings
from servelab.errors import InvalidArgument

__all__ = ["check_shape"]


def check_shape(shape: Any, where: str, limits: LimitSettings) -> tuple[tuple[int, ...], int]:
    """(shape as a tuple, element count) of a wire shape, or InvalidArgument naming ``where`` and the rule."""
    if not isinstance(shape, list | tuple):
        raise InvalidArgument(f"{where}: 'shape' must be a list of non-negative integers; got {_short(shape)}")
    if len(shape) > limits.max_tensor_rank:
        raise InvalidArgument(
            f"{where}: shape has {len(shape)} dimensions; the limit is {limits.max_tensor_rank} "
            "(settings limits.max_tensor_rank, flag --max-tensor-rank)"
        )
    nonzero = 1
    empty = False
    for d in shape:
        if not isinstance(d, int) or isinstance(d, bool) or d < 0:
            raise InvalidArgument(f"{where}: 'shape' must be a list of non-negative integers; got {_short(shape)}")
        if d == 0:
            empty = True
        else:
            nonzero *= d
    if nonzero > limits.max_tensor_elements:
        size = f"non-zero dimensions whose product is {nonzero}" if empty else f"{nonzero} elements"
        raise InvalidArgument(
            f"{where}: shape {_short(shape)} has {size}; the limit is {limits.max_tensor_elements} elements "
            "(settings limits.max_tensor_elements)"
        )
    return tuple(shape), 0 if empty else nonzero


def _short(value: Any) -> str:
    text = repr(list(value)) if isinstance(value, tuple) else repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
