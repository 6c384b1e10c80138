"""gRPC repository control (index, load with a config override, unload) on the explicit-mode server,
the statistics extension, and the refusals of the server whose control mode is 'none'. Every model a
test loads on the shared explicit server is unloaded again."""

from __future__ import annotations

import asyncio
import json

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tc
import tritonclient.grpc.aio as tca
from tritonclient.utils import InferenceServerException

from harness.clients import infer_input
from harness.servers import ServerProcess
from servelab.protocol import grpc_service_pb2 as pb
from servelab.protocol import grpc_service_pb2_grpc as pb_grpc


def test_repository_index(explicit_server: ServerProcess, explicit_grpc_client: tc.InferenceServerClient) -> None:
    rows = {m["name"]: m for m in explicit_grpc_client.get_model_repository_index(as_json=True)["models"]}
    assert rows["simple"]["state"] == "READY" and rows["simple"]["version"] == "1"
    assert "echo_bytes" in rows and rows["echo_bytes"].get("state", "") != "READY"
    with grpc.insecure_channel(explicit_server.grpc_address) as channel:
        ready = pb_grpc.GRPCInferenceServiceStub(channel).RepositoryIndex(pb.RepositoryIndexRequest(ready=True))
    assert "simple" in {m.name for m in ready.models}
    assert all(m.state == "READY" for m in ready.models)


def test_load_infer_unload_cycle(explicit_grpc_client: tc.InferenceServerClient) -> None:
    client = explicit_grpc_client
    assert not client.is_model_ready("echo_fp64")
    client.load_model("echo_fp64")
    assert client.is_model_ready("echo_fp64")
    inp = infer_input(tc, "INPUT", np.array([[1.5, -2.0]], dtype=np.float64))
    np.testing.assert_array_equal(client.infer("echo_fp64", [inp]).as_numpy("OUTPUT"), [[1.5, -2.0]])

    client.unload_model("echo_fp64")
    assert not client.is_model_ready("echo_fp64")
    with pytest.raises(InferenceServerException) as info:
        client.infer("echo_fp64", [inp])
    assert info.value.status() == "StatusCode.UNAVAILABLE"
    rows = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
    assert rows["echo_fp64"]["state"] == "UNAVAILABLE"


def test_load_with_config_override(explicit_grpc_client: tc.InferenceServerClient) -> None:
    client = explicit_grpc_client
    client.load_model("echo_fp32")
    try:
        config = client.get_model_config("echo_fp32", as_json=True)["config"]
        config["max_batch_size"] = 2
        client.load_model("echo_fp32", config=json.dumps(config))
        assert client.get_model_config("echo_fp32", as_json=True)["config"]["max_batch_size"] == 2
        with pytest.raises(InferenceServerException) as info:
            client.infer("echo_fp32", [infer_input(tc, "INPUT", np.zeros((3, 4), dtype=np.float32))])
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT" and "max_batch_size" in info.value.message()
    finally:
        client.unload_model("echo_fp32")


def test_load_errors(explicit_grpc_client: tc.InferenceServerClient) -> None:
    client = explicit_grpc_client
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
    assert client.is_server_live() and not client.is_model_ready("echo_int8")


def test_load_with_unknown_parameter_is_invalid(explicit_server: ServerProcess) -> None:
    request = pb.RepositoryModelLoadRequest(model_name="echo_int8")
    request.parameters["colour"].string_param = "blue"
    with grpc.insecure_channel(explicit_server.grpc_address) as channel, pytest.raises(grpc.RpcError) as info:
        pb_grpc.GRPCInferenceServiceStub(channel).RepositoryModelLoad(request, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "colour" in (info.value.details() or "")


def test_aio_load_and_unload(explicit_server: ServerProcess) -> None:
    async def run() -> tuple[bool, bool]:
        async with tca.InferenceServerClient(explicit_server.grpc_address) as client:
            await client.load_model("echo_int16")
            loaded = await client.is_model_ready("echo_int16")
            await client.unload_model("echo_int16", unload_dependents=True)
            return loaded, await client.is_model_ready("echo_int16")

    assert asyncio.run(run()) == (True, False)


def test_statistics_count_the_requests_sent(grpc_client: tc.InferenceServerClient) -> None:
    x = np.array([[1, 2, 3]], dtype=np.int32)
    for _ in range(5):
        grpc_client.infer("counted", [infer_input(tc, "INPUT", x)])
    bad = infer_input(tc, "INPUT", x)
    bad._raw_content = b"\x00" * 4  # a size mismatch the client would not send itself
    for _ in range(2):
        with pytest.raises(InferenceServerException):
            grpc_client.infer("counted", [bad])
    with pytest.raises(InferenceServerException):
        grpc_client.infer("counted", [infer_input(tc, "INPUT", x.reshape(3))])  # wrong shape

    (row,) = grpc_client.get_inference_statistics("counted", as_json=True)["model_stats"]
    assert row["name"] == "counted" and row["version"] == "1"
    stats = row["inference_stats"]
    assert int(stats["success"]["count"]) == 5
    assert int(stats["fail"]["count"]) == 1  # decode errors never reach the model; validation errors do
    assert int(row["inference_count"]) == 5 and int(row["execution_count"]) == 5
    assert int(row["last_inference"]) > 0
    assert [int(b["batch_size"]) for b in row["batch_stats"]] == [1]

    everything = grpc_client.get_inference_statistics(as_json=True)["model_stats"]
    assert {"simple", "counted"} <= {r["name"] for r in everything}
    with pytest.raises(InferenceServerException) as info:
        grpc_client.get_inference_statistics("never_seen_model")
    assert info.value.status() == "StatusCode.NOT_FOUND"


def test_statistics_aio(server: ServerProcess) -> None:
    async def run() -> pb.ModelStatisticsResponse:
        async with tca.InferenceServerClient(server.grpc_address) as client:
            return await client.get_inference_statistics("simple", "1")

    response = asyncio.run(run())
    assert [(s.name, s.version) for s in response.model_stats] == [("simple", "1")]


def test_control_mode_none_refuses_load_and_unload(grpc_client: tc.InferenceServerClient) -> None:
    for call in (lambda: grpc_client.load_model("simple"), lambda: grpc_client.unload_model("simple")):
        with pytest.raises(InferenceServerException) as info:
            call()
        assert info.value.status() == "StatusCode.UNIMPLEMENTED"
        assert "--model-control-mode explicit" in info.value.message()
    assert grpc_client.is_model_ready("simple")
