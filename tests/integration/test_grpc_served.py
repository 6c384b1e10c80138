"""gRPC against the real `servelab serve` process (conftest.py's session servers), with stock tritonclient:
the port the assembly opens speaks the full service and the Python backend's BYTES survive any bytes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import grpc
import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as tc
import tritonclient.grpc.aio as tca
from tritonclient.utils import InferenceServerException

from servelab.protocol import health_pb2, health_pb2_grpc


@pytest.fixture(scope="module")
def client(server: Any) -> Iterator[tc.InferenceServerClient]:
    c = tc.InferenceServerClient(server.grpc_address)
    yield c
    c.close()


def infer_input(name: str, array: np.ndarray, datatype: str, module: Any = tc) -> Any:
    inp = module.InferInput(name, list(array.shape), datatype)
    inp.set_data_from_numpy(array)
    return inp


def test_served_health_and_metadata(server: Any, client: tc.InferenceServerClient) -> None:
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("mlp_onnx")
    assert client.get_server_metadata(as_json=True)["name"] == "servelab"
    assert client.get_model_metadata("echo_bytes", as_json=True)["inputs"][0]["datatype"] == "BYTES"
    with grpc.insecure_channel(server.grpc_address) as channel:
        status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status
    assert status == health_pb2.HealthCheckResponse.SERVING


def test_served_bytes_echo_through_python_backend_keeps_any_bytes(client: tc.InferenceServerClient) -> None:
    values = np.array([[b"", b"\x00\xff\xfe binary", "caf\u00e9".encode(), b"x" * 300]], dtype=object)
    result = client.infer("echo_bytes", [infer_input("INPUT", values, "BYTES")])
    assert result.as_numpy("OUTPUT").tolist() == values.tolist()


def test_served_fp16_and_bf16_echo(client: tc.InferenceServerClient) -> None:
    for datatype, dtype in (("FP16", np.float16), ("BF16", ml_dtypes.bfloat16)):
        x = np.array([[0.5, -2.25, 1024.0]], dtype=dtype)
        out = client.infer(f"echo_{datatype.lower()}", [infer_input("INPUT", x, datatype)]).as_numpy("OUTPUT")
        assert out.dtype == x.dtype and out.tolist() == x.tolist()


def test_served_mlp_and_classification_aio(server: Any) -> None:
    async def run() -> tuple[np.ndarray, np.ndarray]:
        client = tca.InferenceServerClient(server.grpc_address)
        try:
            x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16)
            scores = await client.infer("mlp_onnx", [infer_input("INPUT", x, "FP32", tca)])
            top = await client.infer(
                "mlp_onnx",
                [infer_input("INPUT", x, "FP32", tca)],
                outputs=[tca.InferRequestedOutput("OUTPUT", class_count=2)],
            )
            return scores.as_numpy("OUTPUT"), top.as_numpy("OUTPUT")
        finally:
            await client.close()

    scores, top = asyncio.run(run())
    assert scores.shape == (2, 8) and top.shape == (2, 2)
    best = [int(entry.decode().split(":")[1]) for entry in top[:, 0]]
    assert best == scores.argmax(axis=1).tolist()
    assert top[0, 0].decode().endswith(f":class_{best[0]}")


def test_served_none_mode_refuses_repository_control(client: tc.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.unload_model("simple")
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"
    assert client.is_model_ready("simple")


def test_served_explicit_load_and_unload(explicit_server: Any) -> None:
    with tc.InferenceServerClient(explicit_server.grpc_address) as client:
        assert not client.is_model_ready("echo_int16")
        client.load_model("echo_int16")
        x = np.array([[-32768, 32767]], dtype=np.int16)
        np.testing.assert_array_equal(
            client.infer("echo_int16", [infer_input("INPUT", x, "INT16")]).as_numpy("OUTPUT"), x
        )
        client.unload_model("echo_int16")
        assert not client.is_model_ready("echo_int16")
