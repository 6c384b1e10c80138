"""Stopping the server that start_grpc_server returns: an in-flight request still gets its answer,
new requests are refused meanwhile. The request is held in flight by the ``gated`` Python model, which
waits at a socket this test owns (so it works whether the backend runs in-process or in a worker)."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tc
from grpc_harness import add_gated_model, build_test_repository, running_server

from servelab.protocol import grpc_service_pb2 as pb
from servelab.protocol import grpc_service_pb2_grpc as pb_grpc


@pytest.fixture
def gate() -> Iterator[socket.socket]:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(30)
    yield listener
    listener.close()


def test_stop_with_grace_finishes_in_flight_and_refuses_new(tmp_path: Path, gate: socket.socket) -> None:
    repo = build_test_repository(tmp_path / "repo")
    add_gated_model(repo, gate.getsockname()[1])
    with running_server(repo, load=["gated"]) as server:
        results: list[Any] = []
        x = np.array([[1.5, -2.0]], dtype=np.float32)

        def call() -> None:
            with tc.InferenceServerClient(server.address) as client:
                inp = tc.InferInput("INPUT0", [1, 2], "FP32")
                inp.set_data_from_numpy(x)
                try:
                    results.append(client.infer("gated", [inp], client_timeout=60).as_numpy("OUTPUT0"))
                except Exception as exc:  # recorded and asserted below
                    results.append(exc)

        worker = threading.Thread(target=call)
        worker.start()
        held, _ = gate.accept()  # the model is executing and waits for our byte
        with held:
            assert held.recv(16) == b"entered"
            assert server.server is not None
            stopping = asyncio.run_coroutine_threadsafe(server.server.stop(grace=30), server.loop)
            assert _refused_soon(server.address), "a new request was still served after stop() began"
            assert not stopping.done()
            held.sendall(b"g")
        worker.join(60)
        stopping.result(timeout=30)
    assert len(results) == 1
    assert isinstance(results[0], np.ndarray), results[0]
    np.testing.assert_array_equal(results[0], x)


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
