"""TF Serving's wire values without TensorFlow: TensorProto <-> numpy, tf.Example inputs, version labels.

Where TensorFlow is installed, its own ``make_tensor_proto`` / ``make_ndarray`` / ``tf.io.parse_example``
are the reference (the bytes cross between the two protobuf pools as a client and server would)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from servelab.errors import InvalidArgument
from servelab.frontends.grpc.tfserving_codec import from_numpy, to_numpy
from servelab.frontends.tfserving.examples import examples_from_json, serialized_examples
from servelab.protocol import tfserving as tfs
from servelab.types import DataType

DT = tfs.types_pb2
LIMIT = 1 << 20
DTYPES = [np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
          np.uint64, np.bool_, np.float16, DataType.BF16.numpy_dtype]
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, max_side=4)


def _arrays(dtype: object) -> st.SearchStrategy[np.ndarray]:
    if dtype == DataType.BF16.numpy_dtype:  # hypothesis has no bfloat16: draw its bit patterns
        return hnp.arrays(np.uint16, SHAPES).map(lambda a: a.view(DataType.BF16.numpy_dtype))
    return hnp.arrays(dtype, SHAPES)  # type: ignore[arg-type]


def _proto(dtype: int, shape: list[int], **values: object) -> tfs.tensor_pb2.TensorProto:
    proto = tfs.tensor_pb2.TensorProto(dtype=dtype, **values)  # type: ignore[arg-type]
    for d in shape:
        proto.tensor_shape.dim.add(size=d)
    return proto


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(DTYPES).flatmap(_arrays))
def test_typed_fields_round_trip(array: np.ndarray) -> None:
    proto = tfs.tensor_pb2.TensorProto()
    from_numpy(array, proto)
    back = to_numpy(tfs.tensor_pb2.TensorProto.FromString(proto.SerializeToString()), "t", LIMIT)
    assert back.dtype == array.dtype and back.shape == array.shape
    assert back.tobytes() == array.tobytes()  # bit for bit, NaN payloads and -0.0 included


def test_tensor_content_is_a_view_and_strings_use_string_val() -> None:
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = to_numpy(_proto(DT.DT_FLOAT, [2, 3], tensor_content=data.tobytes()), "x", LIMIT)
    np.testing.assert_array_equal(got, data)
    strings = to_numpy(_proto(DT.DT_STRING, [2], string_val=[b"a", b"\xff"]), "s", LIMIT)
    assert strings.dtype == object and strings.tolist() == [b"a", b"\xff"]
    proto = tfs.tensor_pb2.TensorProto()
    from_numpy(np.array([[b"x", b"yz"]], dtype=object), proto)
    assert proto.dtype == DT.DT_STRING and list(proto.string_val) == [b"x", b"yz"]


def test_tensorflows_fill_rules_and_limits() -> None:
    assert to_numpy(_proto(DT.DT_INT32, [4], int_val=[1, 2]), "x", LIMIT).tolist() == [1, 2, 2, 2]
    assert to_numpy(_proto(DT.DT_FLOAT, [2, 2]), "x", LIMIT).tolist() == [[0, 0], [0, 0]]
    cases = [
        (_proto(DT.DT_FLOAT, [1_000_000_000], float_val=[1.0]), "the limit is"),
        (_proto(DT.DT_FLOAT, [3], tensor_content=b"\0" * 8), "needs 12"),
        (_proto(DT.DT_FLOAT, [1], float_val=[1.0, 2.0]), "2 values for a shape of 1"),
        (_proto(DT.DT_RESOURCE, [1]), "DT_RESOURCE is not supported"),
        (_proto(DT.DT_STRING, [1], tensor_content=b"a"), "string_val"),
        (_proto(DT.DT_FLOAT, [-1]), "negative dimension"),
    ]
    for proto, message in cases:
        with pytest.raises(InvalidArgument, match=message):
            to_numpy(proto, "x", LIMIT)


def test_against_tensorflow() -> None:
    tf = pytest.importorskip("tensorflow")
    for array in (np.arange(12, dtype=np.float32).reshape(3, 4), np.array([[1, -2]], np.int8),
                  np.array([0.5, 1.5], np.float16), np.array([b"a", b"bc"], dtype=object), np.array([True, False])):
        theirs = tf.make_tensor_proto(array)
        ours = to_numpy(tfs.tensor_pb2.TensorProto.FromString(theirs.SerializeToString()), "t", LIMIT)
        np.testing.assert_array_equal(ours, array)
        proto = tfs.tensor_pb2.TensorProto()
        from_numpy(array, proto)
        np.testing.assert_array_equal(tf.make_ndarray(type(theirs).FromString(proto.SerializeToString())), array)


def test_json_examples_follow_tf_servings_types() -> None:
    body = {"context": {"shared": "ctx", "x": [0.0, 0.0]},
            "examples": [{"x": [1.5, 2.0], "n": 3, "flag": True, "img": {"b64": "aGk="}}, {"n": [1, 2]}]}
    first, second = (tfs.example_pb2.Example.FromString(b) for b in examples_from_json(body))
    features = first.features.feature
    assert list(features["x"].float_list.value) == [1.5, 2.0]  # the example's own x wins over the context's
    assert list(features["n"].int64_list.value) == [3] and list(features["flag"].int64_list.value) == [1]
    assert list(features["img"].bytes_list.value) == [b"hi"] and list(features["shared"].bytes_list.value) == [b"ctx"]
    assert list(second.features.feature["x"].float_list.value) == [0.0, 0.0]
    for bad, message in (({"examples": [{"x": [1.0, 2]}]}, "mixes float and int64"),
                         ({"examples": []}, "empty array"), ({"examples": [{"x": None}]}, "unexpected JSON value"),
                         ({"instances": []}, "needs 'examples'")):
        with pytest.raises(InvalidArgument, match=message):
            examples_from_json(bad)


def test_input_message_and_parse_example() -> None:
    message = tfs.input_pb2.Input()
    listed = message.example_list_with_context
    listed.context.features.feature["x"].float_list.value.extend([9.0, 9.0])
    listed.examples.add().features.feature["y"].int64_list.value.append(1)
    serialized = serialized_examples(message)
    tf = pytest.importorskip("tensorflow")
    parsed = tf.io.parse_example(serialized, {"x": tf.io.FixedLenFeature([2], tf.float32),
                                              "y": tf.io.FixedLenFeature([1], tf.int64)})
    assert parsed["x"].numpy().tolist() == [[9.0, 9.0]] and parsed["y"].numpy().tolist() == [[1]]
    with pytest.raises(InvalidArgument, match="Input is empty"):
        serialized_examples(tfs.input_pb2.Input())
