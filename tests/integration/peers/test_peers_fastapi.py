"""The FastAPI + onnxruntime baseline peer: a real uvicorn process, real OIP JSON requests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest

from harness.models import dense_onnx
from harness.repository import TINY_WEIGHTS
from servelab.bench.net import http_status
from servelab.bench.peers.base import Endpoint, ModelArtefacts, TensorInfo
from servelab.bench.peers.fastapi_ort import FastApiOrtPeer
from servelab.errors import InvalidArgument


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FastApiOrtPeer, Endpoint]]:
    model = dense_onnx(tmp_path_factory.mktemp("fastapi") / "model.onnx", TINY_WEIGHTS)
    arts = ModelArtefacts(
        "linear", (TensorInfo("INPUT", "FP32", (4,)),), (TensorInfo("OUTPUT", "FP32", (3,)),), onnx=model
    )
    with FastApiOrtPeer(intra_op_threads=1) as peer:
        peer.prepare(arts)
        yield peer, peer.start()


def test_infer_returns_the_models_answer(running: tuple[FastApiOrtPeer, Endpoint]) -> None:
    _, ep = running
    x = np.random.default_rng(0).random((5, 4), dtype=np.float32)
    body = {"inputs": [{"name": "INPUT", "shape": [5, 4], "datatype": "FP32", "data": x.ravel().tolist()}]}
    status, raw = http_status(f"{ep.url}/v2/models/linear/infer", "POST", json.dumps(body).encode())
    assert status == 200, raw
    out = json.loads(raw)["outputs"][0]
    assert out["name"] == "OUTPUT" and out["shape"] == [5, 3] and out["datatype"] == "FP32"
    np.testing.assert_allclose(np.array(out["data"]).reshape(5, 3), x @ TINY_WEIGHTS, rtol=1e-5)


def test_metadata_health_and_errors(running: tuple[FastApiOrtPeer, Endpoint]) -> None:
    _, ep = running
    assert ep.kind == "oip-http" and not ep.binary and ep.pid is not None
    assert http_status(f"{ep.url}/v2/health/ready")[0] == 200
    status, raw = http_status(f"{ep.url}/v2/models/linear")
    assert status == 200 and json.loads(raw)["inputs"] == [
        {"name": "INPUT", "datatype": "FP32", "shape": [-1, 4]}
    ]
    assert http_status(f"{ep.url}/v2/models/nope/infer", "POST", b"{}")[0] == 404
    status, raw = http_status(f"{ep.url}/v2/models/linear/infer", "POST", b"not json")
    assert status == 400 and b"bad OIP JSON" in raw


def test_stop_ends_the_process_group(tmp_path: Path) -> None:
    model = dense_onnx(tmp_path / "model.onnx", TINY_WEIGHTS)
    arts = ModelArtefacts(
        "m", (TensorInfo("INPUT", "FP32", (4,)),), (TensorInfo("OUTPUT", "FP32", (3,)),), onnx=model
    )
    peer = FastApiOrtPeer(work_dir=tmp_path / "work")
    peer.prepare(arts)
    pid = peer.start().pid
    assert pid is not None and psutil.pid_exists(pid)
    peer.stop()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    peer.stop()  # idempotent


def test_prepare_needs_an_onnx_file() -> None:
    arts = ModelArtefacts("m", (TensorInfo("INPUT", "FP32", (4,)),), (), onnx=None)
    with FastApiOrtPeer() as peer, pytest.raises(InvalidArgument, match="needs an ONNX model"):
        peer.prepare(arts)
