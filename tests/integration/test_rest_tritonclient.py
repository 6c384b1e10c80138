"""Stock tritonclient.http (sync) against a real server: health, metadata, config, infer, extensions."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import ServerProcess
from repo_builder import CLASS_LABELS, NUMERIC_DTYPES, echo_name
from tritonclient.utils import InferenceServerException, np_to_triton_dtype, triton_to_np_dtype


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> httpclient.InferenceServerClient:
    c = httpclient.InferenceServerClient(server.http_address, concurrency=4)
    yield c
    c.close()


def _simple_inputs(binary: bool) -> tuple[list[httpclient.InferInput], np.ndarray, np.ndarray]:
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.ones((2, 16), dtype=np.int32)
    inputs = [httpclient.InferInput("INPUT0", [2, 16], "INT32"), httpclient.InferInput("INPUT1", [2, 16], "INT32")]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return inputs, a, b


def test_health_and_server_metadata(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "servelab"
    assert "binary_tensor_data" in meta["extensions"]
    assert "classification" in meta["extensions"]


def test_model_metadata_config_ready(client: httpclient.InferenceServerClient) -> None:
    assert client.is_model_ready("simple")
    assert client.is_model_ready("simple", "1")
    assert not client.is_model_ready("simple", "7")
    assert not client.is_model_ready("no_such_model")
    meta = client.get_model_metadata("simple")
    assert meta["name"] == "simple" and meta["versions"] == ["1"]
    assert meta["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]}
    config = client.get_model_config("simple", "1")
    assert config["name"] == "simple" and config["max_batch_size"] > 0
    assert [i["name"] for i in config["input"]] == ["INPUT0", "INPUT1"]


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_infer_simple(client: httpclient.InferenceServerClient, binary: bool) -> None:
    inputs, a, b = _simple_inputs(binary)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary),
               httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary)]
    result = client.infer("simple", inputs, outputs=outputs, request_id="req-7")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert response["id"] == "req-7" and response["model_name"] == "simple"
    assert ("binary_data_size" in (response["outputs"][0].get("parameters") or {})) is binary


def test_requested_outputs_subset_and_mixed(client: httpclient.InferenceServerClient) -> None:
    inputs, a, b = _simple_inputs(True)
    outputs = [httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)]
    result = client.infer("simple", inputs, outputs=outputs)
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.as_numpy("OUTPUT0") is None


def _sample(datatype: str) -> np.ndarray:
    if datatype == "BOOL":
        return np.array([[True, False, True], [False, False, True]])
    if datatype == "BF16":
        return np.array([[1.5, -2.25, 3.0], [0.0, 1e3, -7.5]], dtype=ml_dtypes.bfloat16)
    dtype = np.dtype(triton_to_np_dtype(datatype))
    return (np.arange(6).reshape(2, 3) * 3 + 1).astype(dtype)


@pytest.mark.parametrize("datatype", [*NUMERIC_DTYPES, "BYTES"])
@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_every_datatype_round_trips(client: httpclient.InferenceServerClient, datatype: str, binary: bool) -> None:
    if datatype == "BF16" and not binary:
        pytest.skip("tritonclient refuses BF16 as JSON (binary only); JSON BF16 is covered in test_rest_errors")
    data = (
        np.array([[b"a", b"\x00\xffbin"], [b"", "ünï".encode()]], dtype=object)
        if datatype == "BYTES"
        else _sample(datatype)
    )
    if datatype == "BYTES" and not binary:
        data = np.array([[b"a", b"bc"], [b"", "ünï".encode()]], dtype=object)
    assert np_to_triton_dtype(data.dtype) == datatype
    inp = httpclient.InferInput("INPUT", list(data.shape), datatype)
    inp.set_data_from_numpy(data, binary_data=binary)
    out = httpclient.InferRequestedOutput("OUTPUT", binary_data=binary)
    result = client.infer(echo_name(datatype), [inp], outputs=[out])
    got = result.as_numpy("OUTPUT")
    assert result.get_response()["outputs"][0]["datatype"] == datatype
    if datatype == "BYTES" and not binary:
        got = np.array([s.encode() if isinstance(s, str) else s for s in got.reshape(-1)], dtype=object).reshape(got.shape)
    np.testing.assert_array_equal(got, data)


def test_classification(client: httpclient.InferenceServerClient) -> None:
    scores = np.array([[0.1, 0.7, 0.05, 0.15], [0.9, 0.0, 0.06, 0.04]], dtype=np.float32)
    inp = httpclient.InferInput("INPUT", [2, 4], "FP32").set_data_from_numpy(scores)
    out = httpclient.InferRequestedOutput("OUTPUT", binary_data=True, class_count=2)
    result = client.infer("classify", [inp], outputs=[out])
    top = result.as_numpy("OUTPUT")
    assert top.shape == (2, 2)
    first = [t.decode().split(":") for t in top[0]]
    assert [(f[1], f[2]) for f in first] == [("1", CLASS_LABELS[1]), ("3", CLASS_LABELS[3])]
    assert float(first[0][0]) == pytest.approx(0.7)
    assert top[1][0].decode().endswith(f":0:{CLASS_LABELS[0]}")


def test_statistics_count_requests(client: httpclient.InferenceServerClient) -> None:
    before = client.get_inference_statistics("echo_int16")["model_stats"][0]["inference_stats"]["success"]["count"]
    data = np.array([[1, 2]], dtype=np.int16)
    for _ in range(3):
        client.infer("echo_int16", [httpclient.InferInput("INPUT", [1, 2], "INT16").set_data_from_numpy(data)])
    stats = client.get_inference_statistics("echo_int16")["model_stats"][0]
    assert stats["name"] == "echo_int16" and stats["version"] == "1"
    assert stats["inference_stats"]["success"]["count"] == before + 3
    everything = client.get_inference_statistics()["model_stats"]
    assert {"simple", "echo_int16", "classify"} <= {s["name"] for s in everything}


def test_errors_surface_as_exceptions(client: httpclient.InferenceServerClient) -> None:
    inp = httpclient.InferInput("INPUT", [1, 2], "INT32").set_data_from_numpy(np.array([[1, 2]], dtype=np.int32))
    with pytest.raises(InferenceServerException, match="datatype INT32; expected INT16"):
        client.infer("echo_int16", [inp])
    with pytest.raises(InferenceServerException, match="unknown model 'nope'"):
        client.get_model_metadata("nope")
    with pytest.raises(InferenceServerException, match="explicit"):
        client.load_model("simple")


def test_repository_index_lists_models(client: httpclient.InferenceServerClient) -> None:
    index = client.get_model_repository_index()
    names = {row["name"] for row in index}
    assert {"simple", "classify", "echo_bytes", "slow"} <= names
    assert all(row["state"] == "READY" for row in index)
