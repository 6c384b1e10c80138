"""gRPC ModelInfer against `servelab serve` with stock tritonclient (sync and aio) and the generated stub:
every OIP datatype, raw and typed contents, requested outputs, classification, and the error statuses
of bad requests."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tc
import tritonclient.grpc.aio as tca
from tritonclient.utils import InferenceServerException

from harness.clients import infer_input, simple_inputs
from harness.data import ANY_BYTES, sample
from harness.models import DTYPES
from harness.repository import CLASS_LABELS, echo_name
from harness.servers import ServerProcess
from servelab.frontends.grpc.codec import CONTENTS_FIELD
from servelab.protocol import grpc_service_pb2 as pb
from servelab.protocol import grpc_service_pb2_grpc as pb_grpc
from servelab.types import DataType

A = np.arange(32, dtype=np.int32).reshape(2, 16)
B = np.full((2, 16), 3, dtype=np.int32)


def raw_request(
    model: str, array: np.ndarray, datatype: str, raw: list[bytes] | None = None
) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model)
    t = request.inputs.add(name="INPUT", datatype=datatype)
    t.shape.extend(array.shape)
    request.raw_input_contents.extend(raw if raw is not None else [array.tobytes()])
    return request


def status_of(call: object) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    return info.value.code(), info.value.details() or ""


def test_infer_raw_contents_with_request_id(grpc_client: tc.InferenceServerClient) -> None:
    result = grpc_client.infer("simple", simple_inputs(tc, A, B), request_id="req-42")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)
    response = result.get_response()
    assert response.id == "req-42"
    assert response.model_name == "simple" and response.model_version == "1"


@pytest.mark.parametrize("datatype", list(DTYPES))
def test_echo_every_datatype_sync(grpc_client: tc.InferenceServerClient, datatype: str) -> None:
    array = sample(datatype)
    result = grpc_client.infer(echo_name(datatype), [infer_input(tc, "INPUT", array, datatype)])
    output = result.as_numpy("OUTPUT")
    assert result.get_output("OUTPUT").datatype == datatype
    assert output.shape == array.shape
    if datatype == "BYTES":
        assert output.tolist() == array.tolist()
    else:
        assert output.dtype == array.dtype
        np.testing.assert_array_equal(output, array)


def test_echo_every_datatype_aio(server: ServerProcess) -> None:
    arrays = {d: sample(d, (1, 5)) for d in DTYPES}

    async def run() -> list[np.ndarray]:
        async with tca.InferenceServerClient(server.grpc_address) as client:
            calls = (client.infer(echo_name(d), [infer_input(tca, "INPUT", a, d)]) for d, a in arrays.items())
            return [r.as_numpy("OUTPUT") for r in await asyncio.gather(*calls)]

    for (datatype, sent), got in zip(arrays.items(), asyncio.run(run()), strict=True):
        assert got.shape == sent.shape, datatype
        assert got.tolist() == sent.tolist(), datatype


def test_bytes_echo_through_python_backend_keeps_any_bytes(grpc_client: tc.InferenceServerClient) -> None:
    values = np.array([ANY_BYTES], dtype=object)
    result = grpc_client.infer("echo_bytes", [infer_input(tc, "INPUT", values, "BYTES")])
    assert result.as_numpy("OUTPUT").tolist() == values.tolist()


def test_requested_outputs_only_return_those(grpc_client: tc.InferenceServerClient) -> None:
    result = grpc_client.infer("simple", simple_inputs(tc, A, B), outputs=[tc.InferRequestedOutput("OUTPUT1")])
    assert [o.name for o in result.get_response().outputs] == ["OUTPUT1"]
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


def test_classification_top_k_strings(grpc_client: tc.InferenceServerClient) -> None:
    scores = np.array([[0.1, 0.9, 0.3, 0.5], [4, 3, 2, 1]], dtype=np.float32)
    result = grpc_client.infer(
        "classify",
        [infer_input(tc, "INPUT", scores)],
        outputs=[tc.InferRequestedOutput("OUTPUT", class_count=3)],
    )
    top = result.as_numpy("OUTPUT")
    assert top.shape == (2, 3)
    rows = [[entry.decode().split(":") for entry in row] for row in top]
    assert [[int(idx) for _, idx, _ in row] for row in rows] == [[1, 3, 2], [0, 1, 2]]
    assert [label for _, _, label in rows[0]] == [CLASS_LABELS[1], CLASS_LABELS[3], CLASS_LABELS[2]]
    assert float(rows[0][0][0]) == pytest.approx(0.9)
    assert float(rows[1][2][0]) == pytest.approx(2.0)


def test_classification_aio(server: ServerProcess) -> None:
    async def run() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        async with tca.InferenceServerClient(server.grpc_address) as client:
            scores = np.arange(4, dtype=np.float32).reshape(1, 4)
            out = [tca.InferRequestedOutput("OUTPUT", class_count=2)]
            top = await client.infer("classify", [infer_input(tca, "INPUT", scores)], outputs=out)
            x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16)
            mlp = await client.infer("mlp_onnx", [infer_input(tca, "INPUT", x)])
            mlp_out = [tca.InferRequestedOutput("OUTPUT", class_count=2)]
            mlp_top = await client.infer("mlp_onnx", [infer_input(tca, "INPUT", x)], outputs=mlp_out)
            return top.as_numpy("OUTPUT"), mlp.as_numpy("OUTPUT"), mlp_top.as_numpy("OUTPUT")

    top, mlp_scores, mlp_top = asyncio.run(run())
    assert [e.decode() for e in top[0]] == ["3.000000:3:fish", "2.000000:2:bird"]
    assert mlp_scores.shape == (2, 8) and mlp_top.shape == (2, 2)
    best = [int(entry.decode().split(":")[1]) for entry in mlp_top[:, 0]]
    assert best == mlp_scores.argmax(axis=1).tolist()
    assert mlp_top[0, 0].decode().endswith(f":class_{best[0]}")


@pytest.mark.parametrize("datatype", [d for d in DTYPES if d not in ("FP16", "BF16")])
def test_typed_contents_every_field(grpc_stub: pb_grpc.GRPCInferenceServiceStub, datatype: str) -> None:
    array = sample(datatype, (2, 2))
    request = pb.ModelInferRequest(model_name=echo_name(datatype))
    t = request.inputs.add(name="INPUT", datatype=datatype)
    t.shape.extend(array.shape)
    getattr(t.contents, CONTENTS_FIELD[DataType(datatype)]).extend(array.reshape(-1).tolist())
    response = grpc_stub.ModelInfer(request, timeout=10)
    assert response.outputs[0].datatype == datatype
    assert list(response.outputs[0].shape) == [2, 2]
    raw = response.raw_output_contents[0]
    if datatype == "BYTES":
        assert raw == b"".join(len(v).to_bytes(4, "little") + v for v in array.reshape(-1))
    else:
        assert raw == array.tobytes()


def test_unknown_model_is_not_found(grpc_client: tc.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as info:
        grpc_client.infer("no_such_model", simple_inputs(tc, A, B))
    assert info.value.status() == "StatusCode.NOT_FOUND"
    assert "no_such_model" in info.value.message()


def test_unknown_model_is_not_found_aio(server: ServerProcess) -> None:
    async def run() -> InferenceServerException:
        async with tca.InferenceServerClient(server.grpc_address) as client:
            with pytest.raises(InferenceServerException) as info:
                await client.infer("no_such_model", simple_inputs(tca, A, B))
            return info.value

    assert asyncio.run(run()).status() == "StatusCode.NOT_FOUND"


@pytest.mark.parametrize(
    ("array", "datatype", "words"),
    [
        (np.zeros((1, 16), dtype=np.float32), "FP32", "INT32"),
        (np.zeros((1, 15), dtype=np.int32), "INT32", "[1, 15]"),
    ],
    ids=["wrong-datatype", "wrong-shape"],
)
def test_wrong_datatype_or_shape_is_invalid_argument(
    grpc_client: tc.InferenceServerClient, array: np.ndarray, datatype: str, words: str
) -> None:
    inputs = [infer_input(tc, name, array, datatype) for name in ("INPUT0", "INPUT1")]
    with pytest.raises(InferenceServerException) as info:
        grpc_client.infer("simple", inputs)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "INPUT0" in info.value.message() and words in info.value.message()


def test_raw_size_mismatch_names_the_tensor(grpc_stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    x = np.zeros((1, 4), dtype=np.int32)
    request = raw_request("echo_int32", x, "INT32", raw=[x.tobytes()[:-2]])
    code, details = status_of(lambda: grpc_stub.ModelInfer(request, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "INPUT" in details and "16 bytes" in details and "14" in details


def test_raw_bytes_tensor_truncated_is_invalid_argument(grpc_stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    x = np.array([[b"abc"]], dtype=object)
    request = raw_request("echo_bytes", x, "BYTES", raw=[(10).to_bytes(4, "little") + b"abc"])
    code, details = status_of(lambda: grpc_stub.ModelInfer(request, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "INPUT" in details


def test_raw_contents_count_mismatch(grpc_stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    x = np.zeros((1, 16), dtype=np.int32)
    request = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        t = request.inputs.add(name=name, datatype="INT32")
        t.shape.extend(x.shape)
    request.raw_input_contents.append(x.tobytes())
    code, details = status_of(lambda: grpc_stub.ModelInfer(request, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "2 inputs" in details and "1 raw_input_contents" in details


def test_raw_and_typed_contents_mixed_is_refused(grpc_stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    x = np.zeros((1, 2), dtype=np.int32)
    request = raw_request("echo_int32", x, "INT32")
    request.inputs[0].contents.int_contents.extend([0, 0])
    code, details = status_of(lambda: grpc_stub.ModelInfer(request, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "raw_input_contents" in details


@pytest.mark.parametrize(
    ("datatype", "field", "values", "words"),
    [
        ("FP16", "fp32_contents", [1.0, 2.0], "only be sent in raw_input_contents"),
        ("INT32", "fp32_contents", [1.0, 2.0], "contents.int_contents"),
        ("INT8", "int_contents", [1, 300], "do not fit INT8"),
        ("UINT16", "uint_contents", [70000, 1], "do not fit UINT16"),
        ("FP32", "fp32_contents", [1.0], "needs 2 elements"),
    ],
)
def test_bad_typed_contents(
    grpc_stub: pb_grpc.GRPCInferenceServiceStub, datatype: str, field: str, values: list[float], words: str
) -> None:
    request = pb.ModelInferRequest(model_name=echo_name(datatype))
    t = request.inputs.add(name="INPUT", datatype=datatype)
    t.shape.extend([1, 2])
    getattr(t.contents, field).extend(values)
    code, details = status_of(lambda: grpc_stub.ModelInfer(request, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "INPUT" in details and words in details


def test_missing_data_and_unknown_datatype(grpc_stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    request = pb.ModelInferRequest(model_name="echo_fp32")
    request.inputs.add(name="INPUT", datatype="FP32", shape=[1, 2])
    code, details = status_of(lambda: grpc_stub.ModelInfer(request, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "has no data" in details
    request.inputs[0].datatype = "FP8"
    code, details = status_of(lambda: grpc_stub.ModelInfer(request, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "FP8" in details and "FP32" in details


def test_unknown_requested_output(grpc_client: tc.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as info:
        grpc_client.infer("simple", simple_inputs(tc, A, B), outputs=[tc.InferRequestedOutput("NOPE")])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT" and "NOPE" in info.value.message()


def test_classification_parameter_must_be_an_integer(grpc_stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    x = np.zeros((1, 4), dtype=np.float32)
    request = raw_request("classify", x, "FP32")
    request.outputs.add(name="OUTPUT").parameters["classification"].string_param = "three"
    code, details = status_of(lambda: grpc_stub.ModelInfer(request, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "classification" in details


def test_an_unregistered_shared_memory_region_is_not_found(grpc_stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    x = np.zeros((1, 2), dtype=np.float32)
    request = pb.ModelInferRequest(model_name="echo_fp32")
    t = request.inputs.add(name="INPUT", datatype="FP32", shape=[1, 2])
    t.parameters["shared_memory_region"].string_param = "region0"
    t.parameters["shared_memory_byte_size"].int64_param = x.nbytes
    code, details = status_of(lambda: grpc_stub.ModelInfer(request, timeout=10))
    assert code == grpc.StatusCode.NOT_FOUND and "Unable to find shared memory region: 'region0'" in details


def test_server_keeps_serving_after_errors(grpc_client: tc.InferenceServerClient) -> None:
    np.testing.assert_array_equal(grpc_client.infer("simple", simple_inputs(tc, A, B)).as_numpy("OUTPUT0"), A + B)


def test_concurrent_aio_requests_get_their_own_answers(server: ServerProcess) -> None:
    count = 48

    async def run() -> list[np.ndarray]:
        async with tca.InferenceServerClient(server.grpc_address) as client:
            xs = [np.full((1, 16), i, dtype=np.int32) for i in range(count)]
            results = await asyncio.gather(*(client.infer("simple", simple_inputs(tca, x, x)) for x in xs))
            return [r.as_numpy("OUTPUT0") for r in results]

    for i, out in enumerate(asyncio.run(run())):
        np.testing.assert_array_equal(out, np.full((1, 16), 2 * i, dtype=np.int32))
