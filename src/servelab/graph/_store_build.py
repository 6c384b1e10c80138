"""Edge-list validation and CSR construction (sort + dedupe), vectorised with numpy."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from servelab.errors import InvalidArgument

# src * n + dst fits in int64 below this many nodes; above it we sort with lexsort instead.
_KEY_LIMIT = 3_000_000_000

Step = Callable[[str], None]


@dataclass
class BuildReport:
    """What build_store found and changed in the input edge list."""

    num_nodes: int = 0
    num_input_edges: int = 0
    self_loops_removed: int = 0
    duplicate_edges_removed: int = 0
    reverse_edges_added: int = 0
    num_edges: int = 0
    isolated_nodes: int = 0
    max_degree: int = 0
    mean_degree: float = 0.0
    symmetric: bool = True
    num_features: int = 0
    num_classes: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        """Plain dict (for manifest.json and CLI output)."""
        return asdict(self)


def _as_ids(name: str, a: object) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim != 1:
        raise InvalidArgument(f"{name} must be a 1-D array of node ids, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.mod(arr, 1) == 0):
            return arr.astype(np.int64)
        raise InvalidArgument(f"{name} must hold integer node ids, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def check_edges(src: object, dst: object, num_nodes: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    """Validate the edge arrays; return them as int64 with the node count."""
    s, d = _as_ids("src", src), _as_ids("dst", dst)
    if s.shape != d.shape:
        raise InvalidArgument(f"src and dst must have the same length, got {s.size} and {d.size}")
    if s.size == 0:
        raise InvalidArgument("the edge list is empty: a graph store needs at least one edge")
    if num_nodes is None:
        if min(int(s.min()), int(d.min())) < 0:
            _raise_out_of_range(s, d, None)
        num_nodes = int(max(s.max(), d.max())) + 1
    if num_nodes <= 0:
        raise InvalidArgument(f"num_nodes must be positive, got {num_nodes}")
    bad = (s < 0) | (s >= num_nodes) | (d < 0) | (d >= num_nodes)
    if bad.any():
        _raise_out_of_range(s, d, num_nodes, bad)
    return s, d, int(num_nodes)


def _raise_out_of_range(s: np.ndarray, d: np.ndarray, n: int | None, bad: np.ndarray | None = None) -> None:
    if bad is None:
        bad = (s < 0) | (d < 0)
    i = int(np.flatnonzero(bad)[0])
    allowed = f"[0, {n})" if n is not None else "non-negative"
    raise InvalidArgument(
        f"{int(bad.sum())} edge(s) have node ids outside {allowed}; "
        f"first: edge #{i} ({int(s[i])} -> {int(d[i])})"
    )


def _sorted_unique_keys(s: np.ndarray, d: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Sort edges by (src, dst) and drop exact duplicates."""
    if n < _KEY_LIMIT:
        keys = s * np.int64(n) + d
        keys.sort()
        keep = np.empty(keys.size, dtype=bool)
        keep[0] = True
        np.not_equal(keys[1:], keys[:-1], out=keep[1:])
        keys = keys[keep]
        return keys // n, keys % n
    order = np.lexsort((d, s))
    s, d = s[order], d[order]
    keep = np.ones(s.size, dtype=bool)
    keep[1:] = (s[1:] != s[:-1]) | (d[1:] != d[:-1])
    return s[keep], d[keep]


def build_csr(
    src: object,
    dst: object,
    num_nodes: int | None,
    *,
    symmetric: bool,
    step: Step | None = None,
) -> tuple[np.ndarray, np.ndarray, BuildReport]:
    """Validate an edge list and build (indptr int64, indices int32/int64, report)."""
    t0 = time.perf_counter()
    tick = step or (lambda _msg: None)
    tick("validating edges")
    s, d, n = check_edges(src, dst, num_nodes)
    rep = BuildReport(num_nodes=n, num_input_edges=int(s.size), symmetric=symmetric)
    loops = s == d
    rep.self_loops_removed = int(loops.sum())
    if rep.self_loops_removed:
        s, d = s[~loops], d[~loops]
    if s.size == 0:
        raise InvalidArgument(
            "the edge list has only self-loops: a graph store needs at least one other edge"
        )
    tick("sorting and removing duplicate edges")
    us, ud = _sorted_unique_keys(s, d, n)
    rep.duplicate_edges_removed = int(s.size - us.size)
    if symmetric:
        tick("adding reverse edges")
        del s, d
        fs, fd = _sorted_unique_keys(np.concatenate([us, ud]), np.concatenate([ud, us]), n)
        rep.reverse_edges_added = int(fs.size - us.size)
        us, ud = fs, fd
    tick("writing CSR")
    counts = np.bincount(us, minlength=n)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    idx_dtype = np.int32 if n < 2**31 else np.int64
    indices = ud.astype(idx_dtype)
    deg = counts if symmetric else counts + np.bincount(ud, minlength=n)
    rep.num_edges = int(indices.size)
    rep.isolated_nodes = int(np.count_nonzero(deg == 0))
    rep.max_degree = int(counts.max())
    rep.mean_degree = float(indices.size / n)
    if rep.self_loops_removed:
        rep.warnings.append(f"removed {rep.self_loops_removed} self-loop(s)")
    if rep.duplicate_edges_removed:
        rep.warnings.append(f"removed {rep.duplicate_edges_removed} duplicate edge(s)")
    if rep.isolated_nodes:
        rep.warnings.append(f"{rep.isolated_nodes} node(s) have no edges (they sample only padding)")
    rep.seconds = time.perf_counter() - t0
    return indptr, indices, rep
