"""`servelab serve --tfserving-config models.config`: TF Serving's own clients and REST examples get the
answers TensorFlow computes.

One SavedModel (predict, classify and regress signatures) in two versions labelled ``stable`` (1) and
``canary`` (2), served by every version (``lin``) and by the latest only (``lin_latest``), with a
batching parameters file. The clients are ``tensorflow-serving-api``'s stubs and plain HTTP written as
TF Serving's REST API page shows it; the references come from TensorFlow running the same SavedModel in
this process. The last tests change the served state: a new version folder, then a config reload.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from tfserving_harness import (
    BATCHING,
    LABELS,
    Reference,
    TfServingServer,
    build_saved_model,
    example,
    models_config,
)

from harness.servers import stopping

tf = pytest.importorskip("tensorflow")
grpc = pytest.importorskip("grpc")
pytest.importorskip("tensorflow_serving", reason="pip install --no-deps tensorflow-serving-api (the Makefile does)")
from tensorflow_serving.apis import (  # noqa: E402
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

X = np.array([[1.0, 2.0, 3.0], [0.5, -0.5, 0.25], [2.0, 0.0, -1.0]], np.float32)
DEADLINE_S = 90.0


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """<root>/models.config, <root>/lin/{1,2}/saved_model.pb and the batching parameters file."""
    root = tmp_path_factory.mktemp("tfserving")
    for version in (1, 2):
        build_saved_model(tf, root / "lin" / str(version), version)
    _save_tf2_module(root / "affine" / "1")
    entries = [
        {"name": "lin", "base_path": str(root / "lin"), "policy": "all {}", "labels": {"stable": 1, "canary": 2}},
        {"name": "lin_latest", "base_path": "lin"},  # relative: read from the config file's folder
        {"name": "affine", "base_path": str(root / "affine")},
    ]
    (root / "models.config").write_text(models_config(entries))
    (root / "batching.config").write_text(BATCHING)
    return root


def _save_tf2_module(folder: Path) -> None:
    """A TF2 SavedModel (tf.saved_model.save of a tf.Module), the common kind today."""

    class Affine(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="features")])
        def serve(self, features: Any) -> dict[str, Any]:
            return {"doubled": features * 2.0 + 1.0, "count": tf.reduce_sum(tf.ones_like(features), axis=1)}

    module = Affine()
    tf.saved_model.save(module, str(folder), signatures={"serving_default": module.serve})


@pytest.fixture(scope="module")
def reference(store: Path) -> Reference:
    return Reference(tf, store / "lin")


@pytest.fixture(scope="module")
def server(store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TfServingServer]:
    flags = ["--batching-parameters-file", str(store / "batching.config"), "--file-system-poll-wait-seconds", "1"]
    with stopping(TfServingServer(store / "models.config", tmp_path_factory.mktemp("logs") / "tfserving.log",
                                  flags).start()) as s:
        yield s


@pytest.fixture(scope="module")
def channel(server: TfServingServer) -> Iterator[Any]:
    with grpc.insecure_channel(server.grpc_address) as ch:
        yield ch


@pytest.fixture(scope="module")
def stub(channel: Any) -> Any:
    return prediction_service_pb2_grpc.PredictionServiceStub(channel)


@pytest.fixture(scope="module")
def http(server: TfServingServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=30) as c:
        yield c


def _predict_request(model: str, **spec: Any) -> Any:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    for key, value in spec.items():
        if key == "version":
            request.model_spec.version.value = value
        else:
            setattr(request.model_spec, key, value)
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(X))
    return request


def _close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


# ----- gRPC: tensorflow-serving-api's PredictionServiceStub -----
@pytest.mark.parametrize(("spec", "version"), [
    ({}, 2), ({"version": 1}, 1), ({"version_label": "stable"}, 1), ({"version_label": "canary"}, 2),
    ({"signature_name": "serving_default", "version": 2}, 2),
])
def test_grpc_predict_matches_tensorflow(stub: Any, reference: Reference, spec: dict[str, Any], version: int) -> None:
    response = stub.Predict(_predict_request("lin", **spec), timeout=30)
    assert response.model_spec.name == "lin" and response.model_spec.version.value == version
    assert response.model_spec.signature_name == "serving_default"
    want = reference.predict(version, X)
    assert set(response.outputs) == set(want)
    for key, value in want.items():
        _close(tf.make_ndarray(response.outputs[key]), value)
    assert list(response.outputs["total"].float_val) == pytest.approx(want["total"].tolist())


def test_grpc_predict_output_filter_and_latest_policy(stub: Any, reference: Reference) -> None:
    request = _predict_request("lin_latest")
    request.output_filter.append("total")
    response = stub.Predict(request, timeout=30)
    assert set(response.outputs) == {"total"} and response.model_spec.version.value == 2
    _close(tf.make_ndarray(response.outputs["total"]), reference.predict(2, X)["total"])
    with pytest.raises(grpc.RpcError) as err:
        stub.Predict(_predict_request("lin_latest", version=1), timeout=30)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_grpc_classify_and_regress_match_tensorflow(stub: Any, reference: Reference) -> None:
    rows = [[1.0, 2.0, 3.0], [0.5, 0.5, -2.0]]
    examples = [example(tf, r) for r in rows]
    serialized = [e.SerializeToString() for e in examples]
    for label, version in (("stable", 1), ("canary", 2)):
        request = classification_pb2.ClassificationRequest()
        request.model_spec.name, request.model_spec.signature_name = "lin", "classify"
        request.model_spec.version_label = label
        request.input.example_list.examples.extend(examples)
        response = stub.Classify(request, timeout=30)
        want = reference.examples(version, "classify", serialized)
        assert response.model_spec.version.value == version and response.model_spec.signature_name == "classify"
        for i, classifications in enumerate(response.result.classifications):
            assert [c.label for c in classifications.classes] == [b.decode() for b in want["classes"][i]]
            _close(np.array([c.score for c in classifications.classes], np.float32), want["scores"][i])
        request = regression_pb2.RegressionRequest()
        request.model_spec.name, request.model_spec.signature_name = "lin", "regress"
        request.model_spec.version.value = version
        request.input.example_list.examples.extend(examples)
        response = stub.Regress(request, timeout=30)
        _close(np.array([r.value for r in response.result.regressions], np.float32),
               reference.examples(version, "regress", serialized)["outputs"])


def test_grpc_examples_with_context(stub: Any, reference: Reference) -> None:
    """Context features merge into each example (TF Serving's ExampleListWithContext)."""
    request = regression_pb2.RegressionRequest()
    request.model_spec.name, request.model_spec.signature_name = "lin", "regress"
    listed = request.input.example_list_with_context
    listed.context.CopyFrom(example(tf, [9.0, 9.0, 9.0]))
    listed.examples.add()  # only the context: x = 9, 9, 9
    listed.examples.append(example(tf, [1.0, 0.0, 0.0]))  # its own x wins
    response = stub.Regress(request, timeout=30)
    want = reference.examples(2, "regress", [example(tf, [9.0] * 3).SerializeToString(),
                                             example(tf, [1.0, 0.0, 0.0]).SerializeToString()])
    _close(np.array([r.value for r in response.result.regressions], np.float32), want["outputs"])


def test_grpc_metadata_is_the_saved_models_signatures(stub: Any, store: Path) -> None:
    from tensorflow.core.protobuf import saved_model_pb2

    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = "lin"
    request.model_spec.version_label = "stable"
    request.metadata_field.append("signature_def")
    response = stub.GetModelMetadata(request, timeout=30)
    assert response.model_spec.name == "lin" and response.model_spec.version.value == 1
    got = get_model_metadata_pb2.SignatureDefMap()
    assert response.metadata["signature_def"].Unpack(got)
    saved = saved_model_pb2.SavedModel.FromString((store / "lin" / "1" / "saved_model.pb").read_bytes())
    want = saved.meta_graphs[0].signature_def
    assert set(got.signature_def) == set(want) == {"serving_default", "classify", "regress"}
    for key in want:
        assert got.signature_def[key] == want[key], key


def test_grpc_errors(stub: Any) -> None:
    cases = [
        (_predict_request("missing"), stub.Predict, grpc.StatusCode.NOT_FOUND, "Servable not found"),
        (_predict_request("lin", version_label="nope"), stub.Predict, grpc.StatusCode.NOT_FOUND, "version label"),
        (_predict_request("lin", signature_name="other"), stub.Predict, grpc.StatusCode.INVALID_ARGUMENT,
         "not found in signature def"),
        (_predict_request("lin", version=7), stub.Predict, grpc.StatusCode.NOT_FOUND, "Specific(lin, 7)"),
    ]
    wrong = classification_pb2.ClassificationRequest()
    wrong.model_spec.name = "lin"  # serving_default is a predict signature
    wrong.input.example_list.examples.append(example(tf, [1.0, 2.0, 3.0]))
    cases.append((wrong, stub.Classify, grpc.StatusCode.INVALID_ARGUMENT, "tensorflow/serving/classify"))
    bad_dtype = _predict_request("lin")
    bad_dtype.inputs["x"].CopyFrom(tf.make_tensor_proto(X.astype(np.float64)))
    cases.append((bad_dtype, stub.Predict, grpc.StatusCode.INVALID_ARGUMENT, "DT_DOUBLE"))
    for request, method, code, text in cases:
        with pytest.raises(grpc.RpcError) as err:
            method(request, timeout=30)
        assert err.value.code() == code and text in err.value.details(), err.value.details()


def test_grpc_batched_requests_in_parallel(stub: Any, reference: Reference) -> None:
    """The batching parameters file: concurrent requests share batches and each gets its own rows."""
    rows = [X[i % 3: i % 3 + 1] for i in range(16)]

    def one(x: np.ndarray) -> np.ndarray:
        request = _predict_request("lin")
        request.inputs["x"].CopyFrom(tf.make_tensor_proto(x))
        return tf.make_ndarray(stub.Predict(request, timeout=30).outputs["probs"])

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, rows))
    for x, got in zip(rows, results, strict=True):
        _close(got, reference.predict(2, x)["probs"])


def test_a_tf2_saved_model(stub: Any, http: httpx.Client, store: Path) -> None:
    features = np.arange(8, dtype=np.float32).reshape(2, 4)
    want = tf.saved_model.load(str(store / "affine" / "1")).signatures["serving_default"](features=tf.constant(features))
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "affine"
    request.inputs["features"].CopyFrom(tf.make_tensor_proto(features))
    response = stub.Predict(request, timeout=30)
    for key, value in want.items():
        np.testing.assert_array_equal(tf.make_ndarray(response.outputs[key]), value.numpy())
    r = http.post("/v1/models/affine:predict", json={"instances": features.tolist()})
    assert r.status_code == 200, r.text
    np.testing.assert_array_equal(np.array([p["doubled"] for p in r.json()["predictions"]], np.float32),
                                  want["doubled"].numpy())


# ----- REST, as TF Serving's REST API page writes it -----
def test_rest_status_by_version_and_label(http: httpx.Client) -> None:
    ok = {"error_code": "OK", "error_message": ""}
    assert http.get("/v1/models/lin").json() == {"model_version_status": [
        {"version": "1", "state": "AVAILABLE", "status": ok}, {"version": "2", "state": "AVAILABLE", "status": ok}]}
    assert http.get("/v1/models/lin/versions/1").json()["model_version_status"][0]["version"] == "1"
    assert http.get("/v1/models/lin/labels/canary").json()["model_version_status"][0]["version"] == "2"
    r = http.get("/v1/models/half")
    assert r.status_code == 404 and r.json() == {"error": "Servable not found for request: Latest(half)"}


def test_rest_metadata(http: httpx.Client) -> None:
    meta = http.get("/v1/models/lin/labels/stable/metadata").json()
    assert meta["model_spec"] == {"name": "lin", "signature_name": "", "version": "1"}
    sigs = meta["metadata"]["signature_def"]["signature_def"]
    assert {k: v["method_name"] for k, v in sigs.items()} == {
        "serving_default": "tensorflow/serving/predict", "classify": "tensorflow/serving/classify",
        "regress": "tensorflow/serving/regress"}
    x = sigs["serving_default"]["inputs"]["x"]
    assert x["dtype"] == "DT_FLOAT" and [d["size"] for d in x["tensor_shape"]["dim"]] == ["-1", "3"]


def test_rest_predict_row_and_columnar(http: httpx.Client, reference: Reference) -> None:
    want = reference.predict(2, X)
    r = http.post("/v1/models/lin:predict", json={"instances": X.tolist()})
    assert r.status_code == 200, r.text
    predictions = r.json()["predictions"]
    _close(np.array([p["probs"] for p in predictions], np.float32), want["probs"])
    _close(np.array([p["total"] for p in predictions], np.float32), want["total"])
    r = http.post("/v1/models/lin/labels/stable:predict", json={"signature_name": "serving_default",
                                                                "inputs": {"x": X.tolist()}})
    assert r.status_code == 200, r.text
    _close(np.array(r.json()["outputs"]["probs"], np.float32), reference.predict(1, X)["probs"])
    r = http.post("/v1/models/lin/versions/1:predict", json={"instances": [{"x": [1.0, 2.0, 3.0]}]})
    assert r.status_code == 200 and r.json()["predictions"][0]["total"] == pytest.approx(6.0)


def test_rest_classify_and_regress(http: httpx.Client, reference: Reference) -> None:
    rows = [[1.0, 2.0, 3.0], [0.5, 0.5, -2.0]]
    serialized = [example(tf, r).SerializeToString() for r in rows]
    body = {"signature_name": "classify", "examples": [{"x": r} for r in rows]}
    r = http.post("/v1/models/lin/labels/canary:classify", json=body)
    assert r.status_code == 200, r.text
    want = reference.examples(2, "classify", serialized)
    results = r.json()["results"]
    assert [[c[0] for c in row] for row in results] == [list(LABELS)] * 2
    _close(np.array([[c[1] for c in row] for row in results], np.float32), want["scores"])
    r = http.post("/v1/models/lin/versions/1:regress", json={"signature_name": "regress", "examples": [{"x": r} for r in rows]})
    assert r.status_code == 200, r.text
    _close(np.array(r.json()["results"], np.float32), reference.examples(1, "regress", serialized)["outputs"])
    r = http.post("/v1/models/lin:regress", json={"signature_name": "regress", "context": {"x": [1.0, 1.0, 1.0]},
                                                  "examples": [{}]})
    assert r.json()["results"] == pytest.approx([12.0])  # (1 + 2 + 3) * version 2
    r = http.post("/v1/models/lin:classify", json={"examples": [{"x": rows[0]}]})
    assert r.status_code == 400 and "tensorflow/serving/classify" in r.json()["error"]


def test_batching_parameters_became_dynamic_batching(http: httpx.Client) -> None:
    config = http.get("/v2/models/lin/config").json()
    assert config["max_batch_size"] == 8
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 2000  # a number, as Triton writes it
    assert config["dynamic_batching"]["preferred_batch_size"] == [4, 8]


# ----- the served state changes: a new version folder, then a config reload -----
def _wait(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)  # poll interval while the server polls its files, not synchronisation
    raise AssertionError(f"not within {DEADLINE_S} s: {what}")


def _versions(channel: Any, model: str) -> dict[int, int]:
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = model
    try:
        response = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(request, timeout=30)
    except grpc.RpcError:
        return {}
    return {s.version: s.state for s in response.model_version_status}


def test_a_new_version_folder_is_served(store: Path, channel: Any, stub: Any) -> None:
    staging = store / "staging3"
    build_saved_model(tf, staging, 3)
    shutil.move(str(staging), str(store / "lin" / "3"))  # appears whole, as TF Serving recommends
    available = get_model_status_pb2.ModelVersionStatus.AVAILABLE
    _wait(lambda: _versions(channel, "lin") == {1: available, 2: available, 3: available}, "lin serves 1, 2, 3")
    _wait(lambda: _versions(channel, "lin_latest") == {3: available}, "lin_latest serves 3 only")
    response = stub.Predict(_predict_request("lin_latest"), timeout=30)
    assert response.model_spec.version.value == 3
    _close(tf.make_ndarray(response.outputs["total"]), Reference(tf, store / "lin").predict(3, X)["total"])


def test_handle_reload_config_request(store: Path, channel: Any, stub: Any) -> None:
    models = model_service_pb2_grpc.ModelServiceStub(channel)
    request = model_management_pb2.ReloadConfigRequest()
    entry = request.config.model_config_list.config.add(name="lin", base_path=str(store / "lin"),
                                                        model_platform="tensorflow")
    entry.model_version_policy.specific.versions.extend([1, 3])
    entry.version_labels["stable"] = 1
    entry.version_labels["canary"] = 3
    response = models.HandleReloadConfigRequest(request, timeout=120)
    assert response.status.error_code == 0
    available = get_model_status_pb2.ModelVersionStatus.AVAILABLE
    assert _versions(channel, "lin") == {1: available, 3: available}
    assert _versions(channel, "lin_latest") == {}  # dropped from the config
    answer = stub.Predict(_predict_request("lin", version_label="canary"), timeout=30)
    assert answer.model_spec.version.value == 3
    outside = model_management_pb2.ReloadConfigRequest()
    outside.config.model_config_list.config.add(name="evil", base_path="/etc", model_platform="tensorflow")
    with pytest.raises(grpc.RpcError) as err:
        models.HandleReloadConfigRequest(outside, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "base_path" in err.value.details()
