"""The exported repository end to end: configs on disk, then Engine over sampler -> layers -> ensemble."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from google.protobuf import text_format

from servelab import Engine
from servelab.graph.export import export_repository
from servelab.graph.model import SageConfig, SageLayers, load_model, save_model
from servelab.graph.sampler import PythonSampler, gather_features
from servelab.graph.store import GraphStore, build_store
from servelab.protocol import model_config_pb2 as mc

N, F, C, H = 60, 6, 3, 16
FANOUTS = (5, 5)


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ring with chords: every degree is <= the fan-out, so sampling takes all neighbours."""
    rng = np.random.default_rng(1)
    ring = np.arange(N)
    src = np.concatenate([ring, ring[::7]])
    dst = np.concatenate([(ring + 1) % N, (ring[::7] + N // 2) % N])
    feats = rng.standard_normal((N, F), dtype=np.float32)
    out = tmp_path_factory.mktemp("graph") / "g"
    store, _ = build_store(out, src, dst, num_nodes=N, features=feats, progress=False)
    assert store.degrees().max() <= min(FANOUTS)
    return out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    return save_model(
        SageLayers(SageConfig(F, C, hidden=H, fanouts=FANOUTS)), tmp_path_factory.mktemp("model")
    )


def _eager(model_dir: Path, graph_dir: Path, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    model, _ = load_model(model_dir)
    store = GraphStore.open(graph_dir)
    block = PythonSampler(store, FANOUTS).sample(ids)
    x = torch.from_numpy(gather_features(store, block.nodes))
    with torch.no_grad():
        logits, emb = model(x, torch.from_numpy(block.nbr1), torch.from_numpy(block.nbr2))
    return logits.numpy(), emb.numpy()


def _config(path: Path) -> mc.ModelConfig:
    return text_format.Parse(path.read_text(), mc.ModelConfig())


def test_repository_layout_and_configs(model_dir: Path, graph_dir: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    result = export_repository(model_dir, graph_dir, repo, runtime="onnxruntime")
    assert result["max_abs_diff"] <= 1e-5
    assert (repo / "graphsage_layers" / "1" / "model.onnx").is_file()
    sampler = _config(repo / "graphsage_sampler" / "config.pbtxt")
    assert sampler.backend == "graphsage_sampler" and sampler.max_batch_size == 0
    # a store outside the repository is linked into it: the server opens graph stores only inside
    assert sampler.parameters["graph_dir"].string_value == f"_graphs/{graph_dir.name}"
    assert (repo / "_graphs" / graph_dir.name / "manifest.json").is_file()
    assert sampler.parameters["fanouts"].string_value == "5,5"
    assert [(o.name, list(o.dims)) for o in sampler.output] == [
        ("x", [-1, F]),
        ("nbr1", [-1, 5]),
        ("nbr2", [-1, 5]),
    ]
    layers = _config(repo / "graphsage_layers" / "config.pbtxt")
    assert layers.backend == "onnxruntime" and [i.name for i in layers.input] == ["x", "nbr1", "nbr2"]
    sage = _config(repo / "sage" / "config.pbtxt")
    assert sage.platform == "ensemble" and [o.name for o in sage.output] == ["logits", "embeddings"]
    steps = sage.ensemble_scheduling.step
    assert [s.model_name for s in steps] == ["graphsage_sampler", "graphsage_layers"]
    assert dict(steps[1].output_map) == {"logits": "logits", "embeddings": "embeddings"}


def test_graph_inside_repository_is_stored_relative(model_dir: Path, graph_dir: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    inner = repo / "graphsage_sampler" / "graph"
    shutil.copytree(graph_dir, inner)
    export_repository(model_dir, inner, repo, runtime="onnxruntime")
    cfg = _config(repo / "graphsage_sampler" / "config.pbtxt")
    assert cfg.parameters["graph_dir"].string_value == "graphsage_sampler/graph"
    with Engine(repo, load_models=["graphsage_sampler"]) as engine:
        out = engine.infer("graphsage_sampler", {"node_ids": np.array([4], np.int64)})
    np.testing.assert_array_equal(out["x"][0], GraphStore.open(graph_dir).features[4])


def test_feature_width_mismatch_is_refused(model_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "g"
    build_store(other, [0], [1], num_nodes=2, features=np.ones((2, F + 2), np.float32), progress=False)
    with pytest.raises(ValueError, match=f"{F + 2} features per node, the model expects {F}"):
        export_repository(model_dir, other, tmp_path / "repo")


@pytest.mark.parametrize("runtime", ["onnxruntime", "torch", "openvino"])
def test_engine_runs_sampler_then_layers(
    model_dir: Path, graph_dir: Path, tmp_path: Path, runtime: str
) -> None:
    backend_module = {"onnxruntime": "onnxruntime", "torch": "torch", "openvino": "openvino"}[runtime]
    if importlib.util.find_spec(f"servelab.backends.{backend_module}") is None:
        pytest.skip(f"servelab.backends.{backend_module} is not written yet")
    repo = tmp_path / "repo"
    export_repository(model_dir, graph_dir, repo, runtime=runtime)
    ids = np.array([0, 7, 31, 7], np.int64)
    with Engine(repo, load_models=["graphsage_sampler", "graphsage_layers"]) as engine:
        block = engine.infer("graphsage_sampler", {"node_ids": ids})
        out = engine.infer("graphsage_layers", block)
    want_logits, want_emb = _eager(model_dir, graph_dir, ids)
    np.testing.assert_allclose(out["logits"], want_logits, atol=1e-5)
    np.testing.assert_allclose(out["embeddings"], want_emb, atol=1e-5)


def test_engine_runs_the_sage_ensemble(model_dir: Path, graph_dir: Path, tmp_path: Path) -> None:
    if importlib.util.find_spec("servelab.backends.ensemble") is None:
        pytest.skip("servelab.backends.ensemble is not written yet")
    repo = tmp_path / "repo"
    export_repository(model_dir, graph_dir, repo, runtime="onnxruntime")
    ids = np.array([3, 59, 12], np.int64)
    with Engine(repo) as engine:
        out = engine.infer("sage", {"node_ids": ids})
        assert out["logits"].shape == (3, C) and out["embeddings"].shape == (3, H)
        want_logits, _ = _eager(model_dir, graph_dir, ids)
        np.testing.assert_allclose(out["logits"], want_logits, atol=1e-5)
        with pytest.raises(Exception, match=f"node_ids {N} are outside the graph"):
            engine.infer("sage", {"node_ids": np.array([1, N], np.int64)})
