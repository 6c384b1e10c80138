"""Per-request graph additions for inductive inference: new nodes, their features and new edges.

A request may bring ``new_features`` (float [m, F]) and ``new_edges`` (int [e, 2], undirected). Ids
``>= num_nodes`` name new nodes: id ``num_nodes + i`` is row ``i`` of ``new_features``. Edges may join
new nodes to stored nodes, new nodes to each other, or two stored nodes. Self-loops, repeats and
edges the store already holds are dropped, as the store builder drops them, so a node added this way
sees exactly the neighbourhood it would have had in a store built with it.

The union adjacency of a node is its stored CSR row followed by its overlay row (a small CSR over the
few nodes the request touches). :func:`sample_union` draws from it with the same per-row random
streams as the stored kernels (keyed by seed, hop and row), so rows without overlay neighbours are
sampled as :class:`~servelab.graph.sampler.NumbaSampler` would sample them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from servelab.errors import InvalidArgument
from servelab.graph._sampler_kernels import (
    _GOLD,
    _HOP,
    _INV53,
    _S11,
    _assign,
    _first_bad,
    _mix,
    _pad,
    _seeded_table,
)

__all__ = ["Overlay", "build_overlay", "gather_union", "sample_union"]

_SHOWN = 10


@dataclass(frozen=True)
class Overlay:
    """The request's additions: ``nodes`` (sorted global ids with overlay neighbours) -> CSR rows."""

    num_stored: int
    new_features: np.ndarray  # [m, F], row i is node num_stored + i
    nodes: np.ndarray  # int64 [k], sorted
    indptr: np.ndarray  # int64 [k + 1]
    indices: np.ndarray  # int64 [nnz], global ids

    @property
    def num_total(self) -> int:
        """Stored nodes plus new nodes: valid ids are 0 .. num_total - 1."""
        return self.num_stored + int(self.new_features.shape[0])

    @property
    def num_edges(self) -> int:
        """Overlay adjacency entries (each kept undirected edge counts twice)."""
        return int(self.indices.size)


def _shown(values: np.ndarray) -> str:
    text = ", ".join(str(int(v)) for v in values[:_SHOWN])
    return text + (f" and {values.size - _SHOWN} more" if values.size > _SHOWN else "")


def _check_features(new_features: np.ndarray | None, num_features: int) -> np.ndarray:
    if new_features is None:
        return np.zeros((0, num_features), np.float32)
    feats = np.asarray(new_features)
    if feats.ndim != 2 or feats.shape[1] != num_features or not np.issubdtype(feats.dtype, np.floating):
        raise InvalidArgument(
            f"new_features must be float [new nodes, {num_features}] (one row per new node, as many "
            f"features as the stored graph), got {feats.dtype} with shape {list(feats.shape)}"
        )
    if not np.isfinite(feats).all():
        raise InvalidArgument("new_features contain NaN or infinity")
    return np.ascontiguousarray(feats, dtype=np.float32)


def _check_edges(new_edges: np.ndarray | None, num_stored: int, num_total: int) -> np.ndarray:
    if new_edges is None:
        return np.zeros((0, 2), np.int64)
    edges = np.asarray(new_edges)
    if edges.ndim != 2 or edges.shape[1] != 2 or not np.issubdtype(edges.dtype, np.integer):
        raise InvalidArgument(
            f"new_edges must be integer [edges, 2] (src, dst pairs), got {edges.dtype} with shape "
            f"{list(edges.shape)}"
        )
    edges = edges.astype(np.int64, copy=False)
    bad = np.unique(edges[(edges < 0) | (edges >= num_total)])
    if bad.size:
        raise InvalidArgument(
            f"new_edges name node ids {_shown(bad)} outside [0, {num_total}): stored nodes are "
            f"0..{num_stored - 1} and new_features gives {num_total - num_stored} new node(s)"
            + (f" (ids {num_stored}..{num_total - 1})" if num_total > num_stored else "")
        )
    return edges


def _stored_edge(indptr: np.ndarray, indices: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """For pairs of stored nodes: is dst already a stored neighbour of src?"""
    known = np.zeros(src.size, dtype=bool)
    for i, (u, v) in enumerate(zip(src.tolist(), dst.tolist(), strict=True)):
        known[i] = bool(np.any(indices[indptr[u] : indptr[u + 1]] == v))
    return known


def build_overlay(
    indptr: np.ndarray,
    indices: np.ndarray,
    num_features: int,
    new_features: np.ndarray | None,
    new_edges: np.ndarray | None,
) -> Overlay:
    """Validate the request's additions and index them as a small CSR keyed by global id."""
    num_stored = int(indptr.size - 1)
    feats = _check_features(new_features, num_features)
    num_total = num_stored + int(feats.shape[0])
    edges = _check_edges(new_edges, num_stored, num_total)
    edges = edges[edges[:, 0] != edges[:, 1]]  # self-loops, as the store builder drops them
    both = np.concatenate([edges, edges[:, ::-1]]) if edges.size else edges
    if both.size:
        both = np.unique(both, axis=0)  # sorted by (src, dst), repeats removed
        stored = (both[:, 0] < num_stored) & (both[:, 1] < num_stored)
        if stored.any():
            drop = np.zeros(len(both), dtype=bool)
            drop[stored] = _stored_edge(indptr, indices, both[stored, 0], both[stored, 1])
            both = both[~drop]
    nodes, counts = np.unique(both[:, 0], return_counts=True)
    ov_indptr = np.zeros(nodes.size + 1, np.int64)
    np.cumsum(counts, out=ov_indptr[1:])
    return Overlay(
        num_stored, feats, nodes.astype(np.int64), ov_indptr, np.ascontiguousarray(both[:, 1], np.int64)
    )


@njit(cache=True, nogil=True)
def _union_row(
    indptr: np.ndarray,
    indices: np.ndarray,
    ov_nodes: np.ndarray,
    ov_indptr: np.ndarray,
    ov_indices: np.ndarray,
    node: int,
    k: int,
    seed: int,
    hop: int,
    row: int,
    out: np.ndarray,
    off: int,
) -> int:
    """Up to k distinct neighbours of node in stored + overlay adjacency into out[off:] (Floyd)."""
    lo, ds = 0, 0
    if node < indptr.size - 1:
        lo = indptr[node]
        ds = indptr[node + 1] - lo
    olo, do = 0, 0
    j = np.searchsorted(ov_nodes, node)
    if j < ov_nodes.size and ov_nodes[j] == node:
        olo = ov_indptr[j]
        do = ov_indptr[j + 1] - olo
    d = ds + do
    if d <= k:
        for t in range(d):
            out[off + t] = t
    else:
        st = _mix(np.uint64(seed) ^ (np.uint64(hop + 1) * _HOP) ^ (np.uint64(row) * _GOLD))
        for m in range(k):
            j2 = d - k + m
            st += _GOLD
            u = np.float64(_mix(st) >> _S11) * _INV53
            t = int(u * (j2 + 1))
            for q in range(m):
                if out[off + q] == t:
                    t = j2
                    break
            out[off + m] = t
        d = k
    for q in range(d):
        t = out[off + q]
        out[off + q] = indices[lo + t] if t < ds else ov_indices[olo + t - ds]
    return d


@njit(cache=True, nogil=True)
def _draw_union(
    indptr: np.ndarray,
    indices: np.ndarray,
    ov_nodes: np.ndarray,
    ov_indptr: np.ndarray,
    ov_indices: np.ndarray,
    rows: np.ndarray,
    n: int,
    k: int,
    seed: int,
    hop: int,
    tmp: np.ndarray,
    cnt: np.ndarray,
) -> None:
    for r in range(n):
        cnt[r] = _union_row(
            indptr, indices, ov_nodes, ov_indptr, ov_indices, rows[r], k, seed, hop, r, tmp, r * k
        )


@njit(cache=True, nogil=True)
def _sample_union(
    indptr: np.ndarray,
    indices: np.ndarray,
    ov_nodes: np.ndarray,
    ov_indptr: np.ndarray,
    ov_indices: np.ndarray,
    num_total: int,
    seeds: np.ndarray,
    f0: int,
    f1: int,
    seed: int,
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray, int]:
    b = seeds.size
    bad = _first_bad(seeds, num_total)
    if bad >= 0:
        e = np.empty((0, 0), np.int64)
        return np.empty(0, np.int64), -1, e, e, bad
    keys, vals, shift, nodes, tmp, cnt, nbr2 = _seeded_table(seeds, f0, f1)
    _draw_union(indptr, indices, ov_nodes, ov_indptr, ov_indices, seeds, b, f0, seed, 0, tmp, cnt)
    n1 = _assign(tmp, cnt, b, f0, keys, vals, shift, nodes, b, nbr2)
    _pad(nbr2, cnt, n1)
    nbr1 = np.empty((n1, f1), np.int64)
    _draw_union(indptr, indices, ov_nodes, ov_indptr, ov_indices, nodes, n1, f1, seed, 1, tmp, cnt)
    n_all = _assign(tmp, cnt, n1, f1, keys, vals, shift, nodes, n1, nbr1)
    _pad(nbr1, cnt, n_all)
    return nodes[:n_all], n1, nbr1, nbr2, -1


def sample_union(
    indptr: np.ndarray,
    indices: np.ndarray,
    overlay: Overlay,
    seeds: np.ndarray,
    fanouts: tuple[int, int],
    seed: int,
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """2-hop blocks over stored + overlay adjacency: (nodes, n1, nbr1, nbr2), as the stored sampler."""
    s = np.ascontiguousarray(seeds, dtype=np.int64)
    nodes, n1, nbr1, nbr2, bad = _sample_union(
        indptr,
        indices,
        overlay.nodes,
        overlay.indptr,
        overlay.indices,
        overlay.num_total,
        s,
        fanouts[0],
        fanouts[1],
        int(seed),
    )
    if n1 < 0:
        raise InvalidArgument(f"node id {int(s[bad])} (position {bad}) is outside [0, {overlay.num_total})")
    return nodes, int(n1), nbr1, nbr2


def gather_union(features: np.ndarray, overlay: Overlay, nodes: np.ndarray) -> np.ndarray:
    """float32 [len(nodes), F]: stored rows from ``features``, new nodes' rows from the overlay."""
    new = nodes >= overlay.num_stored
    out = np.empty((nodes.size, features.shape[1]), np.float32)
    old = ~new
    out[old] = features[nodes[old]]
    out[new] = overlay.new_features[nodes[new] - overlay.num_stored]
    return out


def warmup(indptr: np.ndarray, indices: np.ndarray, fanouts: tuple[int, int]) -> None:
    """Compile (or load from numba's cache) the union kernel now rather than on the first request."""
    empty = build_overlay(indptr, indices, 0, None, None)
    sample_union(indptr, indices, empty, np.zeros(1, np.int64), fanouts, 0)
