"""Inductive requests: new nodes and edges in the request give the answer of a store built with them.

Every degree stays <= the fan-outs, so sampling takes all neighbours and both sides are deterministic:
the only freedom left is the order of rows, which the mean aggregator does not see (beyond rounding).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from google.protobuf import text_format

from servelab import Engine
from servelab.backends.base import BackendContext
from servelab.errors import InvalidArgument
from servelab.graph._overlay import build_overlay, sample_union
from servelab.graph.backend import GraphSamplerBackend
from servelab.graph.export import export_repository
from servelab.graph.model import SageConfig, SageLayers, load_model, save_model
from servelab.graph.sampler import NumbaSampler, gather_features
from servelab.graph.store import GraphStore, build_store
from servelab.protocol import model_config_pb2 as mc

N, F, C, H = 60, 6, 3, 16
FANOUTS = (5, 5)
#: edges of the two extra nodes N and N + 1: N joins stored nodes 3, 17, 40 and node N + 1
EXTRA = np.array([[N, 3], [17, N], [N, 40], [N, N + 1]], np.int64)
#: a new edge between two stored nodes
STORED_PAIR = np.array([[5, 30]], np.int64)
FEATS = np.random.default_rng(1).standard_normal((N + 2, F), dtype=np.float32)


def _ring() -> tuple[np.ndarray, np.ndarray]:
    ring = np.arange(N)
    return np.concatenate([ring, ring[::7]]), np.concatenate([(ring + 1) % N, (ring[::7] + N // 2) % N])


def _store(path: Path, with_extra: bool) -> Path:
    src, dst = _ring()
    n = N
    if with_extra:
        edges = np.concatenate([EXTRA, STORED_PAIR])
        src, dst, n = np.concatenate([src, edges[:, 0]]), np.concatenate([dst, edges[:, 1]]), N + 2
    store, _ = build_store(path, src, dst, num_nodes=n, features=FEATS[:n], progress=False)
    assert store.degrees().max() <= min(FANOUTS)
    return path


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(without the extra nodes and the stored pair, with them)."""
    root = tmp_path_factory.mktemp("graphs")
    return _store(root / "without", False), _store(root / "with", True)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    return save_model(
        SageLayers(SageConfig(F, C, hidden=H, fanouts=FANOUTS)), tmp_path_factory.mktemp("model")
    )


def _layers(model_dir: Path, x: np.ndarray, nbr1: np.ndarray, nbr2: np.ndarray) -> np.ndarray:
    model, _ = load_model(model_dir)
    with torch.no_grad():
        return model(torch.from_numpy(x), torch.from_numpy(nbr1), torch.from_numpy(nbr2))[0].numpy()


def _reference(model_dir: Path, graph: Path, ids: np.ndarray) -> np.ndarray:
    """Logits from the store built with the extra nodes, through the ordinary numba sampler."""
    store = GraphStore.open(graph)
    block = NumbaSampler(store, FANOUTS).sample(ids)
    return _layers(model_dir, gather_features(store, block.nodes), block.nbr1, block.nbr2)


def _backend(graph: Path) -> GraphSamplerBackend:
    cfg = mc.ModelConfig(name="graphsage_sampler", backend="graphsage_sampler")
    cfg.parameters["graph_dir"].string_value = "."  # relative to the repository, which is the store folder here
    cfg.parameters["fanouts"].string_value = f"{FANOUTS[0]},{FANOUTS[1]}"
    backend = GraphSamplerBackend(BackendContext("graphsage_sampler", 1, graph / "m" / "1", cfg))
    backend.load()
    return backend


def _request(ids: list[int]) -> dict[str, np.ndarray]:
    return {
        "node_ids": np.array(ids, np.int64),
        "new_features": FEATS[N:],
        "new_edges": np.concatenate([EXTRA, STORED_PAIR]),
    }


# Seeds: the new nodes, stored nodes that gain an edge to them, their neighbours (2 hops away from
# a new node), both ends of the new stored pair and two nodes more than 2 hops from every addition.
IDS = [N, N + 1, 3, 17, 40, 4, 2, 5, 30, 50, 25]


def test_backend_block_matches_the_store_built_with_the_additions(
    stores: tuple[Path, Path], model_dir: Path
) -> None:
    without, with_extra = stores
    backend = _backend(without)
    out = backend.infer(_request(IDS))
    got = _layers(model_dir, out["x"], out["nbr1"], out["nbr2"])
    np.testing.assert_allclose(got, _reference(model_dir, with_extra, np.array(IDS)), atol=1e-5)
    # The same multiset of (target, neighbour) features: rows of x are the features of the union graph.
    store = GraphStore.open(with_extra)
    ref = NumbaSampler(store, FANOUTS).sample(np.array(IDS))
    assert len(out["x"]) == ref.num_nodes and len(out["nbr1"]) == ref.num_hop1
    stages = backend.stage_times()
    assert stages["inductive"] == 1 and stages["count"] == 1 and stages["seeds"] == len(IDS)


def test_the_sage_ensemble_passes_new_nodes_through(
    stores: tuple[Path, Path], model_dir: Path, tmp_path: Path
) -> None:
    without, with_extra = stores
    repo = tmp_path / "repo"
    export_repository(model_dir, without, repo, runtime="onnxruntime")
    with Engine(repo) as engine:
        got = engine.infer("sage", _request(IDS))["logits"]
        plain = engine.infer("sage", {"node_ids": np.array([50, 25], np.int64)})["logits"]
        only_edges = engine.infer("sage", {"node_ids": np.array([5], np.int64), "new_edges": STORED_PAIR})
        stats = engine.get_inference_statistics("graphsage_sampler")
    np.testing.assert_allclose(got, _reference(model_dir, with_extra, np.array(IDS)), atol=1e-5)
    # Without the optional inputs nothing changes; nodes far from the additions agree either way.
    np.testing.assert_allclose(plain, _reference(model_dir, without, np.array([50, 25])), atol=1e-5)
    np.testing.assert_allclose(plain, got[[IDS.index(50), IDS.index(25)]], atol=1e-5)
    # An edge between stored nodes alone (no new_features) is an addition too.
    store_with_pair = tmp_path / "pair"
    src, dst = _ring()
    build_store(
        store_with_pair,
        np.append(src, 5),
        np.append(dst, 30),
        num_nodes=N,
        features=FEATS[:N],
        progress=False,
    )
    np.testing.assert_allclose(
        only_edges["logits"], _reference(model_dir, store_with_pair, np.array([5])), atol=1e-5
    )
    assert stats["model_stats"][0]["stages"]["inductive"] == 2


def test_exported_configs_mark_the_new_inputs_optional(
    stores: tuple[Path, Path], model_dir: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    export_repository(model_dir, stores[0], repo, runtime="onnxruntime")
    for name in ("graphsage_sampler", "sage"):
        cfg = text_format.Parse((repo / name / "config.pbtxt").read_text(), mc.ModelConfig())
        assert [(i.name, list(i.dims), i.optional) for i in cfg.input] == [
            ("node_ids", [-1], False),
            ("new_features", [-1, F], True),
            ("new_edges", [-1, 2], True),
        ]
    layers = text_format.Parse((repo / "graphsage_layers" / "config.pbtxt").read_text(), mc.ModelConfig())
    assert layers.parameters["allow_spinning"].string_value == "0"  # thread budget shared with the sampler
    sage = text_format.Parse((repo / "sage" / "config.pbtxt").read_text(), mc.ModelConfig())
    assert dict(sage.ensemble_scheduling.step[0].input_map) == {
        n: n for n in ("node_ids", "new_features", "new_edges")
    }


def test_repeats_self_loops_and_known_edges_are_dropped(stores: tuple[Path, Path]) -> None:
    store = GraphStore.open(stores[0])
    indptr, indices = np.asarray(store.indptr), np.asarray(store.indices)
    edges = np.array([[N, 3], [3, N], [N, 3], [N, N], [0, 1], [1, 0], [5, 30]], np.int64)
    overlay = build_overlay(indptr, indices, F, FEATS[N : N + 1], edges)
    adjacency = {
        int(v): sorted(overlay.indices[overlay.indptr[i] : overlay.indptr[i + 1]].tolist())
        for i, v in enumerate(overlay.nodes)
    }
    assert adjacency == {3: [N], 5: [30], 30: [5], N: [3]}  # (0, 1) is already stored
    nodes, n1, nbr1, nbr2 = sample_union(indptr, indices, overlay, np.array([N]), FANOUTS, 0)
    assert nodes.tolist()[:2] == [N, 3] and n1 == 2 and nbr2[0].tolist() == [1, 2, 2, 2, 2]
    assert nbr1.shape == (2, FANOUTS[1]) and sorted(nodes[nbr1[1][nbr1[1] < len(nodes)]].tolist()) == [
        2,
        4,
        N,
    ]


def test_without_additions_the_union_kernel_samples_like_the_stored_one(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(0)  # degrees well above the fan-outs: sampling really draws
    n = 400
    store, _ = build_store(
        tmp_path / "g",
        rng.integers(0, n, 8000),
        rng.integers(0, n, 8000),
        num_nodes=n,
        features=np.zeros((n, 2), np.float32),
        progress=False,
    )
    indptr, indices = np.asarray(store.indptr), np.asarray(store.indices)
    seeds = rng.choice(n, 32, replace=False)
    want = NumbaSampler(store, FANOUTS).sample(seeds, seed=1234)
    nodes, n1, nbr1, nbr2 = sample_union(
        indptr, indices, build_overlay(indptr, indices, 2, None, None), seeds, FANOUTS, 1234
    )
    np.testing.assert_array_equal(nodes, want.nodes)
    np.testing.assert_array_equal(nbr1, want.nbr1)
    np.testing.assert_array_equal(nbr2, want.nbr2)
    assert n1 == want.num_hop1


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ({"node_ids": [N]}, rf"node_ids {N} are outside the graph: expected ids in \[0, {N}\)"),
        (
            {"node_ids": [N + 1], "new_features": FEATS[:1]},
            rf"node_ids {N + 1} are outside the graph: expected ids in \[0, {N + 1}\) \({N} stored nodes \+ 1",
        ),
        (
            {"node_ids": [0], "new_features": np.ones((1, F + 1), np.float32)},
            r"new_features must be float \[new nodes, 6\]",
        ),
        (
            {"node_ids": [0], "new_features": FEATS[:1], "new_edges": [[0, N + 7]]},
            rf"new_edges name node ids {N + 7} outside",
        ),
        ({"node_ids": [0], "new_edges": [[0, 1, 2]]}, r"new_edges must be integer \[edges, 2\]"),
    ],
)
def test_bad_additions_name_what_is_wrong(
    stores: tuple[Path, Path], request_: dict[str, object], message: str
) -> None:
    backend = _backend(stores[0])
    inputs = {k: np.asarray(v, np.int64 if k != "new_features" else np.float32) for k, v in request_.items()}
    with pytest.raises(InvalidArgument, match=message):
        backend.infer(inputs)
