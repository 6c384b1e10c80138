"""gRPC ModelInfer with stock tritonclient (sync and aio) and the generated stub: every OIP datatype,
raw and typed contents, requested outputs, classification, and the error statuses of bad requests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as tc
import tritonclient.grpc.aio as tca
from grpc_harness import ECHO_TYPES, LABELS, GrpcTestServer, build_test_repository, running_server
from tritonclient.utils import InferenceServerException

from servelab.protocol import grpc_service_pb2 as pb
from servelab.protocol import grpc_service_pb2_grpc as pb_grpc


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_test_repository(tmp_path_factory.mktemp("grpc") / "repo")


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[GrpcTestServer]:
    with running_server(repo) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: GrpcTestServer) -> Iterator[tc.InferenceServerClient]:
    c = tc.InferenceServerClient(server.address)
    yield c
    c.close()


@pytest.fixture(scope="module")
def stub(server: GrpcTestServer) -> Iterator[pb_grpc.GRPCInferenceServiceStub]:
    with grpc.insecure_channel(server.address) as channel:
        yield pb_grpc.GRPCInferenceServiceStub(channel)


def sample(datatype: str, shape: tuple[int, ...] = (2, 3)) -> np.ndarray:
    """Deterministic data for ``datatype`` that uses the edges of its range."""
    n = int(np.prod(shape))
    if datatype == "BOOL":
        return (np.arange(n) % 2 == 0).reshape(shape)
    if datatype == "BYTES":
        # ONNX Runtime string tensors carry UTF-8 text only, so the echo model gets valid UTF-8
        values = [b"", b"hello", "h\u00e9llo \u2603".encode(), b"a\x00b", b"x" * 40, b"last"]
        return np.array((values * n)[:n], dtype=object).reshape(shape)
    if datatype == "BF16":
        return np.linspace(-3.5, 3.5, n).astype(ml_dtypes.bfloat16).reshape(shape)
    dtype = np.dtype(
        {"FP16": np.float16, "FP32": np.float32, "FP64": np.float64}.get(datatype, datatype.lower())
    )
    if dtype.kind == "f":
        return np.linspace(-1e3, 1e3, n).astype(dtype).reshape(shape)
    info = np.iinfo(dtype)
    edges = [info.min, info.max, 0, 1, info.max // 3, info.min // 3 or 7]
    return np.array((edges * n)[:n], dtype=dtype).reshape(shape)


def infer_input(name: str, array: np.ndarray, datatype: str) -> tc.InferInput:
    inp = tc.InferInput(name, list(array.shape), datatype)
    inp.set_data_from_numpy(array)
    return inp


def simple_inputs(module: object = tc) -> tuple[list[tc.InferInput], np.ndarray, np.ndarray]:
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 3, dtype=np.int32)
    return [infer_input("INPUT0", a, "INT32"), infer_input("INPUT1", b, "INT32")], a, b


def raw_request(
    model: str, array: np.ndarray, datatype: str, raw: list[bytes] | None = None
) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model)
    t = request.inputs.add(name="INPUT0", datatype=datatype)
    t.shape.extend(array.shape)
    request.raw_input_contents.extend(raw if raw is not None else [array.tobytes()])
    return request


def status_of(call: object) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    return info.value.code(), info.value.details() or ""


def test_infer_raw_contents_with_request_id(client: tc.InferenceServerClient) -> None:
    inputs, a, b = simple_inputs()
    result = client.infer("simple", inputs, request_id="req-42")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert response.id == "req-42"
    assert response.model_name == "simple" and response.model_version == "1"


@pytest.mark.parametrize("datatype", list(ECHO_TYPES))
def test_echo_every_datatype_sync(client: tc.InferenceServerClient, datatype: str) -> None:
    array = sample(datatype)
    result = client.infer(f"echo_{datatype.lower()}", [infer_input("INPUT0", array, datatype)])
    output = result.as_numpy("OUTPUT0")
    assert result.get_output("OUTPUT0").datatype == datatype
    assert output.shape == array.shape
    if datatype == "BYTES":
        assert output.tolist() == array.tolist()
    else:
        assert output.dtype == array.dtype
        np.testing.assert_array_equal(output, array)


def test_echo_every_datatype_aio(server: GrpcTestServer) -> None:
    async def run() -> dict[str, tuple[np.ndarray, np.ndarray]]:
        client = tca.InferenceServerClient(server.address)
        try:
            arrays = {d: sample(d, (1, 5)) for d in ECHO_TYPES}
            results = await asyncio.gather(
                *(client.infer(f"echo_{d.lower()}", [infer_input("INPUT0", a, d)]) for d, a in arrays.items())
            )
            return {d: (arrays[d], r.as_numpy("OUTPUT0")) for d, r in zip(arrays, results, strict=True)}
        finally:
            await client.close()

    for datatype, (sent, got) in asyncio.run(run()).items():
        assert got.shape == sent.shape, datatype
        assert got.tolist() == sent.tolist(), datatype


def test_requested_outputs_only_return_those(client: tc.InferenceServerClient) -> None:
    inputs, a, b = simple_inputs()
    result = client.infer("simple", inputs, outputs=[tc.InferRequestedOutput("OUTPUT1")])
    assert [o.name for o in result.get_response().outputs] == ["OUTPUT1"]
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_classification_top_k_strings(client: tc.InferenceServerClient) -> None:
    scores = np.array([[0.1, 0.9, 0.3, 0.0, 0.5, 0.2, 0.7, 0.05], [8, 7, 6, 5, 4, 3, 2, 1]], dtype=np.float32)
    result = client.infer(
        "scores",
        [infer_input("INPUT0", scores, "FP32")],
        outputs=[tc.InferRequestedOutput("OUTPUT0", class_count=3)],
    )
    top = result.as_numpy("OUTPUT0")
    assert top.shape == (2, 3)
    rows = [[entry.decode().split(":") for entry in row] for row in top]
    assert [[int(idx) for _, idx, _ in row] for row in rows] == [[1, 6, 4], [0, 1, 2]]
    assert [label for _, _, label in rows[0]] == [LABELS[1], LABELS[6], LABELS[4]]
    assert float(rows[0][0][0]) == pytest.approx(0.9)
    assert float(rows[1][2][0]) == pytest.approx(6.0)


def test_classification_aio(server: GrpcTestServer) -> None:
    async def run() -> np.ndarray:
        client = tca.InferenceServerClient(server.address)
        try:
            scores = np.arange(8, dtype=np.float32).reshape(1, 8)
            result = await client.infer(
                "scores",
                [infer_input("INPUT0", scores, "FP32")],
                outputs=[tca.InferRequestedOutput("OUTPUT0", class_count=2)],
            )
            return result.as_numpy("OUTPUT0")
        finally:
            await client.close()

    top = asyncio.run(run())
    assert [e.decode() for e in top[0]] == ["7.000000:7:class_7", "6.000000:6:class_6"]


@pytest.mark.parametrize("datatype", [d for d in ECHO_TYPES if d not in ("FP16", "BF16")])
def test_typed_contents_every_field(stub: pb_grpc.GRPCInferenceServiceStub, datatype: str) -> None:
    from servelab.frontends.grpc.codec import CONTENTS_FIELD
    from servelab.types import DataType

    array = sample(datatype, (2, 2))
    request = pb.ModelInferRequest(model_name=f"echo_{datatype.lower()}")
    t = request.inputs.add(name="INPUT0", datatype=datatype)
    t.shape.extend(array.shape)
    getattr(t.contents, CONTENTS_FIELD[DataType(datatype)]).extend(array.reshape(-1).tolist())
    response = stub.ModelInfer(request, timeout=10)
    assert response.outputs[0].datatype == datatype
    assert list(response.outputs[0].shape) == [2, 2]
    raw = response.raw_output_contents[0]
    if datatype == "BYTES":
        assert raw == b"".join(len(v).to_bytes(4, "little") + v for v in array.reshape(-1))
    else:
        assert raw == array.tobytes()


def test_unknown_model_is_not_found(client: tc.InferenceServerClient) -> None:
    inputs, _, _ = simple_inputs()
    with pytest.raises(InferenceServerException) as info:
        client.infer("no_such_model", inputs)
    assert info.value.status() == "StatusCode.NOT_FOUND"
    assert "no_such_model" in info.value.message()


def test_unknown_model_is_not_found_aio(server: GrpcTestServer) -> None:
    async def run() -> InferenceServerException:
        client = tca.InferenceServerClient(server.address)
        try:
            inputs, _, _ = simple_inputs()
            with pytest.raises(InferenceServerException) as info:
                await client.infer("no_such_model", inputs)
            return info.value
        finally:
            await client.close()

    assert asyncio.run(run()).status() == "StatusCode.NOT_FOUND"


def test_wrong_datatype_is_invalid_argument(client: tc.InferenceServerClient) -> None:
    x = np.zeros((1, 16), dtype=np.float32)
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", [infer_input("INPUT0", x, "FP32"), infer_input("INPUT1", x, "FP32")])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "INPUT0" in info.value.message() and "INT32" in info.value.message()


def test_wrong_shape_is_invalid_argument(client: tc.InferenceServerClient) -> None:
    x = np.zeros((1, 15), dtype=np.int32)
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", [infer_input("INPUT0", x, "INT32"), infer_input("INPUT1", x, "INT32")])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "INPUT0" in info.value.message() and "[1, 15]" in info.value.message()


def test_raw_size_mismatch_names_the_tensor(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    x = np.zeros((1, 4), dtype=np.int32)
    request = raw_request("echo_int32", x, "INT32", raw=[x.tobytes()[:-2]])
    code, details = status_of(lambda: stub.ModelInfer(request, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "INPUT0" in details and "16 bytes" in details and "14" in details


def test_raw_bytes_tensor_truncated_is_invalid_argument(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    x = np.array([[b"abc"]], dtype=object)
    request = raw_request("echo_bytes", x, "BYTES", raw=[(10).to_bytes(4, "little") + b"abc"])
    code, details = status_of(lambda: stub.ModelInfer(request, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "INPUT0" in details


def test_raw_contents_count_mismatch(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    x = np.zeros((1, 16), dtype=np.int32)
    request = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        t = request.inputs.add(name=name, datatype="INT32")
        t.shape.extend(x.shape)
    request.raw_input_contents.append(x.tobytes())
    code, details = status_of(lambda: stub.ModelInfer(request, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "2 inputs" in details and "1 raw_input_contents" in details


def test_raw_and_typed_contents_mixed_is_refused(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    x = np.zeros((1, 2), dtype=np.int32)
    request = raw_request("echo_int32", x, "INT32")
    request.inputs[0].contents.int_contents.extend([0, 0])
    code, details = status_of(lambda: stub.ModelInfer(request, timeout=10))
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
    stub: pb_grpc.GRPCInferenceServiceStub, datatype: str, field: str, values: list[float], words: str
) -> None:
    request = pb.ModelInferRequest(model_name=f"echo_{datatype.lower()}")
    t = request.inputs.add(name="INPUT0", datatype=datatype)
    t.shape.extend([1, 2])
    getattr(t.contents, field).extend(values)
    code, details = status_of(lambda: stub.ModelInfer(request, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "INPUT0" in details and words in details


def test_missing_data_and_unknown_datatype(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    request = pb.ModelInferRequest(model_name="echo_fp32")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 2])
    code, details = status_of(lambda: stub.ModelInfer(request, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "has no data" in details
    request.inputs[0].datatype = "FP8"
    code, details = status_of(lambda: stub.ModelInfer(request, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "FP8" in details and "FP32" in details


def test_unknown_requested_output_and_bad_classification(client: tc.InferenceServerClient) -> None:
    inputs, _, _ = simple_inputs()
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", inputs, outputs=[tc.InferRequestedOutput("NOPE")])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT" and "NOPE" in info.value.message()


def test_classification_parameter_must_be_an_integer(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    x = np.zeros((1, 8), dtype=np.float32)
    request = raw_request("scores", x, "FP32")
    request.outputs.add(name="OUTPUT0").parameters["classification"].string_param = "three"
    code, details = status_of(lambda: stub.ModelInfer(request, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "classification" in details


def test_shared_memory_input_is_unimplemented(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    x = np.zeros((1, 2), dtype=np.float32)
    request = pb.ModelInferRequest(model_name="echo_fp32")
    t = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 2])
    t.parameters["shared_memory_region"].string_param = "region0"
    t.parameters["shared_memory_byte_size"].int64_param = x.nbytes
    code, details = status_of(lambda: stub.ModelInfer(request, timeout=10))
    assert code == grpc.StatusCode.UNIMPLEMENTED and "shared-memory" in details


def test_message_over_the_limit_is_resource_exhausted(tmp_path: Path) -> None:
    repo = build_test_repository(tmp_path / "repo")
    with (
        running_server(repo, load=["echo_uint8"], max_message_bytes=4096) as s,
        tc.InferenceServerClient(s.address) as client,
    ):
        small = np.zeros((1, 100), dtype=np.uint8)
        assert client.infer("echo_uint8", [infer_input("INPUT0", small, "UINT8")]).as_numpy(
            "OUTPUT0"
        ).shape == (1, 100)
        big = np.zeros((1, 8192), dtype=np.uint8)
        with pytest.raises(InferenceServerException) as info:
            client.infer("echo_uint8", [infer_input("INPUT0", big, "UINT8")])
        assert info.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
        assert client.is_server_live()


def test_server_keeps_serving_after_errors(client: tc.InferenceServerClient) -> None:
    inputs, a, b = simple_inputs()
    np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), a + b)


def test_concurrent_aio_requests_get_their_own_answers(server: GrpcTestServer) -> None:
    count = 48

    async def run() -> list[np.ndarray]:
        client = tca.InferenceServerClient(server.address)
        try:
            calls = []
            for i in range(count):
                x = np.full((1, 16), i, dtype=np.int32)
                calls.append(
                    client.infer(
                        "simple", [infer_input("INPUT0", x, "INT32"), infer_input("INPUT1", x, "INT32")]
                    )
                )
            return [r.as_numpy("OUTPUT0") for r in await asyncio.gather(*calls)]
        finally:
            await client.close()

    for i, out in enumerate(asyncio.run(run())):
        np.testing.assert_array_equal(out, np.full((1, 16), 2 * i, dtype=np.int32))
