"""Classification extension: top-k per batch item, per row of a non-batched 2-D output, or of a 1-D tensor."""

from __future__ import annotations

import numpy as np
import pytest

from servelab.core.classification import classify
from servelab.errors import InvalidArgument


def test_batched_rows_with_labels() -> None:
    scores = np.array([[0.1, 0.9, 0.5], [0.7, 0.2, 0.3]], np.float32)
    out = classify(scores, 2, True, ["a", "b", "c"], "y")
    assert out.shape == (2, 2)
    assert [s.decode() for s in out[0]] == ["0.900000:1:b", "0.500000:2:c"]
    assert out[1][0].decode().startswith("0.700000:0:a")


def test_unbatched_2d_output_is_ranked_per_row() -> None:
    logits = np.array([[1.0, 3.0, 2.0], [5.0, 4.0, 6.0]], np.float32)
    out = classify(logits, 1, False, [], "logits")
    assert [s.decode() for s in out.reshape(-1)] == ["3.000000:1", "6.000000:2"]


def test_unbatched_1d_and_count_larger_than_classes() -> None:
    out = classify(np.array([2, 7, 1], np.int32), 5, False, [], "y")
    assert out.shape == (3,)
    assert out[0].decode() == "7.000000:1"


def test_non_numeric_output_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="classification needs a numeric output"):
        classify(np.array([b"a"], dtype=object), 1, False, [], "y")
