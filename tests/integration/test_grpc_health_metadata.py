"""gRPC health, metadata, config and the non-offered RPCs against `servelab serve`, driven by stock
tritonclient (sync and aio) and the generated stubs."""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

import grpc
import pytest
import tritonclient.grpc as tc
import tritonclient.grpc.aio as tca
from tritonclient.utils import InferenceServerException

from harness.servers import ServerProcess
from servelab.protocol import grpc_service_pb2 as pb
from servelab.protocol import grpc_service_pb2_grpc as pb_grpc
from servelab.protocol import health_pb2, health_pb2_grpc


def test_live_ready_and_model_ready(grpc_client: tc.InferenceServerClient) -> None:
    assert grpc_client.is_server_live()
    assert grpc_client.is_server_ready()
    assert grpc_client.is_model_ready("simple")
    assert grpc_client.is_model_ready("simple", "1")
    assert grpc_client.is_model_ready("mlp_onnx")
    assert not grpc_client.is_model_ready("simple", "7")
    assert not grpc_client.is_model_ready("no_such_model")


def test_server_metadata(grpc_client: tc.InferenceServerClient) -> None:
    meta = grpc_client.get_server_metadata(as_json=True)
    assert meta["name"] == "servelab"
    assert meta["version"]
    assert {"classification", "model_repository", "statistics", "model_configuration"} <= set(
        meta["extensions"]
    )


def test_model_metadata(grpc_client: tc.InferenceServerClient) -> None:
    meta = grpc_client.get_model_metadata("simple", as_json=True)
    assert meta["name"] == "simple"
    assert meta["versions"] == ["1"]
    assert meta["platform"] == "onnxruntime_onnx"
    assert [(t["name"], t["datatype"], t["shape"]) for t in meta["inputs"]] == [
        ("INPUT0", "INT32", ["-1", "16"]),
        ("INPUT1", "INT32", ["-1", "16"]),
    ]
    assert [t["name"] for t in meta["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    bytes_meta = grpc_client.get_model_metadata("echo_bytes", as_json=True)
    assert [(t["name"], t["datatype"]) for t in bytes_meta["inputs"]] == [("INPUT", "BYTES")]


def test_model_metadata_unknown_model_is_not_found(grpc_client: tc.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as info:
        grpc_client.get_model_metadata("no_such_model")
    assert info.value.status() == "StatusCode.NOT_FOUND"
    assert "no_such_model" in info.value.message()


def test_model_config(grpc_client: tc.InferenceServerClient) -> None:
    config = grpc_client.get_model_config("classify", as_json=True)["config"]
    assert config["name"] == "classify"
    assert config["max_batch_size"] == 8
    assert config["input"][0]["data_type"] == "TYPE_FP32"
    assert config["output"][0]["label_filename"] == "labels.txt"
    with pytest.raises(InferenceServerException) as info:
        grpc_client.get_model_config("no_such_model")
    assert info.value.status() == "StatusCode.NOT_FOUND"


def test_aio_health_metadata_and_config(server: ServerProcess, grpc_client: tc.InferenceServerClient) -> None:
    async def run() -> dict[str, Any]:
        async with tca.InferenceServerClient(server.grpc_address) as client:
            assert await client.is_server_live()
            assert await client.is_server_ready()
            assert await client.is_model_ready("echo_fp32")
            assert not await client.is_model_ready("no_such_model")
            meta = await client.get_model_metadata("echo_bytes", as_json=True)
            assert meta["inputs"][0]["datatype"] == "BYTES"
            assert (await client.get_server_metadata(as_json=True))["name"] == "servelab"
            return (await client.get_model_config("simple", as_json=True))["config"]

    config = asyncio.run(run())
    assert config == grpc_client.get_model_config("simple", as_json=True)["config"]  # aio and sync agree
    assert [t["name"] for t in config["input"]] == ["INPUT0", "INPUT1"]


def test_health_check_via_generated_stub(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.grpc_address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        serving = health_pb2.HealthCheckResponse.SERVING
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == serving
        request = health_pb2.HealthCheckRequest(service="inference.GRPCInferenceService")
        assert health.Check(request, timeout=5).status == serving
        assert health.Check(health_pb2.HealthCheckRequest(service="simple"), timeout=5).status == serving
        with pytest.raises(grpc.RpcError) as info:
            health.Check(health_pb2.HealthCheckRequest(service="no_such_model"), timeout=5)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert "no_such_model" in info.value.details()


def test_health_check_not_serving_for_unloaded_model(
    explicit_server: ServerProcess, explicit_grpc_client: tc.InferenceServerClient
) -> None:
    assert not explicit_grpc_client.is_model_ready("echo_uint32")  # in the repository, never loaded
    with grpc.insecure_channel(explicit_server.grpc_address) as channel:
        request = health_pb2.HealthCheckRequest(service="echo_uint32")
        status = health_pb2_grpc.HealthStub(channel).Check(request, timeout=5).status
    assert status == health_pb2.HealthCheckResponse.NOT_SERVING


def test_shared_memory_trace_and_logging_answer(grpc_stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    """The extensions' RPCs are served (their behaviour: test_shared_memory.py, test_triton_conventions.py)."""
    assert grpc_stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest(), timeout=5).regions == {}
    assert grpc_stub.TraceSetting(pb.TraceSettingRequest(), timeout=5).settings["trace_level"].value == ["OFF"]
    assert grpc_stub.LogSettings(pb.LogSettingsRequest(), timeout=5).settings["log_info"].bool_param
    with pytest.raises(grpc.RpcError) as info:
        grpc_stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(name="r", key="/servelab-none",
                                                                                  byte_size=8), timeout=5)  # fmt: skip
    assert info.value.code() == grpc.StatusCode.NOT_FOUND and "Unable to open shared memory region" in info.value.details()


@pytest.mark.skipif(importlib.util.find_spec("cuda") is not None, reason="cuda-python is installed here")
def test_tritonclient_cuda_shared_memory_register_reports_unimplemented(grpc_client: tc.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as info:
        grpc_client.register_cuda_shared_memory("r", b"\0" * 64, 0, 64)
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"


def test_server_name_triton_for_clients_that_check_it(server_factory: Any) -> None:
    """Triton's own simple_*_health_metadata.py examples require the name 'triton': `--server-name` gives it
    on both protocols; a name that is not one word is refused by the settings."""
    import pydantic
    import tritonclient.http as th

    from servelab.config.settings import ServerSettings

    server = server_factory("named", "--server-name", "triton")
    try:
        with tc.InferenceServerClient(server.grpc_address) as client:
            assert client.get_server_metadata(as_json=True)["name"] == "triton"
        assert th.InferenceServerClient(server.http_address).get_server_metadata()["name"] == "triton"
    finally:
        server.stop()
    with pytest.raises(pydantic.ValidationError, match="server_name"):
        ServerSettings(server_name="not one word")
