"""`servelab import tfserving models.config --out REPO`: the Triton-layout repository serves the same answers.

The import of a two-version SavedModel (predict, classify, regress; labels stable/canary; TF Serving's
zero-padded version folder name) is served by plain `servelab serve REPO`; TF Serving's REST and gRPC
clients and an OIP client get what TensorFlow computes, and the report says Triton would load each model.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from google.protobuf import text_format
from tfserving_harness import BATCHING, Reference, build_saved_model, example, models_config

from harness.servers import ServerProcess, server_fixture
from servelab.protocol import model_config_pb2 as mc

tf = pytest.importorskip("tensorflow")
grpc = pytest.importorskip("grpc")
pytest.importorskip("tensorflow_serving", reason="pip install --no-deps tensorflow-serving-api (the Makefile does)")
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc  # noqa: E402

X = np.array([[1.0, 2.0, 3.0], [0.25, 0.5, -1.0]], np.float32)
FOLDERS = {1: "1", 2: "00000002"}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tfserving_src")
    for version, folder in FOLDERS.items():
        build_saved_model(tf, root / "lin" / folder, version)
    entry = {"name": "lin", "base_path": str(root / "lin"), "policy": "all {}", "labels": {"stable": 1, "canary": 2}}
    (root / "models.config").write_text(models_config([entry]))
    (root / "batching.config").write_text(BATCHING)
    return root


@pytest.fixture(scope="module")
def imported(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("imported") / "repo"
    cmd = [sys.executable, "-m", "servelab.cli", "import", "tfserving", str(source / "models.config"), "--out", str(out),
           "--batching-parameters-file", str(source / "batching.config"), "--report", str(out.parent / "report.md")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


server = server_fixture("imported", "imported")


@pytest.fixture(scope="module")
def reference(source: Path) -> Reference:
    return Reference(tf, source / "lin", FOLDERS)


def test_layout_and_report(source: Path, imported: Path) -> None:
    assert sorted(p.name for p in imported.iterdir()) == ["lin", "lin:classify", "lin:regress"]
    pb = imported / "lin" / "2" / "model.savedmodel" / "saved_model.pb"
    assert pb.samefile(source / "lin" / "00000002" / "saved_model.pb")  # hard-linked, not copied
    config = text_format.Parse((imported / "lin:classify" / "config.pbtxt").read_text(), mc.ModelConfig())
    assert config.platform == "tensorflow_savedmodel" and config.parameters["TF_SIGNATURE_DEF"].string_value == "classify"
    assert config.max_batch_size == 8 and list(config.dynamic_batching.preferred_batch_size) == [4, 8]
    assert list(config.input[0].dims) == [1] and config.input[0].HasField("reshape")  # Triton's form of [-1]
    report = (imported.parent / "report.md").read_text()
    for name in ("lin", "lin:classify", "lin:regress"):
        assert f"| {name} | lin |" in report and "| yes | yes |" in report.split(f"| {name} | lin |")[1].split("\n")[0]
    assert "version labels" in report and "num_batch_threads is not mapped" in report and "25.03" in report


def test_imported_repository_answers_like_tensorflow(server: ServerProcess, reference: Reference) -> None:
    rows = [[1.0, 2.0, 3.0], [0.5, 0.5, -2.0]]
    serialized = [example(tf, r).SerializeToString() for r in rows]
    with httpx.Client(base_url=server.http_url, timeout=30) as http:
        r = http.post("/v1/models/lin/labels/stable:predict", json={"inputs": {"x": X.tolist()}})
        assert r.status_code == 200, r.text
        np.testing.assert_allclose(np.array(r.json()["outputs"]["probs"], np.float32), reference.predict(1, X)["probs"], rtol=1e-6)
        r = http.post("/v1/models/lin/labels/canary:classify",
                      json={"signature_name": "classify", "examples": [{"x": v} for v in rows]})
        assert r.status_code == 200, r.text
        scores = np.array([[c[1] for c in row] for row in r.json()["results"]], np.float32)
        np.testing.assert_allclose(scores, reference.examples(2, "classify", serialized)["scores"], rtol=1e-6)
        r = http.post("/v1/models/lin:regress", json={"signature_name": "regress", "examples": [{"x": v} for v in rows]})
        np.testing.assert_allclose(np.array(r.json()["results"], np.float32),
                                   reference.examples(2, "regress", serialized)["outputs"], rtol=1e-6)
        oip = {"inputs": [{"name": "x", "datatype": "FP32", "shape": list(X.shape), "data": X.ravel().tolist()}]}
        r = http.post("/v2/models/lin/versions/1/infer", json=oip)
        assert r.status_code == 200, r.text
        probs = next(o for o in r.json()["outputs"] if o["name"] == "probs")
        np.testing.assert_allclose(np.array(probs["data"], np.float32).reshape(-1, 2), reference.predict(1, X)["probs"], rtol=1e-6)
    with grpc.insecure_channel(server.grpc_address) as channel:
        request = predict_pb2.PredictRequest()
        request.model_spec.name, request.model_spec.version_label = "lin", "canary"
        request.inputs["x"].CopyFrom(tf.make_tensor_proto(X))
        response: Any = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=30)
    assert response.model_spec.version.value == 2
    np.testing.assert_allclose(tf.make_ndarray(response.outputs["total"]), reference.predict(2, X)["total"], rtol=1e-6)
