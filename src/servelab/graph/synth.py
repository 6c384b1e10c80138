"""Synthetic graphs with power-law degrees, communities and homophily (Chung-Lu with blocks).

Every node gets a Pareto weight (degree exponent ``exponent``) and a community (its label). An edge
picks its first end proportionally to weight, its second end proportionally to weight inside the
same community with probability ``homophily`` and in the whole graph otherwise, so expected degrees
follow the weights. Features are the community centroid plus Gaussian noise: a features-only model
learns something, and averaging neighbours (mostly of the same community) learns more.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from servelab.errors import InvalidArgument
from servelab.graph.store import GraphStore, build_store

__all__ = ["synth_graph"]

_CHUNK = 1 << 20
# Draw a little more than asked: some pairs repeat and a few are self-loops.
_OVERDRAW = 1.03


def _check(
    nodes: int, avg_degree: float, features: int, classes: int, homophily: float, exponent: float
) -> None:
    if nodes < 2:
        raise InvalidArgument(f"nodes must be >= 2, got {nodes}")
    if not 0 < avg_degree < nodes - 1:
        raise InvalidArgument(f"avg_degree must be in (0, nodes - 1), got {avg_degree}")
    if features < 1 or classes < 1 or classes > nodes:
        raise InvalidArgument(f"need features >= 1 and 1 <= classes <= nodes, got {features}, {classes}")
    if not 0.0 <= homophily <= 1.0:
        raise InvalidArgument(f"homophily must be in [0, 1], got {homophily}")
    if exponent <= 2.0:
        raise InvalidArgument(f"exponent must be > 2 (finite mean degree), got {exponent}")


def _weights(rng: np.random.Generator, n: int, avg_degree: float, exponent: float) -> np.ndarray:
    """Pareto weights scaled to mean avg_degree, capped at sqrt(total) (Chung-Lu's condition)."""
    w = (1.0 - rng.random(n)) ** (-1.0 / (exponent - 1.0))
    w *= avg_degree / w.mean()
    np.minimum(w, np.sqrt(avg_degree * n), out=w)
    return w


def _draw(
    rng: np.random.Generator,
    cum: np.ndarray,
    start_w: np.ndarray,
    comm_w: np.ndarray,
    m: int,
    homophily: float,
    pos_comm: np.ndarray,
) -> np.ndarray:
    """Draw m position pairs as undirected keys lo * n + hi (self-loops dropped)."""
    n = cum.size
    total = cum[-1]
    keys = []
    for lo in range(0, m, _CHUNK):
        k = min(m, lo + _CHUNK) - lo
        u = np.minimum(np.searchsorted(cum, rng.random(k) * total, side="right"), n - 1)
        c = pos_comm[u]
        target = rng.random(k)
        target = np.where(rng.random(k) < homophily, start_w[c] + target * comm_w[c], target * total)
        v = np.minimum(np.searchsorted(cum, target, side="right"), n - 1)
        keep = u != v
        a, b = u[keep], v[keep]
        keys.append(np.minimum(a, b) * np.int64(n) + np.maximum(a, b))
    return np.concatenate(keys)


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    a.sort()
    keep = np.empty(a.size, dtype=bool)
    keep[:1] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def _edges(
    rng: np.random.Generator,
    w: np.ndarray,
    bounds: np.ndarray,
    m: int,
    homophily: float,
    pos_comm: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Exactly m distinct undirected position pairs (fewer only if the graph saturates)."""
    cum = np.cumsum(w)
    edges_w = np.concatenate([[0.0], cum])
    start_w = edges_w[bounds[:-1]]
    comm_w = edges_w[bounds[1:]] - start_w
    keys = np.empty(0, dtype=np.int64)
    want, keep_rate = m, 1.0 / _OVERDRAW
    for _ in range(8):  # Chung-Lu repeats some hub-hub pairs: top up until m distinct pairs
        draw = int(want / keep_rate * _OVERDRAW) + 16
        before = keys.size
        keys = _sorted_unique(
            np.concatenate([keys, _draw(rng, cum, start_w, comm_w, draw, homophily, pos_comm)])
        )
        keep_rate = max((keys.size - before) / draw, 0.05)
        want = m - keys.size
        if want <= 0:
            break
    if keys.size > m:
        keys = np.delete(keys, rng.choice(keys.size, keys.size - m, replace=False))
    n = np.int64(w.size)
    return keys // n, keys % n


def _write_features(
    out: Path,
    rng: np.random.Generator,
    labels: np.ndarray,
    features: int,
    classes: int,
    signal: float,
    dtype: str,
) -> np.memmap:
    centroids = (rng.standard_normal((classes, features)) * signal).astype(np.float32)
    mm = np.lib.format.open_memmap(
        out / "features.npy", mode="w+", dtype=np.dtype(dtype), shape=(labels.size, features)
    )
    for lo in range(0, labels.size, _CHUNK // 4):
        hi = min(labels.size, lo + _CHUNK // 4)
        block = rng.standard_normal((hi - lo, features), dtype=np.float32)
        block += centroids[labels[lo:hi]]
        mm[lo:hi] = block
    mm.flush()
    return mm


def synth_graph(
    out_dir: str | Path,
    nodes: int = 1_000_000,
    avg_degree: float = 15,
    features: int = 128,
    classes: int = 16,
    seed: int = 0,
    *,
    homophily: float = 0.8,
    exponent: float = 2.3,
    signal: float = 0.15,
    split: Sequence[float] = (0.6, 0.2, 0.2),
    feature_dtype: str = "float32",
    progress: bool = False,
) -> GraphStore:
    """Write a synthetic graph store to out_dir and open it.

    avg_degree counts stored (directed, both-way) edges per node; labels are the communities;
    ``signal`` is the per-dimension scale of the community centroids against unit noise.
    """
    _check(nodes, avg_degree, features, classes, homophily, exponent)
    if len(split) != 3 or min(split) < 0 or sum(split) > 1.0 + 1e-9:
        raise InvalidArgument(
            f"split must be 3 non-negative fractions (train, val, test) summing to <= 1, got {split}"
        )
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sizes = rng.multinomial(nodes, np.full(classes, 1.0 / classes))
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    pos_comm = np.repeat(np.arange(classes, dtype=np.int64), sizes)
    perm = rng.permutation(nodes)  # position -> node id
    labels = np.empty(nodes, dtype=np.int64)
    labels[perm] = pos_comm
    w = _weights(rng, nodes, avg_degree, exponent)
    m = round(nodes * avg_degree / 2)
    su, sv = _edges(rng, w, bounds, m, homophily, pos_comm)
    src, dst = perm[su], perm[sv]
    del su, sv
    feats = _write_features(out, rng, labels, features, classes, signal, feature_dtype)
    order = rng.permutation(nodes)
    cut = np.cumsum([round(f * nodes) for f in split])
    splits = {
        "train": np.sort(order[: cut[0]]),
        "val": np.sort(order[cut[0] : cut[1]]),
        "test": np.sort(order[cut[1] : cut[2]]),
    }
    store, _ = build_store(
        out,
        src,
        dst,
        nodes,
        feats,
        labels,
        splits,
        feature_dtype=feature_dtype,
        symmetric=True,
        num_classes=classes,
        progress=progress,
    )
    store.manifest["synth"] = {
        "nodes": nodes,
        "avg_degree": avg_degree,
        "features": features,
        "classes": classes,
        "seed": seed,
        "homophily": homophily,
        "exponent": exponent,
        "signal": signal,
        "seconds": time.perf_counter() - t0,
    }
    _save_manifest(store)
    return store


def _save_manifest(store: GraphStore) -> None:
    import json

    (store.path / "manifest.json").write_text(json.dumps(store.manifest, indent=2))
