"""gRPC repository control (index, load with a config override, unload) on an explicit-mode server,
the statistics extension, and the refusals of a server whose control mode is 'none'."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tc
import tritonclient.grpc.aio as tca
from grpc_harness import GrpcTestServer, build_test_repository, running_server
from tritonclient.utils import InferenceServerException

from servelab.config.settings import ControlMode
from servelab.protocol import grpc_service_pb2 as pb
from servelab.protocol import grpc_service_pb2_grpc as pb_grpc


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_test_repository(tmp_path_factory.mktemp("grpc") / "repo")


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[GrpcTestServer]:
    """Explicit mode; only some models loaded at start."""
    with running_server(repo, mode=ControlMode.EXPLICIT, load=["simple", "counted", "echo_fp32"]) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: GrpcTestServer) -> Iterator[tc.InferenceServerClient]:
    c = tc.InferenceServerClient(server.address)
    yield c
    c.close()


def echo(client: tc.InferenceServerClient, model: str, values: list[float]) -> np.ndarray:
    x = np.array([values], dtype=np.float32)
    inp = tc.InferInput("INPUT0", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return client.infer(model, [inp]).as_numpy("OUTPUT0")


def test_repository_index(server: GrpcTestServer, client: tc.InferenceServerClient) -> None:
    rows = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
    assert rows["simple"]["state"] == "READY" and rows["simple"]["version"] == "1"
    assert "echo_bytes" in rows and rows["echo_bytes"].get("state", "") != "READY"
    with grpc.insecure_channel(server.address) as channel:
        ready = pb_grpc.GRPCInferenceServiceStub(channel).RepositoryIndex(
            pb.RepositoryIndexRequest(ready=True)
        )
    assert {m.name for m in ready.models} >= {"simple", "counted", "echo_fp32"}
    assert all(m.state == "READY" for m in ready.models)


def test_load_infer_unload_cycle(client: tc.InferenceServerClient) -> None:
    assert not client.is_model_ready("echo_fp64")
    client.load_model("echo_fp64")
    assert client.is_model_ready("echo_fp64")
    x = np.array([[1.5, -2.0]], dtype=np.float64)
    inp = tc.InferInput("INPUT0", [1, 2], "FP64")
    inp.set_data_from_numpy(x)
    np.testing.assert_array_equal(client.infer("echo_fp64", [inp]).as_numpy("OUTPUT0"), x)

    client.unload_model("echo_fp64")
    assert not client.is_model_ready("echo_fp64")
    with pytest.raises(InferenceServerException) as info:
        client.infer("echo_fp64", [inp])
    assert info.value.status() == "StatusCode.UNAVAILABLE"
    rows = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
    assert rows["echo_fp64"]["state"] == "UNAVAILABLE"


def test_load_with_config_override(client: tc.InferenceServerClient) -> None:
    config = client.get_model_config("echo_fp32", as_json=True)["config"]
    config["max_batch_size"] = 2
    client.load_model("echo_fp32", config=json.dumps(config))
    assert client.get_model_config("echo_fp32", as_json=True)["config"]["max_batch_size"] == 2
    x = np.zeros((3, 4), dtype=np.float32)
    inp = tc.InferInput("INPUT0", [3, 4], "FP32")
    inp.set_data_from_numpy(x)
    with pytest.raises(InferenceServerException) as info:
        client.infer("echo_fp32", [inp])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT" and "max_batch_size" in info.value.message()


def test_load_errors(client: tc.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.load_model("no_such_model")
    assert info.value.status() == "StatusCode.NOT_FOUND" and "no_such_model" in info.value.message()
    with pytest.raises(InferenceServerException) as info:
        client.load_model("echo_int8", config="{not json")
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT" and "ModelConfig JSON" in info.value.message()
    with pytest.raises(InferenceServerException) as info:
        client.load_model("echo_int8", config="{}", files={"file:1/model.onnx": b"\x00"})
    # file: overrides are accepted (into a private folder, tests/integration/test_trust_boundary.py); these bytes are no model
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT" and "failed to load" in info.value.message()
    with pytest.raises(InferenceServerException) as info:
        client.unload_model("never_seen_model")
    assert info.value.status() == "StatusCode.NOT_FOUND"
    assert client.is_server_live()


def test_load_with_unknown_parameter_is_invalid(server: GrpcTestServer) -> None:
    request = pb.RepositoryModelLoadRequest(model_name="echo_int8")
    request.parameters["colour"].string_param = "blue"
    with grpc.insecure_channel(server.address) as channel, pytest.raises(grpc.RpcError) as info:
        pb_grpc.GRPCInferenceServiceStub(channel).RepositoryModelLoad(request, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "colour" in (info.value.details() or "")


def test_aio_load_and_unload(server: GrpcTestServer) -> None:
    async def run() -> tuple[bool, bool]:
        client = tca.InferenceServerClient(server.address)
        try:
            await client.load_model("echo_int16")
            loaded = await client.is_model_ready("echo_int16")
            await client.unload_model("echo_int16", unload_dependents=True)
            return loaded, await client.is_model_ready("echo_int16")
        finally:
            await client.close()

    assert asyncio.run(run()) == (True, False)


def test_statistics_count_the_requests_sent(client: tc.InferenceServerClient) -> None:
    x = np.array([[1, 2, 3]], dtype=np.int32)
    inp = tc.InferInput("INPUT0", [1, 3], "INT32")
    inp.set_data_from_numpy(x)
    for _ in range(5):
        client.infer("counted", [inp])
    bad = tc.InferInput("INPUT0", [1, 3], "INT32")
    bad.set_data_from_numpy(x)
    bad._raw_content = b"\x00" * 4  # a size mismatch the client would not send itself
    for _ in range(2):
        with pytest.raises(InferenceServerException):
            client.infer("counted", [bad])
    wrong_shape = tc.InferInput("INPUT0", [3], "INT32")
    wrong_shape.set_data_from_numpy(x.reshape(3))
    with pytest.raises(InferenceServerException):
        client.infer("counted", [wrong_shape])

    (row,) = client.get_inference_statistics("counted", as_json=True)["model_stats"]
    assert row["name"] == "counted" and row["version"] == "1"
    stats = row["inference_stats"]
    assert int(stats["success"]["count"]) == 5
    assert int(stats["fail"]["count"]) == 1  # decode errors never reach the model; validation errors do
    assert int(row["inference_count"]) == 5 and int(row["execution_count"]) == 5
    assert int(row["last_inference"]) > 0
    assert [int(b["batch_size"]) for b in row["batch_stats"]] == [1]

    everything = client.get_inference_statistics(as_json=True)["model_stats"]
    assert {"simple", "counted"} <= {r["name"] for r in everything}
    with pytest.raises(InferenceServerException) as info:
        client.get_inference_statistics("never_seen_model")
    assert info.value.status() == "StatusCode.NOT_FOUND"


def test_statistics_aio(server: GrpcTestServer) -> None:
    async def run() -> pb.ModelStatisticsResponse:
        client = tca.InferenceServerClient(server.address)
        try:
            return await client.get_inference_statistics("simple", "1")
        finally:
            await client.close()

    response = asyncio.run(run())
    assert [(s.name, s.version) for s in response.model_stats] == [("simple", "1")]


def test_control_mode_none_refuses_load_and_unload(repo: Path) -> None:
    with running_server(repo, mode=ControlMode.NONE) as s, tc.InferenceServerClient(s.address) as client:
        for call in (lambda: client.load_model("simple"), lambda: client.unload_model("simple")):
            with pytest.raises(InferenceServerException) as info:
                call()
            assert info.value.status() == "StatusCode.UNIMPLEMENTED"
            assert "--model-control-mode explicit" in info.value.message()
        assert client.is_model_ready("simple")
