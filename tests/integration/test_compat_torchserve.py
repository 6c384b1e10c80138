"""TorchServe clients, written the way TorchServe's docs show: curl-like inference and management calls."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from harness.servers import ServerProcess


@pytest.fixture(scope="module")
def management(explicit_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=explicit_server.management_url, timeout=60) as c:
        yield c


def test_ping(rest: httpx.Client) -> None:
    r = rest.get("/ping")
    assert r.status_code == 200 and r.json() == {"status": "Healthy"}


def test_predictions_json_object_and_single_example(rest: httpx.Client) -> None:
    r = rest.post("/predictions/simple", json={"INPUT0": list(range(16)), "INPUT1": [1] * 16})
    assert r.status_code == 200, r.text
    assert r.json() == {"OUTPUT0": [i + 1 for i in range(16)], "OUTPUT1": [i - 1 for i in range(16)]}
    r = rest.post("/predictions/classify/1", json=[[0.1, 0.2, 0.3, 0.4], [1, 2, 3, 4]])
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json(), [[0.1, 0.2, 0.3, 0.4], [1, 2, 3, 4]], rtol=1e-6)


def test_predictions_raw_bytes_for_bytes_model(rest: httpx.Client) -> None:
    # curl http://localhost:8080/predictions/echo_bytes -T kitten.txt
    r = rest.put("/predictions/echo_bytes", content=b"hello kitten", headers={"Content-Type": "text/plain"})
    assert r.status_code == 200, r.text
    assert r.json() == ["hello kitten"]


def test_predictions_errors(rest: httpx.Client) -> None:
    r = rest.post("/predictions/nope", json=[1])
    assert r.status_code == 404
    assert r.json()["code"] == 404 and r.json()["type"] == "ModelNotFoundException"
    assert r.json()["message"] == "Model not found: nope"  # TorchServe's words
    r = rest.post("/predictions/classify", content=b"\x01\x02", headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 400 and "send it as a JSON array" in r.json()["message"]
    r = rest.post("/predictions/simple", json=[1, 2])
    assert r.status_code == 400 and "one key per input" in r.json()["message"]


def test_management_list_describe_register_scale_default_unregister(management: httpx.Client) -> None:
    models = management.get("/models").json()["models"]
    assert {"modelName": "simple", "modelUrl": "simple"} in models
    r = management.post("/models", params={"url": "echo_uint8", "initial_workers": 2})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == 'Model "echo_uint8" Version: 1 registered with 2 initial workers'
    r = management.post("/models", params={"url": "echo_uint8"})
    assert r.status_code == 409 and r.json()["type"] == "ConflictStatusException"
    [desc] = management.get("/models/echo_uint8").json()
    assert desc["modelName"] == "echo_uint8" and desc["minWorkers"] == 2 and len(desc["workers"]) == 2
    r = management.put("/models/echo_uint8", params={"min_worker": 3})
    assert r.status_code == 200 and r.json()["status"] == "Workers scaled to 3 for model: echo_uint8"
    assert management.get("/models/echo_uint8/1").json()[0]["minWorkers"] == 3
    assert management.put("/models/echo_uint8/1/set-default").status_code == 200
    assert management.put("/models/echo_uint8/5/set-default").status_code == 404
    r = management.delete("/models/echo_uint8")
    assert r.status_code == 200 and r.json() == {"status": 'Model "echo_uint8" unregistered'}
    r = management.get("/models/echo_uint8")
    # TorchServe's spec: an unregistered model is 404 "Model not found" (not 503)
    assert r.status_code == 404 and r.json() == {
        "code": 404, "type": "ModelNotFoundException", "message": "Model not found: echo_uint8"
    }
    r = management.post("/models", params={"url": "does_not_exist"})
    assert r.status_code in (400, 404) and r.json()["message"]
