"""Fuzzing the OIP REST request decoder (JSON tensors and the binary-data extension), no sockets.

Whatever the bytes, ``decode_body`` and ``raw_request`` either decode or raise a ServelabError: never
another exception (which the server would answer 500), and within a bounded time. Seeds are fixed
(``derandomize``), so a failure reproduces.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.fuzz import FUZZ, decodes_or_refuses
from harness.fuzz import FUZZ_LIMITS as LIMITS
from servelab.errors import ServelabError
from servelab.frontends.rest._oip_codec import decode_body, raw_request
from servelab.types import DataType

DATATYPES = [d.value for d in DataType] + ["FP8", "", "fp32", "TYPE_FP32"]
scalars = st.one_of(
    st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.booleans(), st.none(),
    st.text(max_size=6), st.just({"b64": "AAAA"}),
)
dims = st.one_of(st.integers(0, 6), st.integers(-3, 2**64), st.just(2**40), st.floats(0, 4), st.booleans(), st.text(max_size=2))
shapes = st.one_of(st.lists(dims, max_size=8), st.just([0, 2**62]), st.just([2**40, 2**40]), scalars)
data_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=6), max_leaves=40)
parameters = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(["binary_data_size", "binary_data", "classification", "x"]),
                    st.one_of(st.integers(-4, 64), st.booleans(), st.text(max_size=3)), max_size=2),
    scalars,
)


@st.composite
def inputs(draw: st.DrawFn) -> Any:
    item: dict[str, Any] = {}
    for key, strategy in (
        ("name", st.one_of(st.sampled_from(["INPUT0", "INPUT1", ""]), scalars)),
        ("shape", shapes),
        ("datatype", st.one_of(st.sampled_from(DATATYPES), scalars)),
        ("data", data_values),
        ("parameters", parameters),
    ):
        if draw(st.integers(0, 9)):  # each field is sometimes missing
            item[key] = draw(strategy)
    return item if draw(st.integers(0, 19)) else draw(scalars)


element_values = st.one_of(
    st.integers(-300, 300), st.integers(-(2**64), 2**64), st.floats(-1e40, 1e40), st.booleans(),
    st.text(max_size=3), st.none(),
)


@st.composite
def near_valid_inputs(draw: st.DrawFn, tail: list[bytes]) -> Any:
    """Well-formed but for a detail: a count off by one, a value of the wrong kind, a binary size."""
    datatype = draw(st.sampled_from([d.value for d in DataType]))
    shape = draw(st.lists(st.integers(0, 4), max_size=3))
    count = math.prod(shape) + draw(st.sampled_from([0, 0, 0, 1, -1]))
    item: dict[str, Any] = {"name": draw(st.sampled_from(["INPUT0", "INPUT1"])), "shape": shape, "datatype": datatype}
    if draw(st.booleans()):
        raw = draw(st.binary(min_size=max(0, count) * 4, max_size=max(0, count) * 8 + 2))
        tail.append(raw)
        item["parameters"] = {"binary_data_size": len(raw) + draw(st.sampled_from([0, 0, 1, -1]))}
    else:
        kind = draw(element_values)
        flat = [kind] * max(0, count)
        nested = shape and len(shape) > 1 and count == math.prod(shape) and draw(st.booleans())
        item["data"] = np.array(flat, dtype=object).reshape(shape).tolist() if nested else flat
    return item


@st.composite
def headers(draw: st.DrawFn) -> Any:
    header: dict[str, Any] = {"inputs": draw(st.one_of(st.lists(inputs(), max_size=3), scalars))}
    if draw(st.booleans()):
        header["outputs"] = draw(st.one_of(
            st.lists(st.fixed_dictionaries({"name": st.sampled_from(["OUTPUT0", "OUTPUT0"])}, optional={"parameters": parameters}), max_size=3),
            scalars,
        ))
    if draw(st.booleans()):
        header["parameters"] = draw(parameters)
    if draw(st.booleans()):
        header["id"] = draw(scalars)
    return header


@FUZZ
@given(data=st.data(), n=st.integers(1, 3), length_kind=st.sampled_from(["exact", "exact", "off"]))
def test_near_valid_requests_decode_or_refuse(data: st.DataObject, n: int, length_kind: str) -> None:
    tail: list[bytes] = []
    items = [data.draw(near_valid_inputs(tail)) for _ in range(n)]
    head = json.dumps({"inputs": items}).encode()
    length = str(len(head) + (1 if length_kind == "off" else 0))
    decodes_or_refuses(decode_body, head + b"".join(tail), length if tail else None, "m", "", LIMITS)


@FUZZ
@given(header=headers(), tail=st.binary(max_size=64), length_kind=st.sampled_from(["exact", "none", "junk", "off"]))
def test_structured_requests_decode_or_refuse(header: Any, tail: bytes, length_kind: str) -> None:
    head = json.dumps(header).encode()  # stdlib: integers past 64 bits too
    length = {"exact": str(len(head)), "none": None, "junk": "12x", "off": str(len(head) + len(tail) + 1)}[length_kind]
    decodes_or_refuses(decode_body, head + tail, length, "m", "", LIMITS)


@FUZZ
@given(body=st.binary(max_size=256), length=st.one_of(st.none(), st.integers(-5, 300).map(str), st.text(max_size=4)))
def test_arbitrary_bytes_decode_or_refuse(body: bytes, length: str | None) -> None:
    decodes_or_refuses(decode_body, body, length, "m", "", LIMITS)


@FUZZ
@given(
    body=st.binary(max_size=64),
    datatype=st.sampled_from([d.value for d in DataType]),
    shape=st.lists(st.sampled_from([-1, 0, 1, 2, 3, 2**40]), max_size=4),
)
def test_raw_binary_requests_decode_or_refuse(body: bytes, datatype: str, shape: list[int]) -> None:
    metadata = {"inputs": [{"name": "IN", "datatype": datatype, "shape": shape}]}
    decodes_or_refuses(raw_request, body, metadata, "m", "", LIMITS)


def test_binary_data_size_past_the_body_is_refused() -> None:
    header = orjson.dumps({"inputs": [{"name": "X", "shape": [4], "datatype": "FP32",
                                       "parameters": {"binary_data_size": 16}}]})
    with pytest.raises(ServelabError, match="runs past the 8 bytes"):
        decode_body(header + b"\0" * 8, str(len(header)), "m", "", LIMITS)


@pytest.mark.parametrize("shape", [[2**40, 2**40], [0, 2**62], [1] * 7, [-1, 2]])
def test_hostile_shapes_are_invalid_argument_in_both_encodings(shape: list[int]) -> None:
    for item in ({"data": []}, {"parameters": {"binary_data_size": 0}}):
        header = orjson.dumps({"inputs": [{"name": "X", "shape": shape, "datatype": "FP32", **item}]})
        with pytest.raises(ServelabError, match="input 'X'"):
            decode_body(header, str(len(header)), "m", "", LIMITS)


def test_fuzz_inputs_reach_success_too() -> None:
    """The generators are not all noise: a well-formed request decodes."""
    header = {"inputs": [{"name": "X", "shape": [2, 2], "datatype": "INT32", "data": [[1, 2], [3, 4]]}]}
    decoded = decode_body(orjson.dumps(header), None, "m", "", LIMITS)
    assert decoded.request.inputs[0].data.tolist() == [[1, 2], [3, 4]]
    assert math.prod(decoded.request.inputs[0].shape) == 4
    assert decoded.request.inputs[0].data.dtype == np.int32
