"""GraphSamplerBackend on a small stored graph: load, infer, shapes, stage times, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from servelab.backends import backend_class
from servelab.backends.base import BackendContext
from servelab.errors import InvalidArgument, NotFound
from servelab.graph.backend import GraphSamplerBackend
from servelab.graph.store import build_store
from servelab.protocol import model_config_pb2 as mc

N, F = 300, 8


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    src = rng.integers(0, N - 1, 2000)  # node N-1 gets no edges: degree 0
    dst = rng.integers(0, N - 1, 2000)
    feats = rng.standard_normal((N, F), dtype=np.float32)
    out = tmp_path_factory.mktemp("repo") / "graphs" / "small"
    build_store(out, src, dst, num_nodes=N, features=feats, progress=False)
    return out


def _backend(store_dir: Path, **params: str) -> GraphSamplerBackend:
    repo = store_dir.parent.parent
    cfg = mc.ModelConfig(name="graphsage_sampler", backend="graphsage_sampler")
    cfg.output.append(mc.ModelOutput(name="x", data_type=mc.TYPE_FP32, dims=[-1, F]))
    for key, value in {"graph_dir": "graphs/small", "fanouts": "4,3", **params}.items():
        cfg.parameters[key].string_value = value
    ctx = BackendContext("graphsage_sampler", 1, repo / "graphsage_sampler" / "1", cfg)
    backend = GraphSamplerBackend(ctx)
    backend.load()
    return backend


def test_registered_by_name() -> None:
    assert backend_class("graphsage_sampler") is GraphSamplerBackend


@pytest.mark.parametrize("sampler", ["numba", "python"])
def test_infer_returns_padded_block(graph_dir: Path, sampler: str) -> None:
    backend = _backend(graph_dir, sampler=sampler)
    ids = np.array([5, 17, N - 1, 5], np.int64)
    out = backend.infer({"node_ids": ids})
    x, nbr1, nbr2 = out["x"], out["nbr1"], out["nbr2"]
    assert x.dtype == np.float32 and nbr1.dtype == np.int64 and nbr2.dtype == np.int64
    n_all, n1 = len(x), len(nbr1)
    assert x.shape[1] == F and nbr1.shape[1] == 3 and nbr2.shape == (4, 4)
    assert len(ids) <= n1 <= n_all
    # Seeds come first, in request order: their rows are their own features.
    np.testing.assert_array_equal(x[:4], backend.store.features[ids])
    assert nbr1.min() >= 0 and nbr1.max() <= n_all and nbr2.min() >= 0 and nbr2.max() <= n1
    # The isolated node samples nothing: only padding.
    assert (nbr2[2] == n1).all() and (nbr1[2] == n_all).all()
    # Every real hop-1 neighbour of a seed is one of its graph neighbours.
    for row in range(len(ids)):
        real = nbr2[row][nbr2[row] < n1]
        got = {tuple(x[r]) for r in real}
        allowed = {tuple(backend.store.features[v]) for v in backend.store.neighbors(int(ids[row]))}
        assert got <= allowed


def test_stage_times_accumulate(graph_dir: Path) -> None:
    backend = _backend(graph_dir)
    for _ in range(3):
        backend.infer({"node_ids": np.arange(10, dtype=np.int64)})
    stages = backend.stage_times()
    assert stages["count"] == 3 and stages["seeds"] == 30
    assert stages["sample_ns"] > 0 and stages["gather_ns"] > 0 and stages["nodes"] >= 30


def test_int32_ids_are_accepted(graph_dir: Path) -> None:
    out = _backend(graph_dir).infer({"node_ids": np.array([1, 2], np.int32)})
    assert out["nbr2"].shape == (2, 4)


@pytest.mark.parametrize(
    ("ids", "match"),
    [
        (
            np.array([3, -1, N, 7, N + 5], np.int64),
            rf"node_ids -1, {N}, {N + 5} are outside the graph.*\[0, {N}\)",
        ),
        (np.zeros(0, np.int64), "non-empty 1-D integer"),
        (np.zeros((2, 2), np.int64), "non-empty 1-D integer"),
        (np.array([1.0, 2.0]), "non-empty 1-D integer"),
    ],
)
def test_bad_node_ids_are_invalid_argument(graph_dir: Path, ids: np.ndarray, match: str) -> None:
    backend = _backend(graph_dir)
    with pytest.raises(InvalidArgument, match=match):
        backend.infer({"node_ids": ids})
    assert isinstance(backend.execute([{"node_ids": ids}])[0], InvalidArgument)


def test_many_bad_ids_are_summarised(graph_dir: Path) -> None:
    with pytest.raises(InvalidArgument, match="and 5 more"):
        _backend(graph_dir).infer({"node_ids": np.arange(N, N + 15, dtype=np.int64)})


def test_missing_input_names_the_expected_one(graph_dir: Path) -> None:
    with pytest.raises(InvalidArgument, match="expects input 'node_ids'"):
        _backend(graph_dir).infer({"ids": np.array([1], np.int64)})


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        ({"graph_dir": ""}, InvalidArgument, "graph_dir is required"),
        ({"graph_dir": "graphs/none"}, NotFound, "no graph store"),
        ({"fanouts": "10"}, InvalidArgument, "hop1,hop2"),
        ({"fanouts": "0,3"}, InvalidArgument, "positive"),
        ({"sampler": "dgl"}, InvalidArgument, "'numba' or 'python'"),
    ],
)
def test_bad_config_fails_load(graph_dir: Path, params: dict[str, str], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        _backend(graph_dir, **params)


def test_feature_width_mismatch_fails_load(graph_dir: Path) -> None:
    repo = graph_dir.parent.parent
    cfg = mc.ModelConfig(name="s", backend="graphsage_sampler")
    cfg.output.append(mc.ModelOutput(name="x", data_type=mc.TYPE_FP32, dims=[-1, F + 1]))
    cfg.parameters["graph_dir"].string_value = "graphs/small"  # relative to the repository (absolute is refused)
    backend = GraphSamplerBackend(BackendContext("s", 1, repo / "s" / "1", cfg))
    with pytest.raises(InvalidArgument, match=f"{F} features"):
        backend.load()
