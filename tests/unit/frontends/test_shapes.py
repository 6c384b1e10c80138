"""Wire shapes are checked before numpy sees them: rank, element-count overflow, zero-size giants."""

from __future__ import annotations

import numpy as np
import pytest

from servelab.config.settings import LimitSettings
from servelab.errors import InvalidArgument
from servelab.frontends.shapes import check_shape

LIMITS = LimitSettings(max_tensor_elements=1000, max_tensor_rank=4)


@pytest.mark.parametrize(
    ("shape", "count"), [([], 1), ([3], 3), ([0], 0), ((2, 5, 10, 10), 1000), ([0, 1000], 0)]
)
def test_shapes_within_limits(shape: list[int], count: int) -> None:
    assert check_shape(shape, "input 'x'", LIMITS) == (tuple(shape), count)


@pytest.mark.parametrize(
    ("shape", "words"),
    [
        ([2**40, 2**40], "1208925819614629174706176 elements; the limit is 1000"),
        ([1001], "1001 elements"),
        ([0, 2**62], "non-zero dimensions whose product is 4611686018427387904"),
        ([1, 1, 1, 1, 1], "5 dimensions; the limit is 4"),
        ([-1], "non-negative integers"),
        ([True], "non-negative integers"),
        ([1.5], "non-negative integers"),
        ("12", "must be a list"),
        (None, "must be a list"),
    ],
)
def test_bad_shapes_are_invalid_argument(shape: object, words: str) -> None:
    with pytest.raises(InvalidArgument, match="input 'x'") as info:
        check_shape(shape, "input 'x'", LIMITS)
    assert words in info.value.message


def test_zero_size_giant_is_refused_because_numpy_cannot_build_it() -> None:
    """The regression behind the rule: [0, 2**62] has no elements, yet numpy refuses the shape."""
    with pytest.raises(ValueError, match="too big"):
        np.frombuffer(b"", np.float32).reshape((0, 2**62))
    with pytest.raises(InvalidArgument):
        check_shape((0, 2**62), "input 'x'", LimitSettings())


def test_default_rank_limit_is_below_numpy_ceiling() -> None:
    limits = LimitSettings()
    check_shape([1] * limits.max_tensor_rank, "x", limits)
    np.empty([1] * limits.max_tensor_rank)  # numpy takes every shape the limit lets through
    with pytest.raises(InvalidArgument):
        check_shape([1] * (limits.max_tensor_rank + 1), "x", limits)
