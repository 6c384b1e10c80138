"""gRPC health, metadata, config and the non-offered RPCs, driven by stock tritonclient (sync and aio)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import tritonclient.grpc as tc
import tritonclient.grpc.aio as tca
from grpc_harness import GrpcTestServer, build_test_repository, running_server
from tritonclient.utils import InferenceServerException

from servelab.frontends.grpc import bound_port, start_grpc_server
from servelab.frontends.grpc.errors import rpc
from servelab.frontends.grpc.servicer import InferenceServicer
from servelab.protocol import grpc_service_pb2 as pb
from servelab.protocol import grpc_service_pb2_grpc as pb_grpc
from servelab.protocol import health_pb2, health_pb2_grpc


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


def test_live_ready_and_model_ready(client: tc.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("simple")
    assert client.is_model_ready("simple", "1")
    assert not client.is_model_ready("simple", "7")
    assert not client.is_model_ready("no_such_model")


def test_server_metadata(client: tc.InferenceServerClient) -> None:
    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "servelab"
    assert meta["version"]
    assert {"classification", "model_repository", "statistics", "model_configuration"} <= set(
        meta["extensions"]
    )


def test_model_metadata(client: tc.InferenceServerClient) -> None:
    meta = client.get_model_metadata("simple", as_json=True)
    assert meta["name"] == "simple"
    assert meta["versions"] == ["1"]
    assert meta["platform"] == "onnxruntime_onnx"
    assert [(t["name"], t["datatype"], t["shape"]) for t in meta["inputs"]] == [
        ("INPUT0", "INT32", ["-1", "16"]),
        ("INPUT1", "INT32", ["-1", "16"]),
    ]
    assert [t["name"] for t in meta["outputs"]] == ["OUTPUT0", "OUTPUT1"]


def test_model_metadata_unknown_model_is_not_found(client: tc.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.get_model_metadata("no_such_model")
    assert info.value.status() == "StatusCode.NOT_FOUND"
    assert "no_such_model" in info.value.message()


def test_model_config(client: tc.InferenceServerClient) -> None:
    config = client.get_model_config("scores", as_json=True)["config"]
    assert config["name"] == "scores"
    assert config["max_batch_size"] == 8
    assert config["input"][0]["data_type"] == "TYPE_FP32"
    assert config["output"][0]["label_filename"] == "labels.txt"
    with pytest.raises(InferenceServerException) as info:
        client.get_model_config("no_such_model")
    assert info.value.status() == "StatusCode.NOT_FOUND"


def test_aio_health_metadata_and_config(server: GrpcTestServer) -> None:
    async def run() -> None:
        client = tca.InferenceServerClient(server.address)
        try:
            assert await client.is_server_live()
            assert await client.is_server_ready()
            assert await client.is_model_ready("echo_fp32")
            assert not await client.is_model_ready("no_such_model")
            meta = await client.get_model_metadata("echo_bytes", as_json=True)
            assert meta["inputs"][0]["datatype"] == "BYTES"
            assert (await client.get_server_metadata(as_json=True))["name"] == "servelab"
            config = await client.get_model_config("simple", as_json=True)
            assert (
                config["config"]["max_batch_size"] == server.dataplane.model_config("simple").max_batch_size
            )
            assert [t["name"] for t in config["config"]["input"]] == ["INPUT0", "INPUT1"]
        finally:
            await client.close()

    asyncio.run(run())


def test_health_check_via_generated_stub(server: GrpcTestServer) -> None:
    with grpc.insecure_channel(server.address) as channel:
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


def test_health_check_not_serving_for_unloaded_model(tmp_path: Path) -> None:
    repo = build_test_repository(tmp_path / "repo")
    with running_server(repo, load=["simple"]) as s, grpc.insecure_channel(s.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        status = health.Check(health_pb2.HealthCheckRequest(service="echo_fp32"), timeout=5).status
        assert status == health_pb2.HealthCheckResponse.NOT_SERVING


def test_shared_memory_trace_and_logging_are_unimplemented(server: GrpcTestServer) -> None:
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        calls = [
            (stub.SystemSharedMemoryStatus, pb.SystemSharedMemoryStatusRequest(), "shared memory"),
            (
                stub.SystemSharedMemoryRegister,
                pb.SystemSharedMemoryRegisterRequest(name="r"),
                "shared memory",
            ),
            (stub.CudaSharedMemoryRegister, pb.CudaSharedMemoryRegisterRequest(name="r"), "shared memory"),
            (stub.TraceSetting, pb.TraceSettingRequest(), "trace"),
            (stub.LogSettings, pb.LogSettingsRequest(), "logging"),
        ]
        for method, request, words in calls:
            with pytest.raises(grpc.RpcError) as info:
                method(request, timeout=5)
            assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
            assert words in info.value.details()


def test_tritonclient_shared_memory_status_reports_unimplemented(client: tc.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.get_system_shared_memory_status()
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"


class _Broken(InferenceServicer):
    """A servicer whose ServerLive hits a bug, to see how an unexpected exception leaves the server."""

    @rpc
    async def ServerLive(
        self, request: pb.ServerLiveRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerLiveResponse:
        raise RuntimeError("secret internal detail")


def test_unexpected_exception_is_internal_with_request_id(
    server: GrpcTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def run() -> tuple[grpc.StatusCode, str]:
        srv = grpc.aio.server()
        pb_grpc.add_GRPCInferenceServiceServicer_to_server(_Broken(server.dataplane), srv)
        port = srv.add_insecure_port("127.0.0.1:0")
        await srv.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = pb_grpc.GRPCInferenceServiceStub(channel)
                try:
                    await stub.ServerLive(pb.ServerLiveRequest(), timeout=5)
                except grpc.aio.AioRpcError as exc:
                    return exc.code(), exc.details() or ""
                raise AssertionError("ServerLive should have failed")
        finally:
            await srv.stop(0)

    with caplog.at_level(logging.ERROR, logger="servelab.grpc"):
        code, details = asyncio.run(run())
    assert code == grpc.StatusCode.INTERNAL
    assert "request id" in details
    assert "secret internal detail" not in details and "Traceback" not in details
    request_id = details.split("request id ")[1].split(")")[0]
    logged = [r for r in caplog.records if request_id in r.getMessage()]
    assert logged and logged[0].exc_info is not None


def test_port_zero_binds_a_free_port(server: GrpcTestServer) -> None:
    async def run() -> int:
        srv = await start_grpc_server(server.dataplane, "127.0.0.1", 0)
        try:
            port = bound_port(srv)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = pb_grpc.GRPCInferenceServiceStub(channel)
                assert (await stub.ServerLive(pb.ServerLiveRequest(), timeout=5)).live
            return port
        finally:
            await srv.stop(0)

    port = asyncio.run(run())
    assert port > 0 and port != server.port


def test_binding_a_taken_port_is_an_os_error(server: GrpcTestServer) -> None:
    async def run() -> None:
        await start_grpc_server(server.dataplane, "127.0.0.1", server.port)

    with pytest.raises(OSError, match="cannot bind"):
        asyncio.run(run())
