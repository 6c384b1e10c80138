"""The GraphSAGE `sage` ensemble behind `servelab serve`, called through stock tritonclient.

A small graph whose degrees never exceed the fan-outs (so sampling keeps every neighbour and the
answer is deterministic) is built here, a tiny model is trained on it for a few steps and exported
with ONNX Runtime layers; the served answers must equal the in-process Engine's for the same ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from harness.clients import infer_input
from harness.servers import ServerProcess, server_fixture
from servelab import Engine
from servelab.graph.export import export_repository
from servelab.graph.store import build_store
from servelab.graph.train import TrainConfig, train_to_dir

N, F, CLASSES = 400, 8, 4
FANOUTS = (5, 5)
IDS = np.array([0, 7, 123, 399, 7], np.int64)
NEW_FEATURES = np.linspace(-1, 1, 2 * F, dtype=np.float32).reshape(2, F)
NEW_EDGES = np.array([[N, 3], [N, N + 1], [N + 1, 250]], np.int64)


def _graph(path: Path) -> Path:
    """A ring with chords (degrees 2-3), labels by position so that training has something to learn."""
    rng = np.random.default_rng(0)
    ring = np.arange(N)
    src = np.concatenate([ring, ring[::5]])
    dst = np.concatenate([(ring + 1) % N, (ring[::5] + N // 2) % N])
    labels = (ring * CLASSES // N).astype(np.int64)
    feats = (rng.standard_normal((N, F)) + labels[:, None] * 0.5).astype(np.float32)
    store, _ = build_store(path, src, dst, num_nodes=N, features=feats, labels=labels, progress=False)
    assert store.degrees().max() <= min(FANOUTS)
    return path


@pytest.fixture(scope="module")
def sage_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sage")
    repo = root / "models"
    graph = _graph(repo / "_graphs" / "ring")
    cfg = TrainConfig(hidden=16, fanouts=FANOUTS, batch_size=64, steps=5, eval_nodes=100)
    train_to_dir(graph, root / "model", cfg)
    export_repository(root / "model", graph, repo, runtime="onnxruntime")
    return repo


sage_server = server_fixture("sage_repo", "sage")


@pytest.fixture(scope="module")
def expected(sage_repo: Path) -> dict[str, dict[str, np.ndarray]]:
    """In-process answers: plain ids, and ids with two new nodes joined to the graph."""
    with Engine(sage_repo) as engine:
        return {kind: engine.infer("sage", arrays) for kind, arrays in _requests().items()}


def _inputs(module: Any, arrays: dict[str, np.ndarray]) -> list[Any]:
    binary = True if module is httpclient else None
    return [infer_input(module, name, array, binary=binary) for name, array in arrays.items()]


def _infer(server: ServerProcess, protocol: str, model: str, arrays: dict[str, np.ndarray]) -> Any:
    """One request through stock tritonclient over ``protocol`` ("grpc" or "http")."""
    if protocol == "grpc":
        with grpcclient.InferenceServerClient(server.grpc_address) as client:
            assert client.is_model_ready(model)
            return client.infer(model, _inputs(grpcclient, arrays))
    with httpclient.InferenceServerClient(server.http_address) as client:
        outputs = [httpclient.InferRequestedOutput(n, binary_data=True) for n in ("logits", "embeddings")]
        return client.infer(model, _inputs(httpclient, arrays), outputs=outputs)


def _requests() -> dict[str, dict[str, np.ndarray]]:
    return {
        "plain": {"node_ids": IDS},
        "inductive": {
            "node_ids": np.array([N, N + 1, 3], np.int64),
            "new_features": NEW_FEATURES,
            "new_edges": NEW_EDGES,
        },
    }


# every degree is <= the fan-outs, so sampling is deterministic and the fused model must answer the same
@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("model", ["sage", "sage_fused"])
@pytest.mark.parametrize("kind", ["plain", "inductive"])
def test_answer_equals_the_engine(
    sage_server: ServerProcess, expected: dict[str, dict[str, np.ndarray]], kind: str, model: str, protocol: str
) -> None:
    result = _infer(sage_server, protocol, model, _requests()[kind])
    for name in ("logits", "embeddings"):
        np.testing.assert_allclose(result.as_numpy(name), expected[kind][name], rtol=1e-5, atol=1e-6)


def test_bad_node_id_is_a_client_error_naming_the_id(sage_server: ServerProcess) -> None:
    bad = {"node_ids": np.array([5, N + 17], np.int64)}
    grpc_client = grpcclient.InferenceServerClient(sage_server.grpc_address)
    with grpc_client, pytest.raises(InferenceServerException) as grpc_err:
        grpc_client.infer("sage", _inputs(grpcclient, bad))
    assert grpc_err.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert f"node_ids {N + 17} are outside the graph" in grpc_err.value.message()
    http_client = httpclient.InferenceServerClient(sage_server.http_address)
    with http_client, pytest.raises(InferenceServerException) as http_err:
        http_client.infer("sage", _inputs(httpclient, bad))
    assert http_err.value.status() == "400"
    assert f"node_ids {N + 17} are outside the graph" in http_err.value.message()


def test_statistics_show_the_stages(sage_server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(sage_server.grpc_address) as client:
        client.infer("sage", _inputs(grpcclient, {"node_ids": IDS}))
    sampler = httpx.get(f"{sage_server.http_url}/v2/models/graphsage_sampler/stats").json()
    stages = sampler["model_stats"][0]["stages"]
    assert stages["count"] >= 1 and stages["sample_ns"] > 0 and stages["gather_ns"] > 0
    assert stages["seeds"] >= IDS.size
    sage = httpx.get(f"{sage_server.http_url}/v2/models/sage/stats").json()["model_stats"][0]
    steps = sage["stages"]["steps"]
    assert [s["model_name"] for s in steps] == ["graphsage_sampler", "graphsage_layers"]
    assert all(s["calls"] >= 1 and s["total_ns"] > 0 for s in steps)
    assert sage["inference_stats"]["success"]["count"] >= 1
