"""numba kernels for 2-hop uniform neighbour sampling without replacement.

Every target row draws from its own counter-based random stream keyed by (seed, hop, row), so the
serial and the parallel kernels return identical blocks for one seed. Local ids are assigned by one
serial pass over a small open-addressing hash table (global id -> row), sized to the batch, so the
kernels need no per-graph scratch and are safe to call from several threads at once (nogil).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

_GOLD = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_HOP = np.uint64(0xD1B54A32D192ED03)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_INV53 = 1.0 / 9007199254740992.0


@njit(cache=True, nogil=True, inline="always")
def _mix(z: np.uint64) -> np.uint64:
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@njit(cache=True, nogil=True)
def _sample_row(
    indptr: np.ndarray,
    indices: np.ndarray,
    node: int,
    k: int,
    seed: int,
    hop: int,
    row: int,
    out: np.ndarray,
    off: int,
) -> int:
    """Write up to k distinct neighbours of node into out[off:]; return how many (Floyd's algorithm)."""
    lo = indptr[node]
    d = indptr[node + 1] - lo
    if d <= k:
        for t in range(d):
            out[off + t] = indices[lo + t]
        return d
    st = _mix(np.uint64(seed) ^ (np.uint64(hop + 1) * _HOP) ^ (np.uint64(row) * _GOLD))
    for m in range(k):  # Floyd: the m-th draw picks from 0..j, j = d - k + m
        j = d - k + m
        st += _GOLD
        u = np.float64(_mix(st) >> _S11) * _INV53
        t = int(u * (j + 1))
        for q in range(m):
            if out[off + q] == t:
                t = j
                break
        out[off + m] = t
    for q in range(k):
        out[off + q] = indices[lo + out[off + q]]
    return k


@njit(cache=True, nogil=True)
def _draw_serial(
    indptr: np.ndarray,
    indices: np.ndarray,
    rows: np.ndarray,
    n: int,
    k: int,
    seed: int,
    hop: int,
    tmp: np.ndarray,
    cnt: np.ndarray,
) -> None:
    for r in range(n):
        cnt[r] = _sample_row(indptr, indices, rows[r], k, seed, hop, r, tmp, r * k)


@njit(cache=True, nogil=True, parallel=True)
def _draw_parallel(
    indptr: np.ndarray,
    indices: np.ndarray,
    rows: np.ndarray,
    n: int,
    k: int,
    seed: int,
    hop: int,
    tmp: np.ndarray,
    cnt: np.ndarray,
) -> None:
    for r in prange(n):
        cnt[r] = _sample_row(indptr, indices, rows[r], k, seed, hop, r, tmp, r * k)


@njit(cache=True, nogil=True, inline="always")
def _slot(keys: np.ndarray, gid: int, shift: np.uint64, mask: int) -> np.int64:
    h = np.int64((np.uint64(gid) * _GOLD) >> shift)
    while keys[h] != -1 and keys[h] != gid:
        h = (h + 1) & mask
    return h


@njit(cache=True, nogil=True)
def _assign(
    tmp: np.ndarray,
    cnt: np.ndarray,
    n_rows: int,
    k: int,
    keys: np.ndarray,
    vals: np.ndarray,
    shift: np.uint64,
    nodes: np.ndarray,
    n: int,
    nbr: np.ndarray,
) -> int:
    """Map sampled global ids to local rows, appending new nodes; pad later. Returns the new node count."""
    mask = keys.size - 1
    for r in range(n_rows):
        for t in range(cnt[r]):
            g = tmp[r * k + t]
            h = _slot(keys, g, shift, mask)
            if keys[h] == -1:
                keys[h] = g
                vals[h] = n
                nodes[n] = g
                n += 1
            nbr[r, t] = vals[h]
    return n


@njit(cache=True, nogil=True)
def _pad(nbr: np.ndarray, cnt: np.ndarray, value: int) -> None:
    for r in range(nbr.shape[0]):
        for t in range(cnt[r], nbr.shape[1]):
            nbr[r, t] = value


@njit(cache=True, nogil=True)
def _first_bad(seeds: np.ndarray, limit: int) -> int:
    """Index of the first seed outside [0, limit), or -1."""
    for i in range(seeds.size):
        if seeds[i] < 0 or seeds[i] >= limit:
            return i
    return -1


@njit(cache=True, nogil=True)
def _seeded_table(
    seeds: np.ndarray, f0: int, f1: int
) -> tuple[np.ndarray, np.ndarray, np.uint64, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Buffers for a 2-hop sample: the id -> row hash table holding the seeds, the node list, scratch."""
    b = seeds.size
    max1 = b + b * f0
    max_all = max1 + max1 * f1
    bits = 4
    while (1 << bits) < 2 * max_all:
        bits += 1
    shift = np.uint64(64 - bits)
    keys = np.full(1 << bits, -1, np.int64)
    vals = np.empty(1 << bits, np.int64)
    nodes = np.empty(max_all, np.int64)
    mask = keys.size - 1
    for i in range(b):
        nodes[i] = seeds[i]
        h = _slot(keys, seeds[i], shift, mask)
        if keys[h] == -1:
            keys[h] = seeds[i]
            vals[h] = i
    tmp = np.empty(max(b * f0, max1 * f1), np.int64)
    cnt = np.empty(max1, np.int64)
    nbr2 = np.empty((b, f0), np.int64)
    return keys, vals, shift, nodes, tmp, cnt, nbr2


@njit(cache=True, nogil=True)
def _sample(
    indptr: np.ndarray,
    indices: np.ndarray,
    seeds: np.ndarray,
    f0: int,
    f1: int,
    seed: int,
    parallel: bool,
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray, int]:
    b = seeds.size
    num_nodes = indptr.size - 1
    bad = _first_bad(seeds, num_nodes)
    if bad >= 0:
        e = np.empty((0, 0), np.int64)
        return np.empty(0, np.int64), -1, e, e, bad
    keys, vals, shift, nodes, tmp, cnt, nbr2 = _seeded_table(seeds, f0, f1)
    if parallel:
        _draw_parallel(indptr, indices, seeds, b, f0, seed, 0, tmp, cnt)
    else:
        _draw_serial(indptr, indices, seeds, b, f0, seed, 0, tmp, cnt)
    n1 = _assign(tmp, cnt, b, f0, keys, vals, shift, nodes, b, nbr2)
    _pad(nbr2, cnt, n1)
    nbr1 = np.empty((n1, f1), np.int64)
    if parallel:
        _draw_parallel(indptr, indices, nodes, n1, f1, seed, 1, tmp, cnt)
    else:
        _draw_serial(indptr, indices, nodes, n1, f1, seed, 1, tmp, cnt)
    n_all = _assign(tmp, cnt, n1, f1, keys, vals, shift, nodes, n1, nbr1)
    _pad(nbr1, cnt, n_all)
    return nodes[:n_all], n1, nbr1, nbr2, -1
