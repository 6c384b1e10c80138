"""The fused ``sage_fused`` model: aggregation kernels + dense graph against eager SageLayers and the ensemble."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from google.protobuf import text_format

from servelab import Engine
from servelab.errors import InvalidArgument
from servelab.graph._fused_kernels import dense_inputs
from servelab.graph.dense import build_dense_onnx, save_dense_onnx
from servelab.graph.export import export_repository
from servelab.graph.model import SageConfig, SageLayers, save_model
from servelab.graph.parity import check_dense_parity
from servelab.graph.sampler import NumbaSampler, gather_features
from servelab.graph.store import GraphStore, build_store
from servelab.protocol import model_config_pb2 as mc

N, F, C, H = 400, 8, 4, 16
FANOUTS = (4, 3)
ISOLATED = N - 1  # no edges at all


def _graph(path: Path, feature_dtype: str = "float32") -> Path:
    """Random edges (many degrees above the fan-outs, so sampling chooses) and one isolated node."""
    rng = np.random.default_rng(3)
    src = rng.integers(0, N - 1, 4000)
    dst = rng.integers(0, N - 1, 4000)
    keep = src != dst
    feats = rng.standard_normal((N, F), dtype=np.float32)
    build_store(path, src[keep], dst[keep], num_nodes=N, features=feats, feature_dtype=feature_dtype, progress=False)
    return path


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _graph(tmp_path_factory.mktemp("graph") / "g")


@pytest.fixture(scope="module")
def model() -> SageLayers:
    torch.manual_seed(0)
    return SageLayers(SageConfig(F, C, hidden=H, fanouts=FANOUTS)).eval()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, model: SageLayers, graph_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("fused")
    export_repository(save_model(model, root / "model"), graph_dir, root / "repo", runtime="onnxruntime")
    return root / "repo"


def _eager(model: SageLayers, store: GraphStore, sampler: NumbaSampler, ids: np.ndarray, seed: int) -> list[np.ndarray]:
    block = sampler.sample(ids, seed=seed)
    x = gather_features(store, block.nodes)
    with torch.inference_mode():
        out = model(torch.from_numpy(x), torch.from_numpy(block.nbr1), torch.from_numpy(block.nbr2))
    return [t.numpy() for t in out]


@pytest.mark.parametrize("feature_dtype", ["float32", "float16"])
@pytest.mark.parametrize("parallel", [False, True])
def test_dense_graph_matches_eager_on_sampled_blocks(
    model: SageLayers, tmp_path: Path, feature_dtype: str, parallel: bool
) -> None:
    import onnxruntime as ort

    store = GraphStore.open(_graph(tmp_path / "g", feature_dtype))
    assert store.features.dtype == np.dtype(feature_dtype)
    sampler = NumbaSampler(store, FANOUTS, seed=5)
    session = ort.InferenceSession(str(save_dense_onnx(model, tmp_path / "dense.onnx")))
    batches = [np.array([ISOLATED]), np.array([0, 0, 5, ISOLATED, 17]), np.arange(64) * 6]
    for seed, ids in enumerate(batches):
        block = sampler.sample(ids, seed=seed)
        a1, idx2, w2 = dense_inputs(store.features, block.nodes, block.nbr1, block.nbr2, parallel)
        assert a1.shape == (block.num_hop1, 2 * F) and idx2.shape == (ids.size, FANOUTS[0] + 1)
        got = session.run(["logits", "embeddings"], {"a1": a1, "idx2": idx2, "w2": w2})
        for g, w in zip(got, _eager(model, store, sampler, ids, seed), strict=True):
            np.testing.assert_allclose(g, w, atol=1e-5)


def test_isolated_node_aggregates_to_zero(graph_dir: Path) -> None:
    store = GraphStore.open(graph_dir)
    block = NumbaSampler(store, FANOUTS).sample(np.array([ISOLATED]), seed=0)
    a1, idx2, w2 = dense_inputs(store.features, block.nodes, block.nbr1, block.nbr2)
    np.testing.assert_array_equal(a1[0, :F], 0.0)  # the mean of no neighbours
    np.testing.assert_array_equal(a1[0, F:], store.features[ISOLATED])
    assert w2[0, 0].sum() == 0.0 and w2[0, 1, -1] == 1.0 and idx2[0, -1] == 0


def test_pool_aggregator_is_refused_with_the_reason() -> None:
    pool = SageLayers(SageConfig(F, C, hidden=H, aggregator="pool"))
    with pytest.raises(ValueError, match="needs the mean aggregator"):
        build_dense_onnx(pool)


def test_parity_check_catches_a_wrong_graph(model: SageLayers, tmp_path: Path) -> None:
    path = save_dense_onnx(model, tmp_path / "dense.onnx")
    assert check_dense_parity(model, path) <= 1e-5
    other = SageLayers(SageConfig(F, C, hidden=H, fanouts=FANOUTS))
    with pytest.raises(AssertionError, match="differs from eager"):
        check_dense_parity(other, path)


def test_export_writes_the_fused_model(repo: Path, graph_dir: Path) -> None:
    cfg = text_format.Parse((repo / "sage_fused" / "config.pbtxt").read_text(), mc.ModelConfig())
    assert cfg.backend == "graphsage" and cfg.parameters["runtime"].string_value == "onnxruntime"
    assert [i.name for i in cfg.input] == ["node_ids", "new_features", "new_edges"]
    assert [o.name for o in cfg.output] == ["logits", "embeddings"]
    assert (repo / "sage_fused" / "1" / "model.onnx").is_file()


def test_fused_model_answers_what_the_ensemble_answers(repo: Path) -> None:
    requests = [np.array([3]), np.array([ISOLATED, 3, 3, 250]), np.arange(0, N - 1, 5), np.array([42])]
    with Engine(repo) as engine:
        for ids in requests:  # both samplers start from seed 0 and count calls alike
            want = engine.infer("sage", {"node_ids": ids})
            got = engine.infer("sage_fused", {"node_ids": ids})
            for name in ("logits", "embeddings"):
                np.testing.assert_allclose(got[name], want[name], atol=1e-5, err_msg=name)
        stages = engine.get_inference_statistics("sage_fused")["model_stats"][0]["stages"]
    assert stages["count"] == len(requests) and stages["seeds"] == sum(r.size for r in requests)
    assert min(stages["sample_ns"], stages["gather_ns"], stages["layers_ns"]) > 0


def test_fused_inductive_request_matches_the_ensemble(repo: Path) -> None:
    new_features = np.random.default_rng(9).standard_normal((2, F), dtype=np.float32)
    inputs = {
        "node_ids": np.array([N, N + 1, 7]),
        "new_features": new_features,
        "new_edges": np.array([[N, 3], [N, N + 1], [N + 1, 11]]),
    }
    with Engine(repo) as engine:
        want = engine.infer("sage", inputs)
        got = engine.infer("sage_fused", inputs)
        assert engine.get_inference_statistics("sage_fused")["model_stats"][0]["stages"]["inductive"] == 1
    np.testing.assert_allclose(got["logits"], want["logits"], atol=1e-5)


def test_fused_model_refuses_bad_ids_and_keeps_serving(repo: Path) -> None:
    with Engine(repo, load_models=["sage_fused"]) as engine:
        with pytest.raises(InvalidArgument, match=rf"outside the graph: expected ids in \[0, {N}\)"):
            engine.infer("sage_fused", {"node_ids": np.array([1, N + 5])})
        with pytest.raises(InvalidArgument):
            engine.infer("sage_fused", {"node_ids": np.array([[1, 2]])})
        assert engine.infer("sage_fused", {"node_ids": np.array([1])})["logits"].shape == (1, C)


def test_openvino_runs_the_dense_graph(model: SageLayers, graph_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("openvino")
    export_repository(save_model(model, tmp_path / "model"), graph_dir, tmp_path / "repo", runtime="openvino")
    cfg = text_format.Parse((tmp_path / "repo" / "sage_fused" / "config.pbtxt").read_text(), mc.ModelConfig())
    assert cfg.parameters["runtime"].string_value == "openvino"
    ids = np.array([2, ISOLATED, 90])
    with Engine(tmp_path / "repo") as engine:
        want = engine.infer("sage", {"node_ids": ids})
        got = engine.infer("sage_fused", {"node_ids": ids})
    np.testing.assert_allclose(got["logits"], want["logits"], atol=1e-4)


def test_missing_dense_graph_is_a_clear_load_error(repo: Path, tmp_path: Path) -> None:
    import shutil

    broken = tmp_path / "repo"
    shutil.copytree(repo, broken)
    (broken / "sage_fused" / "1" / "model.onnx").unlink()
    with Engine(broken, load_models=[]) as engine, pytest.raises(Exception, match="no dense graph at"):
        engine.load_model("sage_fused")


def test_stage_times_reach_the_prometheus_metrics(repo: Path) -> None:
    from prometheus_client import CollectorRegistry
    from prometheus_client.parser import text_string_to_metric_families

    from servelab.metrics.collector import ServerMetrics, render

    registry = CollectorRegistry()
    with Engine(repo) as engine:
        metrics = ServerMetrics(registry, engine.dataplane.registry, process=False, gpu=False)
        for model in ("sage", "sage_fused"):
            engine.infer(model, {"node_ids": np.arange(8)})
        text = render(metrics.registry)[0].decode()
    samples = {
        (s.labels["model"], s.labels["stage"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "servelab_model_stage_duration_us"
        for s in family.samples
    }
    for stage in ("sample", "gather", "layers"):
        assert samples[("sage_fused", stage)] > 0, stage
    assert samples[("graphsage_sampler", "sample")] > 0 and samples[("graphsage_sampler", "gather")] > 0
    assert samples[("sage", "step0_graphsage_sampler")] > 0 and samples[("sage", "step1_graphsage_layers")] > 0


def test_a_pooling_model_gets_no_fused_model_and_a_stale_one_is_removed(
    model: SageLayers, graph_dir: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    export_repository(save_model(model, tmp_path / "mean"), graph_dir, repo)
    assert (repo / "sage_fused" / "config.pbtxt").is_file()
    pool = SageLayers(SageConfig(F, C, hidden=H, aggregator="pool", fanouts=FANOUTS))
    export_repository(save_model(pool, tmp_path / "pool"), graph_dir, repo)
    assert not (repo / "sage_fused").exists() and (repo / "sage" / "config.pbtxt").is_file()
