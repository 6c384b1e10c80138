"""Graph store: CSR adjacency + node features (+ labels, splits), memory-mapped from one folder.

Layout of a store folder: ``manifest.json`` plus one ``.npy`` file per array (``indptr``, ``indices``,
``features``, optional ``labels``, ``train_idx``, ``val_idx``, ``test_idx``). Opening maps every array
read-only, so several processes share one copy of the graph in the page cache.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servelab.errors import InvalidArgument, NotFound
from servelab.graph._edge_files import read_edge_file
from servelab.graph._store_build import BuildReport, Step, build_csr
from servelab.trust import resolve_inside

__all__ = ["SPLITS", "BuildReport", "GraphStore", "build_from_edge_file", "build_store"]

FORMAT = "servelab-graph"
VERSION = 1
SPLITS = ("train", "val", "test")
_FEATURE_DTYPES = {"float32": np.float32, "float16": np.float16}
_CHUNK_ROWS = 65536


@dataclass
class GraphStore:
    """CSR graph + node features (+ optional labels), memory-mapped from one folder with manifest.json."""

    path: Path
    indptr: np.ndarray
    indices: np.ndarray
    features: np.ndarray
    labels: np.ndarray | None
    train_idx: np.ndarray | None
    val_idx: np.ndarray | None
    test_idx: np.ndarray | None
    num_nodes: int
    num_edges: int
    num_features: int
    num_classes: int
    manifest: dict[str, object]

    @classmethod
    def open(cls, path: str | Path) -> GraphStore:
        """Map a store folder written by build_store / synth_graph."""
        root = Path(path)
        mpath = root / "manifest.json"
        if not mpath.is_file():
            raise NotFound(
                f"no graph store at {root}: {mpath.name} is missing (build one with `servelab graph build`)"
            )
        man = json.loads(mpath.read_text())
        if man.get("format") != FORMAT or man.get("version") != VERSION:
            raise InvalidArgument(
                f"{mpath} is not a servelab graph store v{VERSION} "
                f"(format={man.get('format')!r}, version={man.get('version')!r})"
            )
        files: dict[str, str | None] = man["files"]
        n, e, f = int(man["num_nodes"]), int(man["num_edges"]), int(man["num_features"])
        arrays = {k: _load(root, v) for k, v in files.items()}
        feats = arrays["features"]
        if feats is None:
            feats = np.zeros((n, 0), dtype=np.float32)
        store = cls(
            path=root,
            indptr=_need(arrays["indptr"], "indptr"),
            indices=_need(arrays["indices"], "indices"),
            features=feats,
            labels=arrays.get("labels"),
            train_idx=arrays.get("train_idx"),
            val_idx=arrays.get("val_idx"),
            test_idx=arrays.get("test_idx"),
            num_nodes=n,
            num_edges=e,
            num_features=f,
            num_classes=int(man["num_classes"]),
            manifest=man,
        )
        store._check_shapes()
        return store

    def _check_shapes(self) -> None:
        n, e = self.num_nodes, self.num_edges
        checks = [
            ("indptr", self.indptr.shape, (n + 1,)),
            ("indices", self.indices.shape, (e,)),
            ("features", self.features.shape, (n, self.num_features)),
        ]
        if self.labels is not None:
            checks.append(("labels", self.labels.shape, (n,)))
        for name, got, want in checks:
            if got != want:
                raise InvalidArgument(f"{self.path}: {name} has shape {got}, manifest says {want}")
        if int(self.indptr[-1]) != e:
            raise InvalidArgument(f"{self.path}: indptr[-1]={int(self.indptr[-1])}, manifest says {e} edges")

    def degrees(self) -> np.ndarray:
        """Out-degree of every node (int64 [num_nodes])."""
        return np.diff(self.indptr)

    def neighbors(self, node: int) -> np.ndarray:
        """Neighbour ids of one node (a view into indices)."""
        if not 0 <= node < self.num_nodes:
            raise InvalidArgument(f"node id {node} is outside [0, {self.num_nodes})")
        return self.indices[self.indptr[node] : self.indptr[node + 1]]

    def split(self, name: str) -> np.ndarray:
        """Node ids of split 'train', 'val' or 'test'."""
        if name not in SPLITS:
            raise InvalidArgument(f"unknown split {name!r}: expected one of {', '.join(SPLITS)}")
        idx = getattr(self, f"{name}_idx")
        if idx is None:
            raise NotFound(f"{self.path} has no {name!r} split")
        return idx


def _load(root: Path, name: str | None) -> np.ndarray | None:
    if name is None:
        return None
    p = resolve_inside(root, name, "graph store manifest 'files' entry", within="the graph store folder")
    if not p.is_file():
        raise NotFound(f"graph store {root} is incomplete: {name} is missing")
    return np.load(p, mmap_mode="r")


def _need(a: np.ndarray | None, name: str) -> np.ndarray:
    if a is None:
        raise InvalidArgument(f"manifest lists no {name} file")
    return a


@contextmanager
def _progress(enabled: bool) -> Iterator[tuple[Step, Step]]:
    """Yield (step, advance-rows) callbacks driving a rich progress display on stderr."""
    if not enabled:
        yield (lambda _m: None), (lambda _r: None)
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    cols = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
    )
    with Progress(*cols, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task("graph store", total=None)

        def step(msg: str) -> None:
            bar.update(task, description=msg)

        def rows(spec: str) -> None:
            done, total = (int(x) for x in spec.split("/"))
            bar.update(task, completed=done, total=total)

        yield step, rows
        total = bar.tasks[0].total or 1
        bar.update(task, total=total, completed=total)


def build_store(
    out_dir: str | Path,
    src: object,
    dst: object,
    num_nodes: int | None = None,
    features: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    splits: Mapping[str, np.ndarray] | None = None,
    *,
    feature_dtype: str = "float32",
    symmetric: bool = True,
    num_classes: int | None = None,
    progress: bool = True,
) -> tuple[GraphStore, BuildReport]:
    """Validate an edge list, build the CSR store in out_dir and open it.

    Self-loops and duplicate edges are removed and counted in the report; with ``symmetric`` every
    edge is stored in both directions. ``features`` may be an np.memmap of ``out_dir/features.npy``
    already in place (it is then validated, not copied).
    """
    if feature_dtype not in _FEATURE_DTYPES:
        raise InvalidArgument(
            f"feature_dtype must be one of {sorted(_FEATURE_DTYPES)}, got {feature_dtype!r}"
        )
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    with _progress(progress) as (step, rows):
        indptr, indices, rep = build_csr(src, dst, num_nodes, symmetric=symmetric, step=step)
        n = rep.num_nodes
        files: dict[str, str | None] = {"indptr": "indptr.npy", "indices": "indices.npy"}
        np.save(root / "indptr.npy", indptr)
        np.save(root / "indices.npy", indices)
        del indptr, indices
        step("writing features")
        files["features"] = _write_features(root, features, n, _FEATURE_DTYPES[feature_dtype], rows)
        rep.num_features = 0 if features is None else int(np.shape(features)[1])
        files["labels"], rep.num_classes = _write_labels(root, labels, n, num_classes)
        for name, ids in _check_splits(splits, n).items():
            files[f"{name}_idx"] = f"{name}_idx.npy"
            np.save(root / f"{name}_idx.npy", ids)
        step("done")
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "num_nodes": n,
        "num_edges": rep.num_edges,
        "num_features": rep.num_features,
        "num_classes": rep.num_classes,
        "feature_dtype": feature_dtype,
        "symmetric": symmetric,
        "files": files,
        "build": rep.as_dict(),
    }
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return GraphStore.open(root), rep


def _write_features(root: Path, feats: np.ndarray | None, n: int, dtype: type, rows: Step) -> str | None:
    if feats is None:
        return None
    if np.ndim(feats) != 2 or np.shape(feats)[0] != n:
        raise InvalidArgument(
            f"features must have shape [num_nodes={n}, num_features], got {np.shape(feats)}"
        )
    if not np.issubdtype(np.asarray(feats[:0]).dtype, np.number):
        raise InvalidArgument(f"features must be numeric, got dtype {feats.dtype}")
    dest = root / "features.npy"
    in_place = (
        isinstance(feats, np.memmap)
        and feats.filename is not None
        and Path(feats.filename).resolve() == dest.resolve()
    )
    if in_place and feats.dtype != dtype:
        raise InvalidArgument(
            f"features already at {dest} are {feats.dtype}, but feature_dtype asks for {np.dtype(dtype)}"
        )
    out = feats if in_place else np.lib.format.open_memmap(dest, mode="w+", dtype=dtype, shape=feats.shape)
    for lo in range(0, n, _CHUNK_ROWS):
        hi = min(n, lo + _CHUNK_ROWS)
        chunk = np.asarray(feats[lo:hi])
        if not np.isfinite(chunk).all():
            bad = lo + int(np.flatnonzero(~np.isfinite(chunk).all(axis=1))[0])
            raise InvalidArgument(f"features contain NaN or infinity (first at node {bad})")
        if not in_place:
            out[lo:hi] = chunk
        rows(f"{hi}/{n}")
    if isinstance(out, np.memmap):
        out.flush()
    return dest.name


def _write_labels(
    root: Path, labels: np.ndarray | None, n: int, num_classes: int | None
) -> tuple[str | None, int]:
    if labels is None:
        return None, int(num_classes or 0)
    lab = np.asarray(labels)
    if lab.shape != (n,) or not np.issubdtype(lab.dtype, np.integer):
        raise InvalidArgument(
            f"labels must be integers of shape [num_nodes={n}], got {lab.dtype} {lab.shape}"
        )
    lab = lab.astype(np.int64)
    if lab.min() < -1:
        raise InvalidArgument(f"labels must be >= 0 (or -1 for unlabelled), found {int(lab.min())}")
    found = int(lab.max()) + 1
    if num_classes is not None and found > num_classes:
        raise InvalidArgument(f"labels go up to {found - 1} but num_classes={num_classes}")
    np.save(root / "labels.npy", lab)
    return "labels.npy", int(num_classes or found)


def _check_splits(splits: Mapping[str, np.ndarray] | None, n: int) -> dict[str, np.ndarray]:
    if not splits:
        return {}
    seen = np.zeros(n, dtype=bool)
    out: dict[str, np.ndarray] = {}
    for name, ids in splits.items():
        if name not in SPLITS:
            raise InvalidArgument(f"unknown split {name!r}: expected one of {', '.join(SPLITS)}")
        arr = np.asarray(ids)
        if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
            raise InvalidArgument(f"split {name!r} must be a 1-D integer array of node ids")
        arr = arr.astype(np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >= n):
            raise InvalidArgument(f"split {name!r} has node ids outside [0, {n})")
        if np.unique(arr).size != arr.size:
            raise InvalidArgument(f"split {name!r} lists some node ids more than once")
        if seen[arr].any():
            raise InvalidArgument(f"split {name!r} overlaps an earlier split")
        seen[arr] = True
        out[name] = arr
    return out


def build_from_edge_file(
    path: str | Path,
    out_dir: str | Path,
    num_nodes: int | None = None,
    features: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    splits: Mapping[str, np.ndarray] | None = None,
    **kwargs: object,
) -> tuple[GraphStore, BuildReport]:
    """Build a store from a CSV (2 integer columns), Parquet (src, dst columns) or .npy [E, 2] file."""
    src, dst = read_edge_file(path)
    return build_store(out_dir, src, dst, num_nodes, features, labels, splits, **kwargs)  # type: ignore[arg-type]
