"""Fuzzing gRPC ModelInferRequest decoding, no sockets: hostile shapes, raw_input_contents that do not
match the inputs, typed contents of the wrong field or length, parameters of every kind. Only
ServelabErrors may come out (the servicer maps them; anything else would be INTERNAL), within a
bounded time, with fixed seeds. Also: arbitrary bytes parsed as a ModelInferRequest."""

from __future__ import annotations

import contextlib
import math

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from harness.fuzz import FUZZ, decodes_or_refuses
from harness.fuzz import FUZZ_LIMITS as LIMITS
from servelab.errors import ServelabError
from servelab.frontends.grpc.codec import CONTENTS_FIELD, decode_request
from servelab.frontends.grpc.errors import trim_message
from servelab.protocol import grpc_service_pb2 as pb
from servelab.types import DataType

INT64 = st.integers(-(2**63), 2**63 - 1)
DATATYPES = [d.value for d in DataType] + ["", "FP8", "fp32"]
FIELDS = sorted(set(CONTENTS_FIELD.values()))
PARAM_KINDS = ["bool_param", "int64_param", "uint64_param", "double_param", "string_param", None]


def _values(field: str, n: int) -> st.SearchStrategy[list[object]]:
    element: st.SearchStrategy[object] = {
        "bool_contents": st.booleans(),
        "int_contents": st.integers(-(2**31), 2**31 - 1),
        "int64_contents": INT64,
        "uint_contents": st.integers(0, 2**32 - 1),
        "uint64_contents": st.integers(0, 2**64 - 1),
        "fp32_contents": st.floats(width=32),
        "fp64_contents": st.floats(),
        "bytes_contents": st.binary(max_size=4),
    }[field]
    return st.lists(element, min_size=n, max_size=n)


@st.composite
def parameters(draw: st.DrawFn, target: object) -> None:
    for key in draw(st.lists(st.sampled_from(["classification", "shared_memory_region", "binary_data", "x"]),
                             max_size=2)):
        kind = draw(st.sampled_from(PARAM_KINDS))
        p = target[key]  # type: ignore[index]
        if kind == "bool_param":
            p.bool_param = draw(st.booleans())
        elif kind == "int64_param":
            p.int64_param = draw(INT64)
        elif kind == "uint64_param":
            p.uint64_param = draw(st.integers(0, 2**64 - 1))
        elif kind == "double_param":
            p.double_param = draw(st.floats())
        elif kind == "string_param":
            p.string_param = draw(st.text(max_size=4))
        else:
            p.SetInParent()  # present, with no value


@st.composite
def requests(draw: st.DrawFn) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name="m", id=draw(st.text(max_size=4)))
    n_inputs = draw(st.integers(0, 3))
    raw_mode = draw(st.sampled_from(["raw", "typed", "mixed"]))
    for i in range(n_inputs):
        inp = msg.inputs.add(name=draw(st.sampled_from(["IN0", "IN1", "", "IN0"])),
                             datatype=draw(st.sampled_from(DATATYPES)))
        shape = draw(st.one_of(
            st.lists(st.integers(0, 4), max_size=4),
            st.lists(INT64, max_size=3),
            st.sampled_from([[2**40, 2**40], [0, 2**62], [1] * 7, [-1], [2**31, 2**31, 0]]),
        ))
        inp.shape.extend(shape)
        count = math.prod(shape) if all(0 <= d <= 8 for d in shape) else 0
        count = max(0, count + draw(st.sampled_from([0, 0, 1, -1])))
        draw(parameters(inp.parameters))
        if raw_mode == "raw" or (raw_mode == "mixed" and i % 2):
            itemsize = draw(st.sampled_from([1, 2, 4, 8]))
            msg.raw_input_contents.append(draw(st.binary(min_size=count * itemsize, max_size=count * itemsize + 9)))
        if raw_mode != "raw":
            field = draw(st.sampled_from([CONTENTS_FIELD.get(DataType(inp.datatype), FIELDS[0])
                                          if inp.datatype in DataType.__members__ else FIELDS[0], *FIELDS]))
            getattr(inp.contents, field).extend(draw(_values(field, count)))
    if draw(st.booleans()):  # an extra or a missing raw entry
        msg.raw_input_contents.append(b"\0" * draw(st.integers(0, 16)))
    for _ in range(draw(st.integers(0, 3))):
        out = msg.outputs.add(name=draw(st.sampled_from(["OUT0", "OUT0", ""])))
        draw(parameters(out.parameters))
    draw(parameters(msg.parameters))
    return msg


@FUZZ
@given(msg=requests())
def test_requests_decode_or_refuse(msg: pb.ModelInferRequest) -> None:
    decodes_or_refuses(decode_request, msg, LIMITS)


@FUZZ
@given(raw=st.binary(max_size=200))
def test_arbitrary_message_bytes_decode_or_refuse(raw: bytes) -> None:
    msg = pb.ModelInferRequest()
    try:
        msg.ParseFromString(raw)
    except DecodeError:
        return  # grpc answers such a message itself, before the servicer runs
    with contextlib.suppress(ServelabError):
        decode_request(msg, LIMITS)


@pytest.mark.parametrize("shape", [[2**40, 2**40], [0, 2**62], [1] * 7, [2**31, 2**31, 0]])
def test_hostile_shapes_are_invalid_argument(shape: list[int]) -> None:
    for raw in (True, False):
        msg = pb.ModelInferRequest(model_name="m")
        inp = msg.inputs.add(name="X", datatype="FP32")
        inp.shape.extend(shape)
        if raw:
            msg.raw_input_contents.append(b"")
        with pytest.raises(ServelabError, match="input 'X'"):
            decode_request(msg, LIMITS)


@pytest.mark.parametrize("text", ["x" * 100_000, "é" * 50_000, "\U0001f600" * 3000, "short"])
def test_error_messages_are_trimmed_to_whole_characters(text: str) -> None:
    out = trim_message(text, 2048)
    assert len(out.encode()) <= 2048
    assert out == text or out.endswith("bytes, cut]")
    assert out.encode().decode() == out
