"""The GraphSAGE python model on the real Triton 2.51 answers as servelab's ``sage_fused`` does.

A 20,000-node synthetic graph (degrees above the fan-outs: sampling really draws), a model trained for a
few steps and exported with ONNX Runtime layers; servelab serves the export, the Triton peer
(servelab.bench.peers.triton_graphsage) serves a python model built from it: servelab's numba kernels, the
export's ``graphsage_layers`` ONNX on onnxruntime. Both fresh servers get the same sequence of requests, so
both draw the same per-call sampler seeds, and must answer alike within 1e-4. Triton (and numba in its
python backend) is installed under ``.peers/`` on first use; the tests skip, saying why, only when that
download cannot happen here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.utils import InferenceServerException

from harness.clients import infer_input
from harness.peers import PEERS_DIR, installed
from harness.servers import ServerProcess, running_server
from servelab.bench.peers.base import Endpoint
from servelab.graph.export import export_repository
from servelab.graph.synth import synth_graph
from servelab.graph.train import TrainConfig, train_to_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

NODES, FEATURES, CLASSES, HIDDEN = 20_000, 16, 4, 16
FANOUTS = (10, 10)
RNG = np.random.default_rng(5)
B32 = RNG.choice(NODES, 32, replace=False).astype(np.int64)
#: (protocol, node ids): batch 1, a repeated id, batch 32 (serial kernel), batch 100 (parallel kernel),
#: the same batch 32 again (a new call draws a new sample)
SEQUENCE = [
    ("grpc", np.array([7], np.int64)),
    ("http", np.array([3, 3, 19_999], np.int64)),
    ("grpc", B32),
    ("http", RNG.choice(NODES, 100, replace=False).astype(np.int64)),
    ("grpc", B32),
]


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sage-triton")
    graph = synth_graph(root / "graph", nodes=NODES, avg_degree=12, features=FEATURES, classes=CLASSES, seed=2)
    assert int(graph.degrees().max()) > max(FANOUTS)  # sampling draws, it does not just take every neighbour
    cfg = TrainConfig(hidden=HIDDEN, fanouts=FANOUTS, batch_size=64, steps=3, eval_nodes=100, max_seconds=60)
    train_to_dir(root / "graph", root / "model", cfg)
    export_repository(root / "model", root / "graph", root / "repo", runtime="onnxruntime")
    return root / "repo"


@pytest.fixture(scope="module")
def triton(export: Path) -> Iterator[tuple[Endpoint, Path]]:
    from servelab.bench.peers.triton_graphsage import TritonGraphSagePeer

    with TritonGraphSagePeer(PEERS_DIR, export) as peer:
        installed(peer.install)
        peer.prepare_graphsage()
        yield peer.start(), peer.repository


@pytest.fixture(scope="module")
def servelab(export: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(export, tmp_path_factory.mktemp("sage-logs"), "sage-servelab") as server:
        yield server


def _infer(protocol: str, address: str, model: str, ids: np.ndarray) -> dict[str, np.ndarray]:
    module: Any = tgrpc if protocol == "grpc" else thttp
    with module.InferenceServerClient(address) as client:
        binary = True if module is thttp else None
        result = client.infer(model, [infer_input(module, "node_ids", ids, binary=binary)])
        return {name: result.as_numpy(name) for name in ("logits", "embeddings")}


def _triton_address(endpoint: Endpoint, protocol: str) -> str:
    return str(endpoint.extra["grpc"] if protocol == "grpc" else endpoint.extra["http"].removeprefix("http://"))


@pytest.fixture(scope="module")
def answers(
    triton: tuple[Endpoint, Path], servelab: ServerProcess
) -> list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]:
    """(Triton's, servelab's) answer to each request of SEQUENCE, sent in order to both fresh servers
    before any other request, so that the n-th call of each draws the n-th sampler seed."""
    endpoint, _ = triton
    out = []
    for protocol, ids in SEQUENCE:
        mine = servelab.grpc_address if protocol == "grpc" else servelab.http_address
        out.append((_infer(protocol, _triton_address(endpoint, protocol), "sage", ids),
                    _infer(protocol, mine, "sage_fused", ids)))  # fmt: skip
    return out


@pytest.mark.parametrize("step", range(len(SEQUENCE)), ids=[f"{p}-b{ids.size}" for p, ids in SEQUENCE])
def test_triton_pipeline_answers_as_sage_fused(
    answers: list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]], step: int
) -> None:
    from_triton, from_servelab = answers[step]
    size = SEQUENCE[step][1].size
    assert from_triton["logits"].shape == (size, CLASSES) and from_triton["embeddings"].shape == (size, HIDDEN)
    for name in ("logits", "embeddings"):
        assert from_triton[name].dtype == from_servelab[name].dtype == np.float32
        np.testing.assert_allclose(from_triton[name], from_servelab[name], rtol=0, atol=1e-4)


def test_the_answers_depend_on_the_sample(answers: list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]) -> None:
    """Requests 2 and 4 (the same ids) draw different samples and so differ: the servers agree because
    they sample alike, not because the answer ignores the sample."""
    assert not np.allclose(answers[2][0]["logits"], answers[4][0]["logits"], atol=1e-4)


def test_the_model_runs_servelabs_kernels_and_layers(triton: tuple[Endpoint, Path], export: Path) -> None:
    from servelab.bench.peers.triton_graphsage import KERNELS_FILE

    endpoint, repository = triton
    version = repository / "sage" / "1"
    assert (version / "_sampler_kernels.py").read_bytes() == KERNELS_FILE.read_bytes()
    assert (version / "model.onnx").read_bytes() == (export / "graphsage_layers" / "1" / "model.onnx").read_bytes()
    with thttp.InferenceServerClient(_triton_address(endpoint, "http")) as client:
        assert client.get_server_metadata()["name"] == "triton"
        assert client.get_model_config("sage")["backend"] == "python"


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_bad_node_id_fails_only_its_request(
    triton: tuple[Endpoint, Path], answers: list[Any], protocol: str
) -> None:
    endpoint, _ = triton
    address = _triton_address(endpoint, protocol)
    with pytest.raises(InferenceServerException, match=rf"node_ids\[1\] = {NODES} is outside the graph"):
        _infer(protocol, address, "sage", np.array([1, NODES], np.int64))
    assert _infer(protocol, address, "sage", np.array([1, 2], np.int64))["logits"].shape == (2, CLASSES)
