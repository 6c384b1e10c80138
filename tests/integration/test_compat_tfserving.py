"""TF Serving REST clients, written the way TF Serving's REST API docs show them."""

from __future__ import annotations

import httpx


def test_model_status(rest: httpx.Client) -> None:
    r = rest.get("/v1/models/simple")
    assert r.status_code == 200
    assert r.json() == {
        "model_version_status": [{"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}]
    }
    assert rest.get("/v1/models/simple/versions/1").status_code == 200
    r = rest.get("/v1/models/half")
    assert r.status_code == 404 and r.json() == {"error": "Servable not found for request: Latest(half)"}


def test_metadata(rest: httpx.Client) -> None:
    meta = rest.get("/v1/models/simple/metadata").json()
    assert meta["model_spec"]["name"] == "simple" and meta["model_spec"]["version"] == "1"
    sig = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert sig["inputs"]["INPUT0"]["dtype"] == "DT_INT32"
    assert [d["size"] for d in sig["inputs"]["INPUT0"]["tensor_shape"]["dim"]] == ["-1", "16"]
    assert set(sig["outputs"]) == {"OUTPUT0", "OUTPUT1"}


def test_predict_row_format(rest: httpx.Client) -> None:
    body = {"signature_name": "serving_default",
            "instances": [{"INPUT0": list(range(16)), "INPUT1": [1] * 16}, {"INPUT0": [5] * 16, "INPUT1": [5] * 16}]}
    r = rest.post("/v1/models/simple:predict", json=body)
    assert r.status_code == 200, r.text
    preds = r.json()["predictions"]
    assert preds[0]["OUTPUT0"] == [i + 1 for i in range(16)] and preds[1]["OUTPUT1"] == [0] * 16
    r = rest.post("/v1/models/classify/versions/1:predict", json={"instances": [[1.0, 2.0, 3.0, 4.0]]})
    assert r.status_code == 200 and r.json() == {"predictions": [[1.0, 2.0, 3.0, 4.0]]}


def test_predict_columnar_format_and_b64(rest: httpx.Client) -> None:
    r = rest.post("/v1/models/simple:predict", json={"inputs": {"INPUT0": [[2] * 16], "INPUT1": [[1] * 16]}})
    assert r.status_code == 200, r.text
    assert r.json()["outputs"] == {"OUTPUT0": [[3] * 16], "OUTPUT1": [[1] * 16]}
    r = rest.post("/v1/models/echo_bytes:predict", json={"inputs": [[{"b64": "aGVsbG8="}, "world"]]})
    assert r.status_code == 200, r.text
    assert r.json() == {"outputs": [["hello", "world"]]}


def test_predict_errors(rest: httpx.Client) -> None:
    r = rest.post("/v1/models/simple:predict", json={"instances": [], "inputs": {}})
    assert r.status_code == 400 and "exactly one of 'instances'" in r.json()["error"]
    r = rest.post("/v1/models/simple:predict", json={"signature_name": "other", "instances": [1]})
    assert r.status_code == 400 and "'other' not found in signature def" in r.json()["error"]
    r = rest.post("/v1/models/simple:predict", json={"instances": [{"INPUT0": [1] * 16}]})
    assert r.status_code == 400 and "expected the inputs" in r.json()["error"]
    r = rest.post("/v1/models/missing:predict", json={"instances": [1]})
    assert r.status_code == 404 and r.json() == {"error": "Servable not found for request: Latest(missing)"}
    # an ONNX model has one predict signature: :classify needs a classification signature (a SavedModel's)
    r = rest.post("/v1/models/simple:classify", json={"examples": [{"x": 1.0}]})
    assert r.status_code == 400 and "method_name to be tensorflow/serving/classify" in r.json()["error"]
