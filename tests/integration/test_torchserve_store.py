"""`servelab serve --model-store STORE`: archives built with torch-model-archiver, served through TorchServe's
own handler library, answered over TorchServe's REST and gRPC APIs and over the OIP.

(The same requests against real TorchServe 0.12: tests/integration/peers/test_torchserve_parity.py.)
"""

from __future__ import annotations

import json
import shutil
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
from google.protobuf import empty_pb2

from harness.torchserve_store import (
    SCRIPTED_WEIGHTS,
    TorchServeStoreServer,
    build_envelope_store,
    build_store,
    envelope_config,
    ts_missing,
)
from servelab.protocol import torchserve as ts_pb

pytestmark = [pytest.mark.skipif(ts_missing() is not None, reason=str(ts_missing())), pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("torchserve"))


@pytest.fixture(scope="module")
def ts_server(store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TorchServeStoreServer]:
    server = TorchServeStoreServer(store, tmp_path_factory.mktemp("logs") / "torchserve-store.log").start()
    try:
        yield server
    finally:
        assert server.stop() == 0, server.log_tail()


@pytest.fixture(scope="module")
def clients(ts_server: TorchServeStoreServer) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """(inference port, management port) clients."""
    with httpx.Client(base_url=ts_server.http_url, timeout=120) as inference, \
         httpx.Client(base_url=ts_server.management_url, timeout=120) as management:
        yield inference, management


@pytest.fixture
def rest(clients: tuple[httpx.Client, httpx.Client]) -> httpx.Client:
    return clients[0]


@pytest.fixture
def management(clients: tuple[httpx.Client, httpx.Client]) -> httpx.Client:
    return clients[1]


def _eager_reference(work: Path, x: list[float]) -> list[float]:
    import torch

    state = torch.load(work / "net.pt")
    y = torch.tensor([x], dtype=torch.float32) @ state["fc.weight"].T + state["fc.bias"]
    return (y[0] * 2.0).tolist()


def test_ping_is_torchserve_bytes(rest: httpx.Client) -> None:
    r = rest.get("/ping")
    assert r.status_code == 200 and r.content == b'{\n  "status": "Healthy"\n}\n'


def test_config_properties_with_base_handler_on_torchscript(tmp_path: Path) -> None:
    """`servelab serve --torchserve-config config.properties`: its store, load_models and service_envelope."""
    config = envelope_config(tmp_path / "config.properties", build_envelope_store(tmp_path))
    server = TorchServeStoreServer(config.parent, tmp_path / "envelope.log", config=config).start()
    try:
        x = [[1.0, 2.0, 3.0, 4.0], [0.5, 0.0, -1.0, 2.0]]
        r = httpx.post(f"{server.http_url}/predictions/scripted", json={"instances": x}, timeout=60)
        assert r.status_code == 200, r.text
        np.testing.assert_allclose(r.json()["predictions"], np.array(x, np.float32) @ SCRIPTED_WEIGHTS, rtol=1e-6)
    finally:
        assert server.stop() == 0, server.log_tail()


def test_multipart_form_field_is_a_parameter(rest: httpx.Client) -> None:
    # curl -F data=@x.json: the form field named "data" is what the handler reads
    form = rest.post("/predictions/eager", files={"data": ("x.json", b"[1, 2, 3, 4]", "application/json")})
    raw = rest.post("/predictions/eager", json=[1, 2, 3, 4])
    assert form.status_code == 200 and form.content == raw.content


def test_custom_base_handler_on_eager_model(rest: httpx.Client, store: Path) -> None:
    r = rest.post("/predictions/eager", json=[1.0, 2.0, 3.0, 4.0])
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json" and r.headers["x-handler-tag"] == "from-yaml"
    body = r.json()
    assert body["tag"] == "from-yaml"  # model-config.yaml's handler section reached initialize()
    np.testing.assert_allclose(body["scaled"], _eager_reference(store.parent / "work", [1, 2, 3, 4]), rtol=1e-6)
    assert r.content.startswith(b'{\n  "scaled": [\n')  # ts's json.dumps(indent=2), byte for byte


def test_handler_failure_is_torchserve_503(rest: httpx.Client) -> None:
    r = rest.post("/predictions/eager", json={"not": "four numbers"})
    assert r.status_code == 503
    assert r.content == b'{\n  "code": 503,\n  "type": "InternalServerException",\n  "message": "Prediction failed"\n}\n'


def test_unknown_model_and_version(rest: httpx.Client) -> None:
    r = rest.post("/predictions/nope", content=b"{}")
    assert r.status_code == 404 and r.json() == {"code": 404, "type": "ModelNotFoundException", "message": "Model not found: nope"}
    r = rest.post("/predictions/eager/9.9", json=[1, 2, 3, 4])
    assert r.status_code == 404 and r.json()["message"] == "Model version: 9.9 does not exist for model: eager"
    assert rest.post("/predictions/eager/1.0", json=[1, 2, 3, 4]).status_code == 200


def test_batch_size_from_model_config_yaml(rest: httpx.Client) -> None:
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda i: rest.post("/predictions/batcher", json={"i": i}), range(4)))
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    bodies = [a.json() for a in answers]
    assert [b["echo"] for b in bodies] == [{"i": i} for i in range(4)]
    assert all(b["batch"] == 4 and b["max_batch"] == 4 for b in bodies), bodies  # one batch of four


def test_streaming_handler_over_rest(rest: httpx.Client) -> None:
    with rest.stream("POST", "/predictions/streamer", content=b"go") as r:
        assert r.status_code == 200
        chunks = [c for c in r.iter_bytes() if c]
    assert b"".join(chunks) == b"one two three"


def test_handler_model_over_the_open_inference_protocol(rest: httpx.Client) -> None:
    """An OIP client sends the body as BYTES input 'body'; without 'request' the handler gets raw bytes."""
    payload = {"inputs": [{"name": "body", "datatype": "BYTES", "shape": [1, 1], "data": ["[1, 2, 3, 4]"]}]}
    r = rest.post("/v2/models/eager/infer", json=payload)
    assert r.status_code == 200, r.text
    outputs = {o["name"]: o for o in r.json()["outputs"]}
    assert json.loads(outputs["response"]["data"][0])["tag"] == "from-yaml"
    assert json.loads(outputs["response_meta"]["data"][0])["status"] == 200


def test_grpc_inference_api(ts_server: TorchServeStoreServer, store: Path) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{ts_server.grpc_inference_port}") as channel:
        stub = ts_pb.inference_pb2_grpc.InferenceAPIsServiceStub(channel)
        assert json.loads(stub.Ping(empty_pb2.Empty()).health) == {"status": "Healthy"}
        reply = stub.Predictions(ts_pb.inference_pb2.PredictionsRequest(model_name="eager", input={"data": b"[1, 2, 3, 4]"}))
        np.testing.assert_allclose(json.loads(reply.prediction)["scaled"], _eager_reference(store.parent / "work", [1, 2, 3, 4]), rtol=1e-6)
        parts = [m.prediction for m in stub.StreamPredictions(ts_pb.inference_pb2.PredictionsRequest(model_name="streamer", input={"data": b"x"}))]
        assert parts == [b"one ", b"two ", b"three"]
        with pytest.raises(grpc.RpcError) as missing:
            stub.Predictions(ts_pb.inference_pb2.PredictionsRequest(model_name="nope", input={"data": b"1"}))
        assert missing.value.code() == grpc.StatusCode.INTERNAL and missing.value.details().startswith("Model not found: nope")
        with pytest.raises(grpc.RpcError) as failed:
            stub.Predictions(ts_pb.inference_pb2.PredictionsRequest(model_name="eager", input={"data": b"{}"}))
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE and failed.value.details().startswith("Prediction failed")


def test_describe_shows_model_config_yaml(management: httpx.Client) -> None:
    described = management.get("/models/batcher").json()[0]
    assert (described["modelName"], described["modelVersion"], described["batchSize"], described["maxBatchDelay"]) == (
        "batcher", "1.0", 4, 20000)
    assert management.get("/models").json()["models"][0] == {"modelName": "batcher", "modelUrl": "batcher.mar"}


def test_register_an_unarchived_folder_of_the_store(management: httpx.Client, rest: httpx.Client, store: Path) -> None:
    folder = store / "eager_copy"
    with zipfile.ZipFile(store / "eager.mar") as z:
        z.extractall(folder)
    manifest = json.loads((folder / "MAR-INF" / "MANIFEST.json").read_text())
    manifest["model"]["modelName"] = "eager_copy"
    (folder / "MAR-INF" / "MANIFEST.json").write_text(json.dumps(manifest))
    try:
        r = management.post("/models", params={"url": "eager_copy", "initial_workers": 1})
        assert r.status_code == 200, r.text
        assert r.json() == {"status": 'Model "eager_copy" Version: 1.0 registered with 1 initial workers'}
        assert rest.post("/predictions/eager_copy", json=[1, 2, 3, 4]).json()["tag"] == "from-yaml"
        assert management.delete("/models/eager_copy").json() == {"status": 'Model "eager_copy" unregistered'}
    finally:
        shutil.rmtree(folder)


@pytest.mark.parametrize("url", ["https://example.com/x.mar", "../eager.mar", "/etc/passwd", "missing.mar"])
def test_register_takes_store_names_only(management: httpx.Client, url: str) -> None:
    r = management.post("/models", params={"url": url})
    assert r.status_code in (400, 404), r.text
    assert r.json()["code"] == r.status_code


def test_grpc_management_api(ts_server: TorchServeStoreServer) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{ts_server.grpc_management_port}") as channel:
        stub = ts_pb.management_pb2_grpc.ManagementAPIsServiceStub(channel)
        listed = json.loads(stub.ListModels(ts_pb.management_pb2.ListModelsRequest()).msg)
        assert [m["modelName"] for m in listed["models"]] == ["batcher", "eager", "streamer"]
        described = json.loads(stub.DescribeModel(ts_pb.management_pb2.DescribeModelRequest(model_name="eager")).msg)
        assert described[0]["modelName"] == "eager"
        with pytest.raises(grpc.RpcError) as missing:
            stub.DescribeModel(ts_pb.management_pb2.DescribeModelRequest(model_name="nope"))
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND


def test_import_writes_a_repository_that_answers_the_same(store: Path, rest: httpx.Client, tmp_path: Path) -> None:
    import subprocess
    import sys

    from harness.servers import ServerProcess

    out, report = tmp_path / "repo", tmp_path / "report.md"
    done = subprocess.run([sys.executable, "-m", "servelab.cli", "import", "torchserve", str(store), "--out", str(out),
                           "--report", str(report)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["batcher", "eager", "streamer"]
    assert (out / "eager" / "1" / "MAR-INF" / "MANIFEST.json").is_file()
    rows = {line.split(" | ")[0].strip("| "): line for line in report.read_text().splitlines()[2:]}
    assert "| no |" in rows["eager"] and "Triton has no such backend" in rows["eager"]  # check-triton's verdict
    server = ServerProcess(out, tmp_path / "imported.log").start()
    try:
        with httpx.Client(base_url=server.http_url, timeout=120) as imported:
            for model, body in (("eager", b"[1, 2, 3, 4]"), ("eager", b"{}"), ("streamer", b"go")):
                for version in ("", "/1.0"):
                    a = imported.post(f"/predictions/{model}{version}", content=body)
                    b = rest.post(f"/predictions/{model}{version}", content=body)
                    assert (a.status_code, a.content) == (b.status_code, b.content)
    finally:
        assert server.stop() == 0, server.log_tail()


def test_token_authorization_with_key_file(store: Path, tmp_path: Path) -> None:
    """Without disable_token_authorization, TorchServe's key_file.json keys are required."""
    config = tmp_path / "config.properties"
    config.write_text(f"model_store={store}\nload_models=eager.mar\n")
    key_file = tmp_path / "key_file.json"
    server = TorchServeStoreServer(store, tmp_path / "keys.log", ["--key-file", str(key_file)], config=config).start()
    try:
        keys = json.loads(key_file.read_text())
        url = f"{server.http_url}/predictions/eager"
        assert httpx.post(url, json=[1, 2, 3, 4], timeout=60).status_code == 401
        bearer = {"Authorization": f"Bearer {keys['inference']['key']}"}
        assert httpx.post(url, json=[1, 2, 3, 4], headers=bearer, timeout=60).status_code == 200
        models = f"{server.management_url}/models"
        assert httpx.get(models, headers=bearer, timeout=60).status_code == 401  # management needs its own key
        listed = httpx.get(models, headers={"Authorization": f"Bearer {keys['management']['key']}"}, timeout=60)
        assert [m["modelName"] for m in listed.json()["models"]] == ["eager"]  # load_models named only eager
    finally:
        assert server.stop() == 0, server.log_tail()


def test_metrics_port_has_torchserve_names(ts_server: TorchServeStoreServer, rest: httpx.Client) -> None:
    assert rest.post("/predictions/eager", json=[1, 2, 3, 4]).status_code == 200
    text = httpx.get(f"{ts_server.metrics_url}/metrics", timeout=30).text
    lines = [line for line in text.splitlines() if line.startswith("ts_inference_requests_total{") and 'model_name="eager"' in line]
    assert lines and float(lines[0].rsplit(" ", 1)[1]) >= 1
    assert "ts_inference_latency_microseconds{" in text
    assert "ts_queue_latency_microseconds{" in text
