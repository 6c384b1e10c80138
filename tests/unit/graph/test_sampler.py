"""Neighbour samplers: block invariants, uniformity, reproducibility, numba vs Python, numba cache reuse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.errors import InvalidArgument
from servelab.graph.sampler import NumbaSampler, PythonSampler, SampledBlocks, gather_features
from servelab.graph.store import GraphStore, build_store
from servelab.graph.synth import synth_graph

Graph = tuple[np.ndarray, np.ndarray]


def _csr(n: int, edges: list[tuple[int, int]]) -> Graph:
    """CSR of the undirected simple graph on edges (written here, independent of the store)."""
    adj: list[set[int]] = [set() for _ in range(n)]
    for a, b in edges:
        if a != b:
            adj[a].add(b)
            adj[b].add(a)
    indptr = np.zeros(n + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(s) for s in adj])
    indices = np.array([v for s in adj for v in sorted(s)], dtype=np.int32)
    return indptr, indices


def _nbrs(g: Graph, v: int) -> set[int]:
    return set(g[1][g[0][v] : g[0][v + 1]].tolist())


def _star(degree: int) -> Graph:
    return _csr(degree + 1, [(0, i) for i in range(1, degree + 1)])


def _samplers(g: Graph, fanouts: tuple[int, int]) -> list[NumbaSampler | PythonSampler]:
    return [
        NumbaSampler(g, fanouts, mode="serial"),
        NumbaSampler(g, fanouts, mode="parallel", threads=2),
        PythonSampler(g, fanouts),
    ]


def _check_blocks(g: Graph, seeds: np.ndarray, fanouts: tuple[int, int], b: SampledBlocks) -> None:
    bsz, n1, n_all = seeds.size, b.num_hop1, b.num_nodes
    f0, f1 = fanouts
    assert b.num_seeds == bsz and b.nodes.dtype == np.int64
    np.testing.assert_array_equal(b.nodes[:bsz], seeds)
    rest = b.nodes[bsz:].tolist()
    assert len(set(rest)) == len(rest) and not set(rest) & set(seeds.tolist())
    assert b.nbr2.shape == (bsz, f0) and b.nbr1.shape == (n1, f1)
    referenced2: set[int] = set()
    for nbr, rows, k, pad, referenced in ((b.nbr2, bsz, f0, n1, referenced2), (b.nbr1, n1, f1, n_all, set())):
        for r in range(rows):
            row = nbr[r]
            real = row[row != pad]
            c = real.size
            assert np.all(row[c:] == pad) and np.all((real >= 0) & (real < pad))
            got = b.nodes[real].tolist()
            truth = _nbrs(g, int(b.nodes[r]))
            assert len(set(got)) == c and set(got) <= truth
            assert c == min(len(truth), k)
            referenced.update(real.tolist())
        if nbr is b.nbr1:
            assert set(range(n1, n_all)) <= referenced  # every hop-2 node was sampled by someone
    assert set(range(bsz, n1)) <= referenced2  # every hop-1 node was sampled by a seed


graphs = st.integers(1, 25).flatmap(
    lambda n: st.tuples(
        st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=80)
    )
)


@settings(max_examples=40, deadline=None)
@given(
    graph=graphs,
    seed_pos=st.lists(st.integers(0, 10**6), min_size=1, max_size=8),
    fanouts=st.tuples(st.integers(1, 6), st.integers(1, 6)),
    rng_seed=st.integers(0, 2**40),
)
def test_block_invariants(
    graph: tuple[int, list], seed_pos: list[int], fanouts: tuple[int, int], rng_seed: int
) -> None:
    n, edges = graph
    g = _csr(n, edges)
    seeds = np.array([p % n for p in seed_pos], dtype=np.int64)
    for s in _samplers(g, fanouts):
        _check_blocks(g, seeds, fanouts, s.sample(seeds, seed=rng_seed))


@settings(max_examples=30, deadline=None)
@given(graph=graphs, rng_seed=st.integers(0, 2**40), bsz=st.integers(1, 70))
def test_numba_reproducible_and_serial_equals_parallel(
    graph: tuple[int, list], rng_seed: int, bsz: int
) -> None:
    n, edges = graph
    g = _csr(n, edges)
    seeds = np.arange(bsz, dtype=np.int64) % n
    a = NumbaSampler(g, (3, 2), mode="serial").sample(seeds, seed=rng_seed)
    b = NumbaSampler(g, (3, 2), mode="parallel").sample(seeds, seed=rng_seed)
    c = NumbaSampler(g, (3, 2), parallel_threshold=1).sample(seeds, seed=rng_seed)
    for other in (b, c):
        for k in ("nodes", "nbr1", "nbr2"):
            np.testing.assert_array_equal(getattr(a, k), getattr(other, k))


def test_reproducible_sequences_by_constructor_seed() -> None:
    g = _star(40)
    seeds = np.array([0, 0, 3])
    for cls in (NumbaSampler, PythonSampler):
        x, y, z = cls(g, (5, 5), seed=7), cls(g, (5, 5), seed=7), cls(g, (5, 5), seed=8)
        runs_x = [x.sample(seeds).nodes for _ in range(3)]
        runs_y = [y.sample(seeds).nodes for _ in range(3)]
        runs_z = [z.sample(seeds).nodes for _ in range(3)]
        assert all(np.array_equal(p, q) for p, q in zip(runs_x, runs_y, strict=True))
        assert not all(np.array_equal(p, q) for p, q in zip(runs_x, runs_z, strict=True))
        assert not np.array_equal(runs_x[0], runs_x[1])  # successive calls draw afresh


def test_degree_zero_and_small_degree() -> None:
    g = _csr(6, [(0, 1), (0, 2), (1, 2)])  # nodes 3, 4, 5 isolated
    for s in _samplers(g, (4, 4)):
        b = s.sample(np.array([3, 0]))
        assert np.all(b.nbr2[0] == b.num_hop1)
        assert set(b.nodes[b.nbr2[1][:2]].tolist()) == {1, 2} and np.all(b.nbr2[1][2:] == b.num_hop1)
        only = s.sample(np.array([5]))
        assert only.num_nodes == 1 and only.num_hop1 == 1
        assert only.nbr2.tolist() == [[1] * 4] and only.nbr1.tolist() == [[1] * 4]


def _chi2_limit(dof: int, z: float = 4.0) -> float:
    """Chi-square quantile at normal score z (Wilson-Hilferty; z=4 -> p ~ 3e-5)."""
    a = 2.0 / (9.0 * dof)
    return dof * (1.0 - a + z * a**0.5) ** 3


def _chi2(counts: Counter, cells: list, total: int) -> float:
    exp = total / len(cells)
    return sum((counts.get(c, 0) - exp) ** 2 / exp for c in cells)


@pytest.mark.parametrize("cls", [NumbaSampler, PythonSampler])
def test_every_neighbour_equally_likely(cls: type) -> None:
    degree, fanout, draws = 30, 10, 3000
    s = cls(_star(degree), (fanout, 1), seed=11)
    counts: Counter = Counter()
    for _ in range(draws):
        b = s.sample(np.array([0]))
        counts.update(b.nodes[b.nbr2[0]].tolist())
    stat = _chi2(counts, list(range(1, degree + 1)), draws * fanout)
    assert stat < _chi2_limit(degree - 1), stat
    assert stat > 5  # a sampler that cycles deterministically would give ~0


@pytest.mark.parametrize("cls", [NumbaSampler, PythonSampler])
def test_every_subset_equally_likely(cls: type) -> None:
    s = cls(_star(5), (2, 1))
    draws = 4000
    counts: Counter = Counter()
    for i in range(draws):
        b = s.sample(np.array([0]), seed=i)
        counts[tuple(sorted(b.nodes[b.nbr2[0]].tolist()))] += 1
    cells = list(combinations(range(1, 6), 2))
    assert set(counts) == set(cells)
    assert _chi2(counts, cells, draws) < _chi2_limit(len(cells) - 1)


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> GraphStore:
    return synth_graph(
        tmp_path_factory.mktemp("g"), nodes=5_000, avg_degree=15, features=16, classes=4, seed=1
    )


def test_numba_agrees_with_python_reference(synth: GraphStore) -> None:
    rng = np.random.default_rng(0)
    nb, py = NumbaSampler(synth, seed=1), PythonSampler(synth, seed=2)
    sizes: dict[str, list[tuple[int, int]]] = {"nb": [], "py": []}
    for i in range(300):
        seeds = rng.integers(0, synth.num_nodes, 8)
        for name, s in (("nb", nb), ("py", py)):
            b = s.sample(seeds)
            if i < 5:
                _check_blocks((synth.indptr, synth.indices), seeds, (10, 10), b)
            sizes[name].append((b.num_hop1, b.num_nodes))
    a, p = np.array(sizes["nb"], dtype=float), np.array(sizes["py"], dtype=float)
    for col in (0, 1):  # mean block sizes agree within 4 standard errors
        se = np.sqrt(a[:, col].var() / len(a) + p[:, col].var() / len(p))
        assert abs(a[:, col].mean() - p[:, col].mean()) < 4 * se + 1e-9


def test_bad_seeds_are_refused(synth: GraphStore) -> None:
    for s in (NumbaSampler(synth), PythonSampler(synth)):
        with pytest.raises(InvalidArgument, match=r"seed node id 5000 \(position 1\) is outside \[0, 5000\)"):
            s.sample(np.array([1, 5000]))
        with pytest.raises(InvalidArgument, match="empty"):
            s.sample(np.array([], dtype=np.int64))
        with pytest.raises(InvalidArgument, match="integer"):
            s.sample(np.array([1.5]))
    with pytest.raises(InvalidArgument, match="fanouts"):
        NumbaSampler(synth, fanouts=(10,))
    with pytest.raises(InvalidArgument, match="mode"):
        NumbaSampler(synth, mode="gpu")


def test_gather_features(tmp_path: Path, synth: GraphStore) -> None:
    b = NumbaSampler(synth).sample(np.array([3, 4, 5]))
    x = gather_features(synth, b.nodes)
    np.testing.assert_array_equal(x, np.asarray(synth.features)[b.nodes])
    buf = np.full((1000, synth.num_features), np.nan, dtype=np.float32)
    y = gather_features(synth, b.nodes, out=buf)
    assert y.base is buf and np.array_equal(y, x)
    half, _ = build_store(
        tmp_path, [0, 1], [1, 2], features=np.eye(3), feature_dtype="float16", progress=False
    )
    z = gather_features(half, np.array([2, 0]))
    assert z.dtype == np.float32 and z.tolist() == [[0, 0, 1], [1, 0, 0]]
    with pytest.raises(InvalidArgument, match="float32"):
        gather_features(synth, b.nodes, out=np.zeros((2, synth.num_features), dtype=np.float32))


_CACHE_SCRIPT = textwrap.dedent(
    """
    import json, numpy as np
    from servelab.graph import _sampler_kernels as k
    from servelab.graph.sampler import NumbaSampler
    indptr = np.array([0, 2, 3, 4], dtype=np.int64)
    indices = np.array([1, 2, 0, 0], dtype=np.int32)
    from servelab.graph import _fused_kernels as fk
    NumbaSampler((indptr, indices)).warmup()
    block = NumbaSampler((indptr, indices)).sample(np.array([0]), seed=1)
    feats = np.ones((3, 4), np.float32)
    for parallel in (False, True):  # the fused model's aggregation kernels
        fk.dense_inputs(feats, block.nodes, block.nbr1, block.nbr2, parallel)
    kernels = (k._sample, fk.dense_serial, fk._hop1_parallel, fk._hop2)  # those called from Python
    hits = sum(sum(f.stats.cache_hits.values()) for f in kernels)
    misses = sum(sum(f.stats.cache_misses.values()) for f in kernels)
    print(json.dumps({"hits": hits, "misses": misses}))
    """
)


@pytest.mark.slow  # two fresh interpreters, the first compiles the kernels (~5-20 s)
def test_compiled_kernels_are_reused_after_restart(tmp_path: Path) -> None:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))

    def run() -> dict[str, int]:
        out = subprocess.run(
            [sys.executable, "-c", _CACHE_SCRIPT], env=env, capture_output=True, text=True, timeout=240
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = run()
    assert first["misses"] >= 1 and first["hits"] == 0
    assert list((tmp_path / "numba").rglob("*.nbi")) and list((tmp_path / "numba").rglob("*.nbc"))
    second = run()
    assert second == {"hits": first["misses"], "misses": 0}


def test_serial_kernel_is_thread_safe(synth: GraphStore) -> None:
    from concurrent.futures import ThreadPoolExecutor

    s = NumbaSampler(synth, mode="auto", parallel_threshold=16)
    batches = [np.arange(i, i + (4 if i % 2 else 24)) for i in range(40)]
    want = [s.sample(b, seed=i).nodes for i, b in enumerate(batches)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda ib: s.sample(ib[1], seed=ib[0]).nodes, enumerate(batches)))
    assert all(np.array_equal(a, b) for a, b in zip(want, got, strict=True))
