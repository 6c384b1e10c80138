"""Repository control (explicit mode): index, load (with a config override), unload, over tritonclient."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from harness.servers import ServerProcess


@pytest.fixture(scope="module")
def client(explicit_server: ServerProcess) -> httpclient.InferenceServerClient:
    c = httpclient.InferenceServerClient(explicit_server.http_address)
    yield c
    c.close()


def _states(client: httpclient.InferenceServerClient) -> dict[str, str]:
    return {row["name"]: row.get("state", "") for row in client.get_model_repository_index()}


def test_index_shows_loaded_and_unloaded(client: httpclient.InferenceServerClient) -> None:
    states = _states(client)
    assert states["simple"] == "READY"
    assert states["echo_int8"] != "READY"
    with httpx.Client() as http:
        ready = http.post(f"http://{client._parsed_url.netloc}/v2/repository/index", json={"ready": True}).json()
    assert {row["name"] for row in ready} == {"simple"}


def test_load_infer_unload(client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException, match="not ready|unknown model"):
        client.get_model_metadata("echo_int8")
    client.load_model("echo_int8")
    assert client.is_model_ready("echo_int8")
    data = np.array([[1, -2, 3]], dtype=np.int8)
    inp = httpclient.InferInput("INPUT", [1, 3], "INT8").set_data_from_numpy(data)
    np.testing.assert_array_equal(client.infer("echo_int8", [inp]).as_numpy("OUTPUT"), data)
    client.unload_model("echo_int8")
    assert not client.is_model_ready("echo_int8")
    with pytest.raises(InferenceServerException, match="not ready"):
        client.infer("echo_int8", [inp])


def test_load_with_config_override(client: httpclient.InferenceServerClient) -> None:
    config = {
        "name": "echo_int64",
        "platform": "onnxruntime_onnx",
        "max_batch_size": 2,
        "input": [{"name": "INPUT", "data_type": "TYPE_INT64", "dims": [-1]}],
        "output": [{"name": "OUTPUT", "data_type": "TYPE_INT64", "dims": [-1]}],
    }
    client.load_model("echo_int64", config=json.dumps(config))
    try:
        assert client.get_model_config("echo_int64")["max_batch_size"] == 2
        data = np.ones((3, 2), dtype=np.int64)
        inp = httpclient.InferInput("INPUT", [3, 2], "INT64").set_data_from_numpy(data)
        with pytest.raises(InferenceServerException, match="batch size 3; expected 1 to 2"):
            client.infer("echo_int64", [inp])
    finally:
        client.unload_model("echo_int64")


def test_load_errors(client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException, match="not a valid ModelConfig JSON"):
        client.load_model("echo_int32", config="{not json")
    with pytest.raises(InferenceServerException, match="no_such_model"):
        client.load_model("no_such_model")
    assert client.is_server_ready()
