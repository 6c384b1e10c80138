"""The HTTP/2 gRPC door (servelab.frontends.grpc.h2) driven by the stock tritonclient and grpc clients:
metadata and inference agree with the grpc.aio door, messages larger than every flow-control window go both
ways, errors keep their status, unknown methods answer UNIMPLEMENTED, gzip and deflate messages are inflated
(within the message limit), ModelStreamInfer streams, the message limit holds (unary and streamed),
concurrent callers each get their own answer, and a client that does not speak HTTP/2 is turned away
without harm to the others."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tc
from tritonclient.utils import InferenceServerException

from harness.clients import infer_input, simple_inputs
from harness.inprocess import make_dataplane, running_grpc_server
from harness.servers import running_server
from servelab.core.dataplane import DataPlane
from servelab.frontends.grpc.h2.server import H2Server, start_h2_server

A = np.arange(32, dtype=np.int32).reshape(2, 16)
B = np.full((2, 16), 3, dtype=np.int32)


class _Door:
    """start_h2_server on its own event loop in a background thread."""

    def __init__(self, dataplane: DataPlane, **kwargs: int) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="h2-door", daemon=True)
        self._thread.start()
        self.server: H2Server = asyncio.run_coroutine_threadsafe(
            start_h2_server(dataplane, "127.0.0.1", 0, **kwargs), self.loop).result(10)
        self.address = f"127.0.0.1:{self.server.port}"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(1.0), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


@pytest.fixture(scope="module")
def dataplane(test_repository: Path) -> Iterator[DataPlane]:
    dp = make_dataplane(test_repository, load=["simple", "echo_uint8"])
    yield dp
    dp.close()


@pytest.fixture(scope="module")
def door(dataplane: DataPlane) -> Iterator[_Door]:
    d = _Door(dataplane)
    yield d
    d.close()


def test_metadata_and_inference_agree_with_the_grpc_aio_door(door: _Door, test_repository: Path) -> None:
    with running_grpc_server(test_repository, load=["simple"]) as aio, tc.InferenceServerClient(aio.address) as ref, \
            tc.InferenceServerClient(door.address) as client:  # fmt: skip
        assert client.is_server_live() and client.is_model_ready("simple")
        assert client.get_model_metadata("simple") == ref.get_model_metadata("simple")
        assert client.get_model_config("simple").config.name == "simple"
        got = client.infer("simple", simple_inputs(tc, A, B), request_id="req-7")
        want = ref.infer("simple", simple_inputs(tc, A, B), request_id="req-7")
        for name in ("OUTPUT0", "OUTPUT1"):
            np.testing.assert_array_equal(got.as_numpy(name), want.as_numpy(name))
        np.testing.assert_array_equal(got.as_numpy("OUTPUT0"), A + B)
        assert got.get_response().id == "req-7"


def test_messages_larger_than_the_windows_go_both_ways(door: _Door) -> None:
    big = np.random.default_rng(3).integers(0, 255, size=(1, 3_000_000), dtype=np.uint8)  # > 1 MiB, > 64 KiB
    with tc.InferenceServerClient(door.address) as client:
        for _ in range(2):
            out = client.infer("echo_uint8", [infer_input(tc, "INPUT", big)]).as_numpy("OUTPUT")
            np.testing.assert_array_equal(out, big)


def test_a_servelab_error_keeps_its_status_and_message(door: _Door) -> None:
    with tc.InferenceServerClient(door.address) as client:
        with pytest.raises(InferenceServerException) as info:
            client.infer("no_such_model", simple_inputs(tc, A, B))
        assert info.value.status() == "StatusCode.NOT_FOUND"
        assert "no_such_model" in info.value.message()
        with pytest.raises(InferenceServerException) as info:
            client.infer("simple", simple_inputs(tc, A[:, :8], B[:, :8]))
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert client.is_server_live()


def test_unknown_methods_are_unimplemented(door: _Door) -> None:
    with grpc.insecure_channel(door.address) as channel:
        with pytest.raises(grpc.RpcError) as info:
            channel.unary_unary("/inference.GRPCInferenceService/NoSuchMethod")(b"", timeout=10)
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "NoSuchMethod" in (info.value.details() or "")


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests_are_inflated_unary_and_streamed(door: _Door, algorithm: str) -> None:
    """tritonclient's compression_algorithm, on infer and on a stream: the answers are the uncompressed ones."""
    big_a = np.arange(2 * 16, dtype=np.int32).reshape(2, 16)
    with tc.InferenceServerClient(door.address) as client:
        got = client.infer("simple", simple_inputs(tc, big_a, B), compression_algorithm=algorithm)
        np.testing.assert_array_equal(got.as_numpy("OUTPUT0"), big_a + B)
        np.testing.assert_array_equal(got.as_numpy("OUTPUT1"), big_a - B)
        answers: list[object] = []
        client.start_stream(callback=lambda result, error: answers.append(error or result),
                            compression_algorithm=algorithm)  # fmt: skip
        for _ in range(3):
            client.async_stream_infer("simple", simple_inputs(tc, A, B))
        client.stop_stream()
        assert len(answers) == 3, answers
        for answer in answers:
            assert not isinstance(answer, InferenceServerException), answer
            np.testing.assert_array_equal(answer.as_numpy("OUTPUT0"), A + B)  # type: ignore[attr-defined]


def test_a_compressed_request_that_inflates_past_the_limit_is_refused(dataplane: DataPlane) -> None:
    """A small gzip message that inflates past max_message_bytes: RESOURCE_EXHAUSTED, the door serves on."""
    small = _Door(dataplane, max_message_bytes=64 * 1024)
    try:
        with grpc.insecure_channel(small.address, compression=grpc.Compression.Gzip) as channel:
            call = channel.unary_unary("/inference.GRPCInferenceService/ServerLive")
            with pytest.raises(grpc.RpcError) as info:
                call(b"\x00" * (1024 * 1024), timeout=10)  # ~1 KiB compressed, 1 MiB inflated
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "limit" in (info.value.details() or "")
            assert call(b"", timeout=10) == b"\x08\x01"  # ServerLiveResponse(live=True)
    finally:
        small.close()


def test_a_stream_answers_every_request_in_one_call(door: _Door) -> None:
    """tritonclient's ModelStreamInfer: many requests on one stream, each answered with its own id and sums,
    a bad one answered with its error while the stream goes on, and a message larger than the windows."""
    answers: list[tuple[object, object]] = []
    done = threading.Event()

    def callback(result: object, error: object) -> None:
        answers.append((result, error))
        if len(answers) == 12:
            done.set()

    big = np.random.default_rng(5).integers(0, 255, size=(1, 2_500_000), dtype=np.uint8)
    with tc.InferenceServerClient(door.address) as client:
        client.start_stream(callback=callback)
        for i in range(10):
            a = np.full((1, 16), i, dtype=np.int32)
            client.async_stream_infer("simple", simple_inputs(tc, a, B[:1]), request_id=f"s{i}")
        client.async_stream_infer("simple", simple_inputs(tc, A[:, :8], B[:, :8]), request_id="bad")
        client.async_stream_infer("echo_uint8", [infer_input(tc, "INPUT", big)], request_id="big")
        assert done.wait(30), f"{len(answers)} of 12 answers"
        client.stop_stream()
    by_id = {}
    for result, error in answers:
        if error is not None:
            by_id["bad"] = error
        else:
            by_id[result.get_response().id] = result  # type: ignore[attr-defined]
    for i in range(10):
        np.testing.assert_array_equal(by_id[f"s{i}"].as_numpy("OUTPUT0"), np.full((1, 16), i + 3))  # type: ignore[attr-defined]
    np.testing.assert_array_equal(by_id["big"].as_numpy("OUTPUT"), big)  # type: ignore[attr-defined]
    assert "bad" in by_id


def test_a_streamed_message_over_the_limit_ends_the_stream(dataplane: DataPlane) -> None:
    door = _Door(dataplane, max_message_bytes=4096)
    try:
        with grpc.insecure_channel(door.address) as channel:
            stream = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")
            with pytest.raises(grpc.RpcError) as info:
                list(stream(iter([b"\x0a" + bytes([127]) + b"x" * 127, b"y" * 9000]), timeout=10))
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "4096" in (info.value.details() or "")
        with tc.InferenceServerClient(door.address) as client:
            assert client.is_server_live()
    finally:
        door.close()


def test_message_over_the_limit_is_resource_exhausted(dataplane: DataPlane) -> None:
    door = _Door(dataplane, max_message_bytes=4096)
    try:
        with tc.InferenceServerClient(door.address) as client:
            small = np.zeros((1, 100), dtype=np.uint8)
            assert client.infer("echo_uint8", [infer_input(tc, "INPUT", small)]).as_numpy("OUTPUT").shape == (1, 100)
            with pytest.raises(InferenceServerException) as info:
                client.infer("echo_uint8", [infer_input(tc, "INPUT", np.zeros((1, 8192), dtype=np.uint8))])
            assert info.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
            assert client.is_server_live()
    finally:
        door.close()


def test_concurrent_callers_each_get_their_own_answer(door: _Door) -> None:
    def call(i: int) -> bool:
        with tc.InferenceServerClient(door.address) as client:
            a = np.full((1, 16), i, dtype=np.int32)
            for _ in range(20):
                got = client.infer("simple", simple_inputs(tc, a, B[:1]))
                if not np.array_equal(got.as_numpy("OUTPUT0"), a + 3):
                    return False
        return True

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(call, range(8)))


def test_a_client_that_does_not_speak_http2_is_turned_away(door: _Door) -> None:
    host, port = door.address.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = b""
        while chunk := sock.recv(4096):  # the server closes after its GOAWAY
            reply += chunk
    kinds, pos = [], 0
    while pos + 9 <= len(reply):
        kinds.append(reply[pos + 3])
        pos += 9 + int.from_bytes(reply[pos:pos + 3], "big")
    assert kinds[-1] == 7 and b"HTTP/2" in reply  # GOAWAY, saying why
    with tc.InferenceServerClient(door.address) as client:
        assert client.is_server_live()


@pytest.mark.parametrize("door_flag", ["h2", "grpcio"])
def test_servelab_serve_serves_either_door(door_flag: str, test_repository: Path, tmp_path: Path) -> None:
    """Through ``servelab serve`` (uvloop): both doors answer unary, streaming and gzip-compressed calls alike."""
    with running_server(test_repository, tmp_path, door_flag, "--grpc-door", door_flag, "--load-model", "simple",
                        "--model-control-mode", "explicit") as server, \
            tc.InferenceServerClient(server.grpc_address) as client:  # fmt: skip
        np.testing.assert_array_equal(client.infer("simple", simple_inputs(tc, A, B)).as_numpy("OUTPUT0"), A + B)
        answers: list[object] = []
        client.start_stream(callback=lambda result, error: answers.append(error or result))
        for _ in range(3):
            client.async_stream_infer("simple", simple_inputs(tc, A, B))
        client.stop_stream()  # waits for the answers
        assert len(answers) == 3 and all(not isinstance(a, InferenceServerException) for a in answers), answers
        got = client.infer("simple", simple_inputs(tc, A, B), compression_algorithm="gzip")
        np.testing.assert_array_equal(got.as_numpy("OUTPUT1"), A - B)
