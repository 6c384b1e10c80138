"""Large JSON bodies: long number lists decode chunk-wise with the result the plain path gives, and
peak memory stays near the body's size (tracemalloc on a 16 MB body)."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.config.settings import LimitSettings
from servelab.errors import InvalidArgument
from servelab.frontends.rest import _numeric_lists, _oip_codec
from servelab.frontends.rest._oip_codec import decode_body, decode_infer, parse_json_object
from servelab.types import DataType

LIMITS = LimitSettings()
NUMERIC = [d for d in DataType if d not in (DataType.BYTES, DataType.BOOL)]


def plain(body: bytes) -> Any:
    """The reference: orjson on the whole body, then the ordinary decoder."""
    return decode_infer(parse_json_object(body, "r"), memoryview(b""), "m", "", LIMITS)


def outcome(fn: Any, body: bytes) -> Any:
    try:
        decoded = fn(body)
    except InvalidArgument:
        return "refused"
    return [(t.name, t.datatype, t.shape, t.data.dtype, t.data.tolist()) for t in decoded.request.inputs]


@pytest.fixture
def tiny_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lift every list and cut it into chunks of a few bytes, so that small examples cross chunk edges."""
    monkeypatch.setattr(_numeric_lists, "MIN_LIST_BYTES", 1)
    monkeypatch.setattr(_oip_codec, "MIN_LIST_BYTES", 1)
    monkeypatch.setattr(_numeric_lists, "_CHUNK_BYTES", 5)


number_texts = st.one_of(
    st.integers(-(2**70), 2**70).map(str), st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["0", "-0", "1e3", "1E-2", "2.5e+1", "01", "+1", ".5", "1.", "1e", "--1", "1.2.3", "", " ", "e"]),
)
separators = st.sampled_from([",", ", ", " ,", ",\n", ",,", ""])


@st.composite
def list_texts(draw: st.DrawFn) -> tuple[str, int]:
    numbers = draw(st.lists(number_texts, max_size=12))
    text = numbers[0] if numbers else ""
    for n in numbers[1:]:
        text += draw(separators) + n
    return "[" + draw(st.sampled_from(["", " "])) + text + draw(st.sampled_from(["", " ", ","])) + "]", len(numbers)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(lists=st.lists(list_texts(), min_size=1, max_size=2), datatype=st.sampled_from(NUMERIC), extra=st.integers(-1, 1))
def test_lifted_lists_decode_as_the_plain_path_does(
    tiny_chunks: None, lists: list[tuple[str, int]], datatype: DataType, extra: int
) -> None:
    items = [
        f'{{"name": "IN{i}", "datatype": "{datatype.value}", "shape": [{max(0, n + extra)}], "data": {text}}}'
        for i, (text, n) in enumerate(lists)
    ]
    body = ('{"inputs": [' + ", ".join(items) + "]}").encode()
    assert outcome(lambda b: decode_body(b, None, "m", "", LIMITS), body) == outcome(plain, body)


@pytest.mark.parametrize(
    "body",
    [
        # nested lists, BOOL and BYTES data keep to the plain path
        {"inputs": [{"name": "X", "datatype": "FP32", "shape": [2, 2], "data": [[1, 2], [3, 4]]}]},
        {"inputs": [{"name": "X", "datatype": "BOOL", "shape": [2], "data": [1, 0]}]},
        {"inputs": [{"name": "X", "datatype": "BYTES", "shape": [2], "data": [1, 2]}]},
        # a list under a key that merely ends in "data", and a "data" request parameter
        {"inputs": [{"name": "X", "datatype": "INT32", "shape": [2], "data": [1, 2]}], 'x"data': [5, 6]},
        {"inputs": [{"name": "X", "datatype": "INT32", "shape": [2], "data": [1, 2]}], "parameters": {"data": [7]}},
        # a forged marker-looking object stays an (invalid) value
        {"inputs": [{"name": "X", "datatype": "INT32", "shape": [1], "data": {"$servelab-list-00": 0}}]},
        {"inputs": [{"name": "X", "datatype": "INT8", "shape": [2], "data": [1, 300]}]},
        {"inputs": [{"name": "X", "datatype": "UINT8", "shape": [1], "data": [-1]}]},
    ],
)
def test_fallbacks_and_range_errors_match_the_plain_path(tiny_chunks: None, body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    assert outcome(lambda b: decode_body(b, None, "m", "", LIMITS), raw) == outcome(plain, raw)


def test_a_16_mb_json_body_decodes_within_a_small_multiple_of_its_size() -> None:
    rng = np.random.default_rng(0)
    values = rng.random(1_000_000).astype(np.float32)
    item = {"name": "X", "datatype": "FP32", "shape": [values.size], "data": values.tolist()}
    body = json.dumps({"inputs": [item]}).encode()  # tritonclient writes its JSON with the stdlib
    while len(body) < 16_000_000:
        item = {**item, "name": f"X{len(body)}"}
        body = body[:-2] + b", " + json.dumps(item).encode() + b"]}"
    tracemalloc.start()
    try:
        decoded = decode_body(body, None, "m", "", LIMITS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert np.array_equal(decoded.request.inputs[0].data, values)
    arrays = sum(t.data.nbytes for t in decoded.request.inputs)
    # new allocations: the arrays themselves plus about a chunk's Python objects; the body is the caller's
    assert peak < arrays + 0.25 * len(body), f"peak {peak / 1e6:.1f} MB for a {len(body) / 1e6:.1f} MB body"


def test_plain_orjson_would_not_stay_within_that_bound() -> None:
    """Why the chunked path exists: the plain path's peak on a 4 MB slice of such a body."""
    body = orjson.dumps({"inputs": [{"name": "X", "datatype": "FP32", "shape": [200_000],
                                     "data": np.full(200_000, 0.25).tolist()}]})
    tracemalloc.start()
    try:
        plain(body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak > 4 * len(body)
