"""The server object that start_grpc_server returns, in this process (harness.inprocess): port 0 and a
taken port, the message limit, an unexpected exception in a servicer, and stopping with grace while a
request is held in flight by the ``gated`` model (it waits at a socket this test owns)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tc
from tritonclient.utils import InferenceServerException

from harness.clients import infer_input
from harness.gates import SocketGate
from harness.inprocess import GrpcTestServer, make_dataplane, running_grpc_server
from harness.repository import add_gated_model
from harness.servers import ServerProcess
from servelab.core.dataplane import DataPlane
from servelab.frontends.grpc import bound_port, start_grpc_server
from servelab.frontends.grpc.errors import rpc
from servelab.frontends.grpc.servicer import InferenceServicer
from servelab.protocol import grpc_service_pb2 as pb
from servelab.protocol import grpc_service_pb2_grpc as pb_grpc


@pytest.fixture(scope="module")
def dataplane(test_repository: Path) -> Iterator[DataPlane]:
    """The test repository with only ``simple`` loaded, for servers made by the tests themselves."""
    dp = make_dataplane(test_repository, load=["simple"])
    yield dp
    dp.close()


def test_port_zero_binds_a_free_port(dataplane: DataPlane, server: ServerProcess) -> None:
    async def run() -> int:
        srv = await start_grpc_server(dataplane, "127.0.0.1", 0)
        try:
            port = bound_port(srv)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = pb_grpc.GRPCInferenceServiceStub(channel)
                assert (await stub.ServerLive(pb.ServerLiveRequest(), timeout=5)).live
            return port
        finally:
            await srv.stop(0)

    port = asyncio.run(run())
    assert port > 0 and port != server.grpc_port


def test_binding_a_taken_port_is_an_os_error(dataplane: DataPlane, server: ServerProcess) -> None:
    async def run() -> None:
        await start_grpc_server(dataplane, "127.0.0.1", server.grpc_port)

    with pytest.raises(OSError, match="cannot bind"):
        asyncio.run(run())


def test_message_over_the_limit_is_resource_exhausted(test_repository: Path) -> None:
    with (
        running_grpc_server(test_repository, load=["echo_uint8"], max_message_bytes=4096) as s,
        tc.InferenceServerClient(s.address) as client,
    ):
        small = np.zeros((1, 100), dtype=np.uint8)
        assert client.infer("echo_uint8", [infer_input(tc, "INPUT", small)]).as_numpy("OUTPUT").shape == (1, 100)
        big = np.zeros((1, 8192), dtype=np.uint8)
        with pytest.raises(InferenceServerException) as info:
            client.infer("echo_uint8", [infer_input(tc, "INPUT", big)])
        assert info.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
        assert client.is_server_live()


class _Broken(InferenceServicer):
    """A servicer whose ServerLive hits a bug, to see how an unexpected exception leaves the server."""

    @rpc
    async def ServerLive(
        self, request: pb.ServerLiveRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerLiveResponse:
        raise RuntimeError("secret internal detail")


def test_unexpected_exception_is_internal_with_request_id(
    dataplane: DataPlane, caplog: pytest.LogCaptureFixture
) -> None:
    async def run() -> tuple[grpc.StatusCode, str]:
        srv = grpc.aio.server()
        pb_grpc.add_GRPCInferenceServiceServicer_to_server(_Broken(dataplane), srv)
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


def test_stop_with_grace_finishes_in_flight_and_refuses_new(tmp_path: Path, gate: SocketGate) -> None:
    repo = tmp_path / "repo"
    add_gated_model(repo, gate.port)
    x = np.array([[1.5, -2.0]], dtype=np.float32)
    with running_grpc_server(repo, load=["gated"]) as server:
        results: list[Any] = []
        worker = threading.Thread(target=_infer_into, args=(server, x, results))
        worker.start()
        with gate.wait_entered() as held:  # the model is executing and waits for our byte
            stopping = _stop_with_grace(server)
            assert _refused_soon(server.address), "a new request was still served after stop() began"
            assert not stopping.done()
            held.release()
        worker.join(60)
        stopping.result(timeout=30)
    assert len(results) == 1
    assert isinstance(results[0], np.ndarray), results[0]
    np.testing.assert_array_equal(results[0], x)


def _infer_into(server: GrpcTestServer, x: np.ndarray, results: list[Any]) -> None:
    with tc.InferenceServerClient(server.address) as client:
        try:
            results.append(client.infer("gated", [infer_input(tc, "INPUT", x)], client_timeout=60).as_numpy("OUTPUT"))
        except Exception as exc:  # recorded and asserted by the test
            results.append(exc)


def _stop_with_grace(server: GrpcTestServer) -> Any:
    assert server.server is not None
    return asyncio.run_coroutine_threadsafe(server.server.stop(grace=30), server.loop)


def _refused_soon(address: str, attempts: int = 100) -> bool:
    """True once a fresh ServerLive call is refused (the listener closes as stop() begins)."""
    for _ in range(attempts):
        with grpc.insecure_channel(address) as channel:
            try:
                pb_grpc.GRPCInferenceServiceStub(channel).ServerLive(pb.ServerLiveRequest(), timeout=2)
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.UNAVAILABLE:
                    return True
    return False
