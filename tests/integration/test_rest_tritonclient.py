"""Stock tritonclient.http (sync) against a real server: health, metadata, config, infer, extensions."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from harness.clients import infer_input, simple_inputs
from harness.data import sample
from harness.models import DTYPES
from harness.repository import CLASS_LABELS, echo_name

A = np.arange(32, dtype=np.int32).reshape(2, 16)
B = np.ones((2, 16), dtype=np.int32)


def test_health_and_server_metadata(http_client: httpclient.InferenceServerClient) -> None:
    assert http_client.is_server_live()
    assert http_client.is_server_ready()
    meta = http_client.get_server_metadata()
    assert meta["name"] == "servelab"
    assert "binary_tensor_data" in meta["extensions"]
    assert "classification" in meta["extensions"]


def test_model_metadata_config_ready(http_client: httpclient.InferenceServerClient) -> None:
    assert http_client.is_model_ready("simple")
    assert http_client.is_model_ready("simple", "1")
    assert not http_client.is_model_ready("simple", "7")
    assert not http_client.is_model_ready("no_such_model")
    meta = http_client.get_model_metadata("simple")
    assert meta["name"] == "simple" and meta["versions"] == ["1"]
    assert meta["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]}
    config = http_client.get_model_config("simple", "1")
    assert config["name"] == "simple" and config["max_batch_size"] > 0
    assert [i["name"] for i in config["input"]] == ["INPUT0", "INPUT1"]


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_infer_simple(http_client: httpclient.InferenceServerClient, binary: bool) -> None:
    outputs = [httpclient.InferRequestedOutput(name, binary_data=binary) for name in ("OUTPUT0", "OUTPUT1")]
    result = http_client.infer(
        "simple", simple_inputs(httpclient, A, B, binary=binary), outputs=outputs, request_id="req-7"
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)
    response = result.get_response()
    assert response["id"] == "req-7" and response["model_name"] == "simple"
    assert ("binary_data_size" in (response["outputs"][0].get("parameters") or {})) is binary


def test_requested_outputs_subset_and_mixed(http_client: httpclient.InferenceServerClient) -> None:
    outputs = [httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)]
    result = http_client.infer("simple", simple_inputs(httpclient, A, B, binary=True), outputs=outputs)
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)
    assert result.as_numpy("OUTPUT0") is None


@pytest.mark.parametrize("datatype", list(DTYPES))
@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_every_datatype_round_trips(http_client: httpclient.InferenceServerClient, datatype: str, binary: bool) -> None:
    if datatype == "BF16" and not binary:
        pytest.skip("tritonclient refuses BF16 as JSON (binary only); JSON BF16 is covered in test_rest_errors")
    data = sample(datatype, any_bytes=binary)  # JSON strings carry UTF-8 text only
    out = httpclient.InferRequestedOutput("OUTPUT", binary_data=binary)
    result = http_client.infer(echo_name(datatype), [infer_input(httpclient, "INPUT", data, binary=binary)], outputs=[out])
    got = result.as_numpy("OUTPUT")
    assert result.get_response()["outputs"][0]["datatype"] == datatype
    if datatype == "BYTES" and not binary:
        got = np.array([s.encode() if isinstance(s, str) else s for s in got.reshape(-1)], dtype=object).reshape(got.shape)
    assert got.dtype == data.dtype
    np.testing.assert_array_equal(got, data)


def test_classification(http_client: httpclient.InferenceServerClient) -> None:
    scores = np.array([[0.1, 0.7, 0.05, 0.15], [0.9, 0.0, 0.06, 0.04]], dtype=np.float32)
    out = httpclient.InferRequestedOutput("OUTPUT", binary_data=True, class_count=2)
    result = http_client.infer("classify", [infer_input(httpclient, "INPUT", scores)], outputs=[out])
    top = result.as_numpy("OUTPUT")
    assert top.shape == (2, 2)
    first = [t.decode().split(":") for t in top[0]]
    assert [(f[1], f[2]) for f in first] == [("1", CLASS_LABELS[1]), ("3", CLASS_LABELS[3])]
    assert float(first[0][0]) == pytest.approx(0.7)
    assert top[1][0].decode().endswith(f":0:{CLASS_LABELS[0]}")


def test_statistics_count_requests(http_client: httpclient.InferenceServerClient) -> None:
    def successes() -> int:
        return int(http_client.get_inference_statistics("echo_int16")["model_stats"][0]["inference_stats"]["success"]["count"])

    before = successes()
    for _ in range(3):
        http_client.infer("echo_int16", [infer_input(httpclient, "INPUT", np.array([[1, 2]], dtype=np.int16))])
    stats = http_client.get_inference_statistics("echo_int16")["model_stats"][0]
    assert stats["name"] == "echo_int16" and stats["version"] == "1"
    assert successes() == before + 3
    everything = http_client.get_inference_statistics()["model_stats"]
    assert {"simple", "echo_int16", "classify"} <= {s["name"] for s in everything}


def test_errors_surface_as_exceptions(http_client: httpclient.InferenceServerClient) -> None:
    inp = infer_input(httpclient, "INPUT", np.array([[1, 2]], dtype=np.int32))
    with pytest.raises(InferenceServerException, match="datatype INT32; expected INT16"):
        http_client.infer("echo_int16", [inp])
    with pytest.raises(InferenceServerException, match="Request for unknown model: 'nope'"):
        http_client.get_model_metadata("nope")
    with pytest.raises(InferenceServerException, match="explicit"):
        http_client.load_model("simple")


def test_repository_index_lists_models(http_client: httpclient.InferenceServerClient) -> None:
    index = http_client.get_model_repository_index()
    names = {row["name"] for row in index}
    assert {"simple", "classify", "counted", "echo_bytes", "mlp_onnx", *map(echo_name, DTYPES)} <= names
    assert all(row["state"] == "READY" for row in index)
