"""Graph store: build + validation, edge-file formats, memmap round trip, synthetic graph properties."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from servelab.errors import InvalidArgument, NotFound
from servelab.graph.store import GraphStore, build_from_edge_file, build_store
from servelab.graph.synth import synth_graph


def _adj(store: GraphStore) -> set[tuple[int, int]]:
    return {(i, int(j)) for i in range(store.num_nodes) for j in store.neighbors(i)}


def test_build_symmetric_csr_and_report(tmp_path: Path) -> None:
    src = np.array([0, 1, 1, 2, 2, 3, 0, 1])
    dst = np.array([1, 2, 2, 2, 0, 3, 1, 0])
    store, rep = build_store(tmp_path, src, dst, num_nodes=6, progress=False)
    assert _adj(store) == {(0, 1), (1, 0), (1, 2), (2, 1), (0, 2), (2, 0)}
    assert rep.self_loops_removed == 2
    assert rep.duplicate_edges_removed == 2  # (1,2) twice and (0,1) twice
    assert rep.num_edges == store.num_edges == 6
    assert rep.isolated_nodes == 3  # node 3 (only a self-loop), 4 and 5
    assert store.indptr.dtype == np.int64 and store.indices.dtype == np.int32
    for i in range(store.num_nodes):  # neighbours sorted within a row
        assert np.all(np.diff(store.neighbors(i)) > 0)
    assert any("self-loop" in w for w in rep.warnings)


def test_build_directed_keeps_direction(tmp_path: Path) -> None:
    store, rep = build_store(tmp_path, [0, 1], [1, 2], symmetric=False, progress=False)
    assert _adj(store) == {(0, 1), (1, 2)}
    assert rep.reverse_edges_added == 0 and rep.isolated_nodes == 0 and store.num_nodes == 3


@pytest.mark.parametrize(
    ("src", "dst", "n", "match"),
    [
        (
            [0, 1, 7, 9],
            [1, 2, 0, 1],
            5,
            r"2 edge\(s\) have node ids outside \[0, 5\); first: edge #2 \(7 -> 0\)",
        ),
        ([0, -1], [1, 2], None, r"1 edge\(s\) have node ids outside non-negative"),
        ([], [], None, "edge list is empty"),
        ([3, 4], [3, 4], None, "only self-loops"),
        ([0, 1, 2], [1, 2], None, "same length"),
        ([0.5, 1.0], [1, 2], None, "integer node ids"),
    ],
)
def test_bad_edges_are_refused(tmp_path: Path, src: list, dst: list, n: int | None, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        build_store(tmp_path, np.array(src), np.array(dst), n, progress=False)


def test_bad_features_labels_splits(tmp_path: Path) -> None:
    e = (np.array([0, 1]), np.array([1, 2]))
    with pytest.raises(InvalidArgument, match=r"shape \[num_nodes=3"):
        build_store(tmp_path, *e, features=np.zeros((2, 4)), progress=False)
    bad = np.zeros((3, 2), dtype=np.float32)
    bad[1, 1] = np.nan
    with pytest.raises(InvalidArgument, match="NaN or infinity .* node 1"):
        build_store(tmp_path, *e, features=bad, progress=False)
    with pytest.raises(InvalidArgument, match="labels must be >= 0"):
        build_store(tmp_path, *e, labels=np.array([0, -2, 1]), progress=False)
    with pytest.raises(InvalidArgument, match="overlaps"):
        build_store(tmp_path, *e, splits={"train": [0, 1], "test": [1]}, progress=False)
    with pytest.raises(InvalidArgument, match="unknown split"):
        build_store(tmp_path, *e, splits={"holdout": [0]}, progress=False)
    with pytest.raises(InvalidArgument, match="feature_dtype"):
        build_store(tmp_path, *e, feature_dtype="int8", progress=False)


def test_open_round_trip_memmap(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    feats = rng.standard_normal((50, 8))
    labels = rng.integers(0, 4, 50)
    src, dst = rng.integers(0, 50, 300), rng.integers(0, 50, 300)
    splits = {"train": np.arange(0, 30), "val": np.arange(30, 40), "test": np.arange(40, 50)}
    built, _ = build_store(
        tmp_path, src, dst, 50, feats, labels, splits, feature_dtype="float16", progress=False
    )
    store = GraphStore.open(tmp_path)
    assert isinstance(store.features, np.memmap) and store.features.dtype == np.float16
    assert not store.features.flags.writeable
    np.testing.assert_allclose(store.features, feats, atol=2e-3, rtol=2e-3)
    np.testing.assert_array_equal(store.labels, labels)
    np.testing.assert_array_equal(store.split("val"), splits["val"])
    np.testing.assert_array_equal(store.indices, built.indices)
    assert (store.num_nodes, store.num_features, store.num_classes) == (50, 8, 4)
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert man["build"]["num_input_edges"] == 300


def test_open_errors(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match=r"manifest.json is missing"):
        GraphStore.open(tmp_path)
    build_store(tmp_path, [0], [1], progress=False)
    (tmp_path / "indices.npy").unlink()
    with pytest.raises(NotFound, match="indices.npy is missing"):
        GraphStore.open(tmp_path)


def test_edge_file_formats(tmp_path: Path) -> None:
    want = {(0, 1), (1, 0), (1, 2), (2, 1), (2, 5), (5, 2)}
    (tmp_path / "a.csv").write_text("# a comment\nsrc,dst\n0,1\n1,2\n2,5\n")
    (tmp_path / "b.tsv").write_text("0\t1\n1\t2\n2\t5\n")
    np.save(tmp_path / "c.npy", np.array([[0, 1], [1, 2], [2, 5]], dtype=np.int32))
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"src": [0, 1, 2], "dst": [1, 2, 5], "w": [1.0, 1.0, 1.0]}), tmp_path / "d.parquet"
    )
    for name in ("a.csv", "b.tsv", "c.npy", "d.parquet"):
        store, _ = build_from_edge_file(tmp_path / name, tmp_path / f"out_{name}", progress=False)
        assert _adj(store) == want, name


def test_edge_file_errors(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("0,1\n1,b\n")
    with pytest.raises(InvalidArgument, match="2 integer columns"):
        build_from_edge_file(tmp_path / "x.csv", tmp_path / "o", progress=False)
    (tmp_path / "one.csv").write_text("0\n1\n")
    with pytest.raises(InvalidArgument, match="2 integer columns"):
        build_from_edge_file(tmp_path / "one.csv", tmp_path / "o", progress=False)
    np.save(tmp_path / "y.npy", np.zeros((4, 3), dtype=np.int64))
    with pytest.raises(InvalidArgument, match=r"\[E, 2\]"):
        build_from_edge_file(tmp_path / "y.npy", tmp_path / "o", progress=False)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": [0], "b": [1]}), tmp_path / "z.parquet")
    with pytest.raises(InvalidArgument, match="'src' and 'dst'"):
        build_from_edge_file(tmp_path / "z.parquet", tmp_path / "o", progress=False)
    with pytest.raises(NotFound):
        build_from_edge_file(tmp_path / "missing.csv", tmp_path / "o", progress=False)
    (tmp_path / "g.json").write_text("{}")
    with pytest.raises(InvalidArgument, match="expected .csv"):
        build_from_edge_file(tmp_path / "g.json", tmp_path / "o", progress=False)


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> GraphStore:
    return synth_graph(
        tmp_path_factory.mktemp("synth"), nodes=20_000, avg_degree=15, features=32, classes=8, seed=3
    )


def test_synth_shape_and_splits(synth: GraphStore) -> None:
    assert synth.num_nodes == 20_000 and synth.num_features == 32 and synth.num_classes == 8
    assert 13.5 < synth.num_edges / synth.num_nodes < 16.5
    parts = [synth.split(s) for s in ("train", "val", "test")]
    assert [p.size for p in parts] == [12_000, 4_000, 4_000]
    assert np.unique(np.concatenate(parts)).size == 20_000
    assert np.bincount(np.asarray(synth.labels), minlength=8).min() > 2_000


def test_synth_degree_skew(synth: GraphStore) -> None:
    deg = np.sort(synth.degrees())[::-1]
    assert deg[0] > 20 * np.median(deg)
    top1 = deg[: deg.size // 100].sum() / deg.sum()
    assert top1 > 0.08  # a uniform (Erdos-Renyi) graph would give ~0.02
    # tail exponent from the complementary CDF between degree 20 and 200: about -(2.3 - 1)
    ks = np.array([20, 40, 80, 160])
    ccdf = np.array([(deg >= k).mean() for k in ks])
    slope = np.polyfit(np.log(ks), np.log(ccdf), 1)[0]
    assert -1.8 < slope < -0.9


def _nearest_centroid_accuracy(store: GraphStore, z: np.ndarray) -> float:
    y = np.asarray(store.labels)
    tr, te = store.split("train"), store.split("test")
    cent = np.stack([z[tr][y[tr] == c].mean(0) for c in range(store.num_classes)])
    dist = ((z[te, None, :] - cent[None]) ** 2).sum(-1)
    return float((dist.argmin(1) == y[te]).mean())


def test_synth_homophily_makes_aggregation_pay(synth: GraphStore) -> None:
    y = np.asarray(synth.labels)
    deg = synth.degrees()
    src = np.repeat(np.arange(synth.num_nodes), deg)
    assert (y[src] == y[np.asarray(synth.indices)]).mean() > 0.7
    x = np.asarray(synth.features, dtype=np.float32)
    sums = np.add.reduceat(
        x[np.asarray(synth.indices)], np.minimum(synth.indptr[:-1], synth.num_edges - 1), axis=0
    )
    sums[deg == 0] = 0
    agg = (x + sums) / (1 + deg)[:, None]
    alone, with_nbrs = _nearest_centroid_accuracy(synth, x), _nearest_centroid_accuracy(synth, agg)
    assert 0.25 < alone < 0.85
    assert with_nbrs > alone + 0.15


def test_synth_is_reproducible(tmp_path: Path) -> None:
    a = synth_graph(tmp_path / "a", nodes=500, avg_degree=6, features=4, classes=3, seed=9)
    b = synth_graph(tmp_path / "b", nodes=500, avg_degree=6, features=4, classes=3, seed=9)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.features, b.features)
    with pytest.raises(InvalidArgument, match="exponent must be > 2"):
        synth_graph(tmp_path / "c", nodes=500, exponent=1.5)
