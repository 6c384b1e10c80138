"""Property tests for the gRPC codec (no sockets): raw and typed contents decode to the arrays that were
encoded, responses encode to the raw layout tritonclient reads, parameters keep their types.

Arbitrary (non-UTF-8) BYTES are covered here because the ONNX echo models used over the wire can only
carry UTF-8 text."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tritonclient.utils import deserialize_bytes_tensor

from servelab.config.settings import LimitSettings
from servelab.errors import InvalidArgument
from servelab.frontends.grpc.codec import CONTENTS_FIELD, decode_request, encode_response
from servelab.protocol import grpc_service_pb2 as pb
from servelab.types import DataType, InferResponse, Tensor

FIXED = [d for d in DataType if d is not DataType.BYTES]
shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4)


def arrays_of(datatype: DataType) -> st.SearchStrategy[np.ndarray]:
    if datatype is DataType.BF16:
        return hnp.arrays(np.float32, shapes, elements=st.floats(-1e3, 1e3, width=32)).map(
            lambda a: a.astype(ml_dtypes.bfloat16)
        )
    return hnp.arrays(datatype.numpy_dtype, shapes)


def bytes_arrays() -> st.SearchStrategy[np.ndarray]:
    def build(shape: tuple[int, ...], data: st.DataObject) -> np.ndarray:
        n = int(np.prod(shape))
        items = data.draw(st.lists(st.binary(max_size=12), min_size=n, max_size=n))
        out = np.empty(n, dtype=object)
        out[:] = items
        return out.reshape(shape)

    return st.tuples(shapes, st.data()).map(lambda t: build(*t))


def request_for(array: np.ndarray, datatype: DataType, typed: bool) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name="m", id="x")
    t = msg.inputs.add(name="IN", datatype=datatype.value)
    t.shape.extend(array.shape)
    if typed:
        getattr(t.contents, CONTENTS_FIELD[datatype]).extend(array.reshape(-1).tolist())
    elif datatype is DataType.BYTES:
        msg.raw_input_contents.append(b"".join(len(b).to_bytes(4, "little") + b for b in array.reshape(-1)))
    else:
        msg.raw_input_contents.append(array.tobytes())
    return msg


@pytest.mark.parametrize("datatype", FIXED, ids=lambda d: d.value)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_raw_fixed_size_round_trip(datatype: DataType, data: st.DataObject) -> None:
    array = data.draw(arrays_of(datatype))
    (tensor,) = decode_request(request_for(array, datatype, typed=False)).inputs
    assert tensor.datatype is datatype and tensor.shape == array.shape
    assert tensor.data.tobytes() == array.tobytes()
    response = encode_response(InferResponse("m", "1", [Tensor("OUT", datatype, tensor.shape, tensor.data)]))
    assert response.raw_output_contents[0] == array.tobytes()


@pytest.mark.parametrize(
    "datatype", [d for d in CONTENTS_FIELD if d is not DataType.BYTES], ids=lambda d: d.value
)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_typed_contents_round_trip(datatype: DataType, data: st.DataObject) -> None:
    array = data.draw(arrays_of(datatype))
    (tensor,) = decode_request(request_for(array, datatype, typed=True)).inputs
    assert tensor.data.dtype == datatype.numpy_dtype
    np.testing.assert_array_equal(tensor.data, array)


@settings(max_examples=50, deadline=None)
@given(array=bytes_arrays(), typed=st.booleans())
def test_bytes_round_trip_any_bytes(array: np.ndarray, typed: bool) -> None:
    (tensor,) = decode_request(request_for(array, DataType.BYTES, typed)).inputs
    assert tensor.data.shape == array.shape and tensor.data.tolist() == array.tolist()
    response = encode_response(
        InferResponse("m", "1", [Tensor("OUT", DataType.BYTES, array.shape, tensor.data)])
    )
    decoded = deserialize_bytes_tensor(response.raw_output_contents[0])
    assert decoded.tolist() == array.reshape(-1).tolist()


def test_parameters_keep_their_types() -> None:
    msg = pb.ModelInferRequest(model_name="m")
    msg.parameters["b"].bool_param = True
    msg.parameters["i"].int64_param = -5
    msg.parameters["u"].uint64_param = 2**63 + 1
    msg.parameters["d"].double_param = 0.25
    msg.parameters["s"].string_param = "text"
    out = msg.outputs.add(name="OUT")
    out.parameters["classification"].int64_param = 3
    out.parameters["custom"].string_param = "kept"
    request = decode_request(msg)
    assert request.parameters == {"b": True, "i": -5, "u": 2**63 + 1, "d": 0.25, "s": "text"}
    assert request.outputs[0].class_count == 3 and request.outputs[0].parameters == {"custom": "kept"}

    response = encode_response(InferResponse("m", "1", [], "id", dict(request.parameters)))
    back = {k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in response.parameters.items()}
    assert back == request.parameters
    assert response.parameters["u"].WhichOneof("parameter_choice") == "uint64_param"


def test_empty_parameter_is_refused() -> None:
    msg = pb.ModelInferRequest(model_name="m")
    msg.parameters["nothing"].SetInParent()
    with pytest.raises(InvalidArgument, match="'nothing' has no value"):
        decode_request(msg)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(1, 3), with_outputs=st.booleans(), flagged=st.booleans())
def test_the_plain_decoder_gives_what_the_general_one_gives(
    data: st.DataObject, n: int, with_outputs: bool, flagged: bool
) -> None:
    """All-raw requests without tensor parameters take the short decoder: same request as the general decoder,
    request-level parameters included (perf_analyzer sets ``triton_enable_empty_final_response`` on each)."""
    from servelab.frontends.grpc.codec import _decode_general, decode_plain

    msg = pb.ModelInferRequest(model_name="m", model_version="2", id="x")
    for i in range(n):
        datatype = data.draw(st.sampled_from(FIXED))
        array = data.draw(arrays_of(datatype))
        t = msg.inputs.add(name=f"IN{i}", datatype=datatype.value)
        t.shape.extend(array.shape)
        msg.raw_input_contents.append(array.tobytes())
    if with_outputs:
        msg.outputs.add(name="OUT")
    if flagged:
        msg.parameters["triton_enable_empty_final_response"].bool_param = True
    plain = decode_plain(msg, LimitSettings())
    general, regions = _decode_general(msg, LimitSettings(), None)
    assert regions == {}
    if any(0 in t.shape for t in msg.inputs):  # zero-size tensors are left to the general decoder
        assert plain is None
        return
    assert plain is not None
    expected = {"triton_enable_empty_final_response": True} if flagged else {}
    assert (plain.model_name, plain.model_version, plain.id, plain.parameters) == ("m", "2", "x", expected)
    assert plain.parameters == general.parameters
    assert plain.outputs == general.outputs
    for a, b in zip(plain.inputs, general.inputs, strict=True):
        assert (a.name, a.datatype, a.shape, a.parameters) == (b.name, b.datatype, b.shape, b.parameters)
        assert a.data.dtype == b.data.dtype and a.data.shape == b.data.shape
        assert a.data.tobytes() == b.data.tobytes()


def test_a_request_the_plain_decoder_cannot_take_gets_the_general_answer() -> None:
    """Wrong byte sizes, parameters, BYTES: the short decoder steps aside and the general one decides."""
    from servelab.frontends.grpc.codec import decode_plain

    msg = pb.ModelInferRequest(model_name="m")
    msg.inputs.add(name="IN", datatype="FP32", shape=[4])
    msg.raw_input_contents.append(b"\0" * 12)
    assert decode_plain(msg, LimitSettings()) is None
    with pytest.raises(InvalidArgument, match="input byte size mismatch for input 'IN' for model 'm'. Expected 16, got 12"):
        decode_request(msg)
    msg.raw_input_contents[0] = b"\0" * 16
    assert decode_plain(msg, LimitSettings()) is not None
    msg.outputs.add(name="OUT").parameters["classification"].int64_param = 2
    assert decode_plain(msg, LimitSettings()) is None
    assert decode_request(msg).outputs[0].class_count == 2
    del msg.outputs[:]
    msg.parameters["nothing"].SetInParent()  # a parameter without a value: the general decoder's error
    assert decode_plain(msg, LimitSettings()) is None
    with pytest.raises(InvalidArgument, match="'nothing' has no value"):
        decode_request(msg)
    bad_shape = pb.ModelInferRequest(model_name="m")
    bad_shape.inputs.add(name="IN", datatype="FP32", shape=[2] * 40)
    bad_shape.raw_input_contents.append(b"")
    with pytest.raises(InvalidArgument, match="input 'IN': shape has 40 dimensions"):
        decode_request(bad_shape)
