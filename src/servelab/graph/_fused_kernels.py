"""numba kernels that turn a sampled 2-hop block into the dense inputs of the fused SAGE graph.

The first layer's mean aggregation is memory-bound (about ten feature rows read per target row), so
it is done here, while the rows are read from the feature store, instead of gathering an
``[n_all, F]`` matrix for the layers runtime to gather from again. The second layer's aggregation
needs the first layer's output, so it stays in the graph; this kernel only turns ``nbr2`` into an
index matrix and a weight tensor that make it one Gather and one batched MatMul there.

Layouts (``F`` features, ``f1``/``f2`` fan-outs of the second/first hop, pads as in
:class:`~servelab.graph.sampler.SampledBlocks`):

* ``a1`` float32 ``[n1, 2F]``: row ``j`` is ``[mean of j's sampled neighbours | j's own features]``
  (the mean is 0 for a node without neighbours, as SAGEConv's scatter-mean gives);
* ``idx2`` int64 ``[B, f2 + 1]``: the seed's sampled first-hop rows, pads replaced by 0, then the
  seed's own row ``b`` in the last column;
* ``w2`` float32 ``[B, 2, f2 + 1]``: ``w2[b, 0]`` weights the neighbours ``1 / count`` (0 on pads and
  on the self column) and ``w2[b, 1]`` picks the self column, so ``w2 @ h1[idx2]`` is
  ``[mean | self]`` of the second layer.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True, inline="always")
def _hop1_row(feats: np.ndarray, rows: np.ndarray, nbr1: np.ndarray, n_all: int, j: int, a1: np.ndarray) -> None:
    nf = feats.shape[1]
    acc = a1[j, :nf]
    acc[:] = 0.0
    count = 0
    for k in range(nbr1.shape[1]):
        local = nbr1[j, k]
        if local < n_all:
            src = feats[rows[local]]
            for c in range(nf):
                acc[c] += np.float32(src[c])
            count += 1
    if count > 1:
        inv = np.float32(1.0 / count)
        for c in range(nf):
            acc[c] *= inv
    own = feats[rows[j]]
    for c in range(nf):
        a1[j, nf + c] = np.float32(own[c])


@njit(cache=True, nogil=True)
def _hop1_serial(feats: np.ndarray, rows: np.ndarray, nbr1: np.ndarray, a1: np.ndarray) -> None:
    n_all = rows.shape[0]
    for j in range(nbr1.shape[0]):
        _hop1_row(feats, rows, nbr1, n_all, j, a1)


@njit(cache=True, nogil=True, parallel=True)
def _hop1_parallel(feats: np.ndarray, rows: np.ndarray, nbr1: np.ndarray, a1: np.ndarray) -> None:
    n_all = rows.shape[0]
    for j in prange(nbr1.shape[0]):
        _hop1_row(feats, rows, nbr1, n_all, j, a1)


@njit(cache=True, nogil=True)
def _hop2(nbr2: np.ndarray, n1: int) -> tuple[np.ndarray, np.ndarray]:
    b, f2 = nbr2.shape
    idx2 = np.zeros((b, f2 + 1), np.int64)
    w2 = np.zeros((b, 2, f2 + 1), np.float32)
    for i in range(b):
        count = 0
        for k in range(f2):
            local = nbr2[i, k]
            if local < n1:
                idx2[i, k] = local
                count += 1
        if count:
            inv = np.float32(1.0 / count)
            for k in range(f2):
                if nbr2[i, k] < n1:
                    w2[i, 0, k] = inv
        idx2[i, f2] = i
        w2[i, 1, f2] = 1.0
    return idx2, w2


@njit(cache=True, nogil=True)
def dense_serial(
    feats: np.ndarray, rows: np.ndarray, nbr1: np.ndarray, nbr2: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a1, idx2, w2) in one compiled call (float32 features): the small-batch path."""
    n1 = nbr1.shape[0]
    a1 = np.empty((n1, 2 * feats.shape[1]), np.float32)
    _hop1_serial(feats, rows, nbr1, a1)
    idx2, w2 = _hop2(nbr2, n1)
    return a1, idx2, w2


def dense_inputs(
    feats: np.ndarray, rows: np.ndarray, nbr1: np.ndarray, nbr2: np.ndarray, parallel: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a1, idx2, w2) for the fused graph: ``rows`` maps the block's local rows to rows of ``feats``.

    float32 features are read in place; others (float16 stores: numba has no float16 arrays) are
    gathered and widened by numpy first.
    """
    if feats.dtype != np.float32:
        feats = np.take(feats, rows, axis=0).astype(np.float32)
        rows = np.arange(rows.shape[0], dtype=np.int64)
    if not parallel:
        return dense_serial(feats, rows, nbr1, nbr2)  # type: ignore[no-any-return]
    n1 = nbr1.shape[0]
    a1 = np.empty((n1, 2 * feats.shape[1]), np.float32)
    _hop1_parallel(feats, rows, nbr1, a1)
    idx2, w2 = _hop2(nbr2, n1)
    return a1, idx2, w2
