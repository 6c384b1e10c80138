"""2-hop neighbour samplers (numba and a pure-Python reference) and feature gathering.

Both samplers return :class:`SampledBlocks`; for each target they draw ``fanout`` neighbours uniformly
without replacement (all of them when the degree is at most the fan-out, only padding at degree 0).
"""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servelab.errors import InvalidArgument
from servelab.graph.store import GraphStore

__all__ = ["NumbaSampler", "PythonSampler", "SampledBlocks", "gather_features"]

_MASK63 = (1 << 63) - 1
_MODES = ("auto", "serial", "parallel")


@dataclass
class SampledBlocks:
    """Two message-passing blocks for one batch of seeds (see the module docstring of the model)."""

    nodes: np.ndarray  # int64 [n_all]: seeds (request order), then new hop-1, then new hop-2 nodes
    num_seeds: int  # B
    num_hop1: int  # n1: rows 0..n1-1 are the targets of the first SAGE layer
    nbr1: np.ndarray  # int64 [n1, fanouts[1]]: local rows into nodes, padded with n_all
    nbr2: np.ndarray  # int64 [B, fanouts[0]]: local rows into 0..n1-1, padded with n1

    @property
    def num_nodes(self) -> int:
        """n_all: rows of the feature matrix this block needs."""
        return int(self.nodes.shape[0])


def _graph_arrays(graph: GraphStore | tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(graph, GraphStore):
        indptr, indices = graph.indptr, graph.indices
    elif isinstance(graph, tuple) and len(graph) == 2:
        indptr, indices = graph
    else:
        raise InvalidArgument("expected a GraphStore or an (indptr, indices) tuple")
    indptr = np.asarray(indptr)
    indices = np.asarray(indices)
    if indptr.ndim != 1 or indptr.size < 2 or indptr.dtype != np.int64:
        raise InvalidArgument(f"indptr must be int64 [num_nodes + 1], got {indptr.dtype} {indptr.shape}")
    if indices.ndim != 1 or indices.dtype not in (np.int32, np.int64):
        raise InvalidArgument(
            f"indices must be int32 or int64 [num_edges], got {indices.dtype} {indices.shape}"
        )
    if int(indptr[-1]) != indices.size:
        raise InvalidArgument(f"indptr[-1]={int(indptr[-1])} does not match {indices.size} indices")
    return np.ascontiguousarray(indptr), np.ascontiguousarray(indices)


def _check_fanouts(fanouts: Sequence[int]) -> tuple[int, int]:
    f = tuple(int(x) for x in fanouts)
    if len(f) != 2 or min(f) < 1:
        raise InvalidArgument(f"fanouts must be two positive integers (hop 1, hop 2), got {tuple(fanouts)}")
    return f[0], f[1]


def _seeds_array(seeds: object) -> np.ndarray:
    arr = np.asarray(seeds)
    if arr.dtype != np.int64:
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise InvalidArgument(f"seeds must be integer node ids, got dtype {arr.dtype}")
        arr = arr.astype(np.int64)
    if arr.ndim != 1:
        raise InvalidArgument(f"seeds must be a 1-D array of node ids, got shape {arr.shape}")
    if arr.size == 0:
        raise InvalidArgument("seeds is empty: give at least one node id")
    return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)


class NumbaSampler:
    """Compiled sampler: serial kernel for small batches, prange-parallel kernel from parallel_threshold.

    ``threads`` caps numba's worker threads for the parallel kernel (leave cores to the model runtime).
    Parallel launches are serialised by a lock (numba's workqueue layer must not be entered twice);
    the serial kernel releases the GIL and runs concurrently from any number of threads.
    """

    _parallel_lock = threading.Lock()

    def __init__(
        self,
        graph: GraphStore | tuple[np.ndarray, np.ndarray],
        fanouts: Sequence[int] = (10, 10),
        seed: int = 0,
        parallel_threshold: int = 64,
        *,
        threads: int | None = None,
        mode: str = "auto",
    ) -> None:
        from servelab.graph import _sampler_kernels as kernels

        if mode not in _MODES:
            raise InvalidArgument(f"mode must be one of {', '.join(_MODES)}, got {mode!r}")
        if threads is not None and threads < 1:
            raise InvalidArgument(f"threads must be >= 1, got {threads}")
        self.indptr, self.indices = _graph_arrays(graph)
        self.num_nodes = self.indptr.size - 1
        self.fanouts = _check_fanouts(fanouts)
        self.seed = int(seed) & _MASK63
        self.parallel_threshold = int(parallel_threshold)
        self.threads = threads
        self.mode = mode
        self._kernel = kernels._sample
        self._calls = itertools.count()

    def _next_seed(self) -> int:
        return (self.seed * 6364136223846793005 + 1442695040888963407 * (next(self._calls) + 1)) & _MASK63

    def sample(self, seeds: np.ndarray, seed: int | None = None) -> SampledBlocks:
        """Sample the 2-hop blocks of seeds; a given seed makes the result reproducible."""
        s = _seeds_array(seeds)
        rng = self._next_seed() if seed is None else int(seed) & _MASK63
        parallel = self.mode == "parallel" or (self.mode == "auto" and s.size >= self.parallel_threshold)
        f0, f1 = self.fanouts
        if parallel:
            with self._parallel_lock:
                if self.threads is not None:
                    import numba

                    numba.set_num_threads(min(self.threads, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
                out = self._kernel(self.indptr, self.indices, s, f0, f1, rng, True)
        else:
            out = self._kernel(self.indptr, self.indices, s, f0, f1, rng, False)
        nodes, n1, nbr1, nbr2, bad = out
        if n1 < 0:
            raise InvalidArgument(
                f"seed node id {int(s[bad])} (position {bad}) is outside [0, {self.num_nodes})"
            )
        return SampledBlocks(nodes, int(s.size), n1, nbr1, nbr2)

    def warmup(self) -> None:
        """Compile (or load from cache) both kernels now rather than on the first request."""
        one = np.zeros(1, dtype=np.int64)
        self._kernel(self.indptr, self.indices, one, *self.fanouts, 0, False)
        with self._parallel_lock:
            self._kernel(self.indptr, self.indices, one, *self.fanouts, 0, True)


class PythonSampler:
    """Pure-Python reference sampler (random.sample on lists) with the same output contract."""

    def __init__(
        self,
        graph: GraphStore | tuple[np.ndarray, np.ndarray],
        fanouts: Sequence[int] = (10, 10),
        seed: int = 0,
    ) -> None:
        self.indptr, self.indices = _graph_arrays(graph)
        self.num_nodes = self.indptr.size - 1
        self.fanouts = _check_fanouts(fanouts)
        self._rng = random.Random(seed)

    def _neighbours(self, node: int, k: int, rng: random.Random) -> list[int]:
        lo, hi = int(self.indptr[node]), int(self.indptr[node + 1])
        nbrs = self.indices[lo:hi].tolist()
        return nbrs if len(nbrs) <= k else rng.sample(nbrs, k)

    def _hop(
        self, rows: list[int], k: int, rng: random.Random, nodes: list[int], pos: dict[int, int]
    ) -> list[list[int]]:
        out = []
        for g in rows:
            local = []
            for v in self._neighbours(g, k, rng):
                if v not in pos:
                    pos[v] = len(nodes)
                    nodes.append(v)
                local.append(pos[v])
            out.append(local)
        return out

    def sample(self, seeds: np.ndarray, seed: int | None = None) -> SampledBlocks:
        """Sample the 2-hop blocks of seeds; a given seed makes the result reproducible."""
        s = _seeds_array(seeds).tolist()
        bad = [i for i, v in enumerate(s) if not 0 <= v < self.num_nodes]
        if bad:
            raise InvalidArgument(
                f"seed node id {s[bad[0]]} (position {bad[0]}) is outside [0, {self.num_nodes})"
            )
        rng = self._rng if seed is None else random.Random(seed)
        f0, f1 = self.fanouts
        nodes = list(s)
        pos: dict[int, int] = {}
        for i, v in enumerate(s):
            pos.setdefault(v, i)
        l2 = self._hop(s, f0, rng, nodes, pos)
        n1 = len(nodes)
        l1 = self._hop(nodes[:n1], f1, rng, nodes, pos)
        n_all = len(nodes)
        nbr2 = np.array([r + [n1] * (f0 - len(r)) for r in l2], dtype=np.int64).reshape(len(s), f0)
        nbr1 = np.array([r + [n_all] * (f1 - len(r)) for r in l1], dtype=np.int64).reshape(n1, f1)
        return SampledBlocks(np.array(nodes, dtype=np.int64), len(s), n1, nbr1, nbr2)


def gather_features(
    store: GraphStore | np.ndarray, nodes: np.ndarray, out: np.ndarray | None = None
) -> np.ndarray:
    """Rows of the feature matrix for nodes, as float32 [n_all, F] (into out[:n_all] when given)."""
    feats = store.features if isinstance(store, GraphStore) else store
    n = int(nodes.shape[0])
    shape = (n, int(feats.shape[1]))
    if out is None:
        out = np.empty(shape, dtype=np.float32)
    else:
        if out.dtype != np.float32 or out.ndim != 2 or out.shape[0] < n or out.shape[1] != shape[1]:
            raise InvalidArgument(f"out must be float32 with at least {shape[0]} rows and {shape[1]} columns")
        out = out[:n]
    if feats.dtype == np.float32:
        np.take(feats, nodes, axis=0, out=out)
    else:
        out[...] = np.take(feats, nodes, axis=0)
    return out
