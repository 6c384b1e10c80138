"""gRPC ModelStreamInfer against `servelab serve`: several requests on one stream, a bad one answered
with an error while the others succeed, with tritonclient's sync start_stream/async_stream_infer and aio
stream_infer."""

from __future__ import annotations

import asyncio
import queue
from collections.abc import AsyncIterator
from typing import Any

import grpc
import numpy as np
import tritonclient.grpc as tc
import tritonclient.grpc.aio as tca
from tritonclient.utils import InferenceServerException

from harness.clients import simple_inputs as both_inputs
from harness.servers import ServerProcess
from servelab.protocol import grpc_service_pb2 as pb
from servelab.protocol import grpc_service_pb2_grpc as pb_grpc

REQUESTS = 6
BAD = 3  # index of the request that sends the wrong shape


def simple_inputs(i: int, module: Any = tc) -> tuple[list[Any], np.ndarray]:
    """INPUT0 = INPUT1 = i, one row; request :data:`BAD` is one element short."""
    a = np.full((1, 15 if i == BAD else 16), i, dtype=np.int32)
    return both_inputs(module, a, a), a


def test_sync_stream_answers_each_request_and_survives_a_bad_one(server: ServerProcess) -> None:
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with tc.InferenceServerClient(server.grpc_address) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            for i in range(REQUESTS):
                inputs, _ = simple_inputs(i)
                client.async_stream_infer("simple", inputs, request_id=f"r{i}")
            got = [answers.get(timeout=10) for _ in range(REQUESTS)]
        finally:
            client.stop_stream()
    ok = {r.get_response().id: r for r, e in got if e is None}
    errors = [e for r, e in got if e is not None]
    assert sorted(ok) == sorted(f"r{i}" for i in range(REQUESTS) if i != BAD)
    for rid, result in ok.items():
        i = int(rid[1:])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 2 * i, dtype=np.int32))
    assert len(errors) == 1
    assert isinstance(errors[0], InferenceServerException)
    assert "INPUT0" in errors[0].message() and "[1, 15]" in errors[0].message()


def test_aio_stream_infer(server: ServerProcess) -> None:
    async def requests() -> AsyncIterator[dict[str, Any]]:
        for i in range(REQUESTS):
            inputs, _ = simple_inputs(i, tca)
            yield {"model_name": "simple", "inputs": inputs, "request_id": f"a{i}"}
        yield {"model_name": "no_such_model", "inputs": simple_inputs(0, tca)[0], "request_id": "missing"}

    async def run() -> list[tuple[Any, Any]]:
        async with tca.InferenceServerClient(server.grpc_address) as client:
            results = []
            async for result, error in client.stream_infer(requests()):
                results.append((result, error))
                if len(results) == REQUESTS + 1:
                    break
            return results

    got = asyncio.run(run())
    ok = sorted(r.get_response().id for r, e in got if e is None)
    errors = [e.message() for r, e in got if e is not None]
    assert ok == sorted(f"a{i}" for i in range(REQUESTS) if i != BAD)
    assert len(errors) == 2
    assert any("no_such_model" in m for m in errors) and any("[1, 15]" in m for m in errors)


def test_stream_error_response_echoes_the_request_id(server: ServerProcess) -> None:
    """Read with the generated stub: the failed request's id and model come back beside error_message."""
    good = pb.ModelInferRequest(model_name="echo_fp32", id="good")
    good.inputs.add(name="INPUT", datatype="FP32", shape=[1, 2])
    good.raw_input_contents.append(np.ones((1, 2), dtype=np.float32).tobytes())
    bad = pb.ModelInferRequest(model_name="echo_fp32", id="bad")
    bad.inputs.add(name="INPUT", datatype="FP32", shape=[1, 2])
    bad.raw_input_contents.append(b"\x00" * 3)

    with grpc.insecure_channel(server.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        responses = list(stub.ModelStreamInfer(iter([good, bad, good]), timeout=10))
    assert len(responses) == 3
    by_id: dict[str, list[pb.ModelStreamInferResponse]] = {}
    for r in responses:
        by_id.setdefault(r.infer_response.id, []).append(r)
    assert [r.error_message for r in by_id["good"]] == ["", ""]
    assert by_id["good"][0].infer_response.raw_output_contents[0] == np.ones(2, dtype=np.float32).tobytes()
    (failed,) = by_id["bad"]
    assert "INPUT" in failed.error_message and "needs 8 bytes" in failed.error_message
    assert failed.infer_response.model_name == "echo_fp32"


def test_empty_stream_closes_cleanly(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        assert list(stub.ModelStreamInfer(iter([]), timeout=10)) == []


def test_many_stream_requests_are_answered_once_each(server: ServerProcess) -> None:
    count = 40
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with tc.InferenceServerClient(server.grpc_address) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            for i in range(count):
                inputs, _ = simple_inputs(i if i != BAD else 100)
                client.async_stream_infer("simple", inputs, request_id=str(i))
            got = [answers.get(timeout=10) for _ in range(count)]
        finally:
            client.stop_stream()
    assert all(e is None for _, e in got)
    ids = sorted(int(r.get_response().id) for r, _ in got)
    assert ids == list(range(count))
    for r, _ in got:
        i = int(r.get_response().id)
        expected = 2 * (i if i != BAD else 100)
        assert r.as_numpy("OUTPUT0").tolist() == [[expected] * 16]
