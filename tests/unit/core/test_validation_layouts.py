"""Signature.check_tensors remembers layouts that passed untouched: a remembered layout passes again, and
every other request still gets the full check (errors, conversions, reshapes) with the same result."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format

from servelab.core.validation import _PASSED_MAX, Signature
from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2 as mc
from servelab.types import DataType, Tensor

_CONFIG = """
name: "m" max_batch_size: 8
input [ { name: "A" data_type: TYPE_FP32 dims: [ -1 ] },
        { name: "B" data_type: TYPE_FP32 dims: [ 2 ] reshape: { shape: [ 1, 2 ] } } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


def _signature(text: str = _CONFIG) -> Signature:
    return Signature(text_format.Parse(text, mc.ModelConfig()))


def _t(name: str, array: np.ndarray, datatype: DataType = DataType.FP32) -> Tensor:
    return Tensor(name, datatype, tuple(array.shape), array)


def test_a_layout_that_passed_untouched_is_remembered_and_passes_again_with_the_new_arrays() -> None:
    sig = _signature("""
        name: "m" max_batch_size: 8
        input [ { name: "A" data_type: TYPE_FP32 dims: [ -1 ] } ] output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
        """)
    first = np.ones((2, 3), np.float32)
    assert sig.check_tensors([_t("A", first)])["A"] is first
    assert len(sig._passed) == 1
    second = np.zeros((2, 3), np.float32)
    assert sig.check_tensors([_t("A", second)])["A"] is second  # this request's data, not the first's
    assert len(sig._passed) == 1


def test_reshaped_inputs_are_not_remembered_and_are_reshaped_every_time() -> None:
    sig = _signature()
    for _ in range(2):
        got = sig.check_tensors([_t("A", np.ones((1, 3), np.float32)), _t("B", np.ones((1, 2), np.float32))])
        assert got["B"].shape == (1, 1, 2)
    assert not sig._passed


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        ([_t("A", np.ones((1, 3), np.float32))], "missing input"),
        ([_t("A", np.ones((1, 3), np.float32)), _t("B", np.ones((2, 2), np.float32))], "batch size"),
        ([_t("A", np.ones((1, 3), np.int32), DataType.INT32), _t("B", np.ones((1, 2), np.float32))], "datatype"),
        ([_t("A", np.ones((9, 3), np.float32)), _t("B", np.ones((9, 2), np.float32))], "max_batch_size"),
    ],
)
def test_bad_requests_fail_the_same_after_good_ones_were_remembered(tensors: list[Tensor], message: str) -> None:
    sig = _signature("""
        name: "m" max_batch_size: 8
        input [ { name: "A" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 2 ] } ]
        output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
        """)
    sig.check_tensors([_t("A", np.ones((1, 3), np.float32)), _t("B", np.ones((1, 2), np.float32))])
    assert len(sig._passed) == 1
    for _ in range(2):
        with pytest.raises(InvalidArgument, match=message):
            sig.check_tensors(tensors)
    assert len(sig._passed) == 1


def test_at_most_passed_max_layouts_are_kept_and_list_shapes_are_checked_in_full() -> None:
    sig = _signature("""
        name: "m" max_batch_size: 0
        input [ { name: "A" data_type: TYPE_FP32 dims: [ -1 ] } ] output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
        """)
    for n in range(1, _PASSED_MAX + 10):
        sig.check_tensors([_t("A", np.ones(n, np.float32))])
    assert len(sig._passed) == _PASSED_MAX
    listed = Tensor("A", DataType.FP32, [3], np.ones(3, np.float32))  # type: ignore[arg-type]
    assert sig.check_tensors([listed])["A"].shape == (3,)
    with pytest.raises(InvalidArgument, match="shape"):
        sig.check_tensors([Tensor("A", DataType.FP32, [3, 1], np.ones((3, 1), np.float32))])  # type: ignore[arg-type]
