"""Input samples for parity checks, calibration and load: read from the user's data, or generated on request.

A *sample* is one item without the batch axis: ``{input name: array}``. ``--data`` takes an ``.npz``
(one array per input, first axis = samples), a JSON list of requests (``[{"INPUT": [...]}, ...]``, or
perf_analyzer's ``{"data": [...]}``), or a table for tabular models (``.csv`` with a header row, or
``.parquet``): its numeric columns, in order, become the single input's features.

A model that does not batch (``max_batch_size: 0``, see :mod:`servelab.convert.sources`) takes whole
requests instead: its sample *is* a request, each tensor with its own leading dimension. Its ``.npz`` holds
one array per input (one request), its JSON list one request per entry; tables are for batching models.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np

from servelab.convert.source_types import TensorInfo
from servelab.errors import InvalidArgument

__all__ = ["Sample", "feeds", "generate_samples", "load_samples", "save_npz", "stack"]

Sample = dict[str, np.ndarray]


def _item_shape(info: TensorInfo) -> tuple[int, ...]:
    dims = info.shape[1:] if info.shape and info.shape[0] < 0 else info.shape
    if any(d < 0 for d in dims):
        raise InvalidArgument(
            f"input {info.name!r} has variable dims {list(info.shape)}; give --data, or --input with fixed dims"
        )
    return tuple(dims)


def generate_samples(inputs: list[TensorInfo], count: int, seed: int = 0, int_high: int = 100) -> list[Sample]:
    """``count`` random samples: floats standard normal, integers uniform in [0, int_high), bools 0/1."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        sample: Sample = {}
        for info in inputs:
            shape = _item_shape(info)
            dtype = info.dtype.numpy_dtype
            if dtype.kind == "f":
                sample[info.name] = rng.standard_normal(shape).astype(dtype)
            elif dtype.kind == "b":
                sample[info.name] = rng.integers(0, 2, size=shape).astype(dtype)
            else:
                sample[info.name] = rng.integers(0, int_high, size=shape).astype(dtype)
        out.append(sample)
    return out


def stack(samples: list[Sample]) -> dict[str, np.ndarray]:
    """Samples as one batch (first axis)."""
    if not samples:
        raise InvalidArgument("no samples to stack")
    return {name: np.stack([s[name] for s in samples]) for name in samples[0]}


def feeds(samples: list[Sample], batched: bool, size: int) -> list[dict[str, np.ndarray]]:
    """What a model is called with: batches of ``size`` stacked samples, or each whole request alone."""
    if not batched:
        return list(samples)
    step = max(size, 1)
    return [stack(samples[i : i + step]) for i in range(0, len(samples), step)]


def _cast_request(samples: list[Sample], inputs: list[TensorInfo], where: str) -> list[Sample]:
    """Whole requests of a model that does not batch: every input's rank and fixed dims as the model's."""
    missing = [i.name for i in inputs if any(i.name not in s for s in samples)]
    if missing:
        raise InvalidArgument(f"{where}: the data lacks inputs {missing}; it has {sorted(samples[0])}")
    out = []
    for s in samples:
        item = {}
        for info in inputs:
            arr = np.asarray(s[info.name], dtype=info.dtype.numpy_dtype)
            fits = arr.ndim == len(info.shape) and all(d < 0 or d == a for d, a in zip(info.shape, arr.shape, strict=True))
            if not fits:
                raise InvalidArgument(
                    f"{where}: input {info.name!r} has shape {list(arr.shape)}, expected {list(info.shape)} (-1: any "
                    "size); a model that does not batch takes whole requests, one array per input"
                )
            item[info.name] = arr
        out.append(item)
    return out


def _cast(samples: list[Sample], inputs: list[TensorInfo], where: str) -> list[Sample]:
    by_name = {i.name: i for i in inputs}
    missing = [n for n in by_name if n not in samples[0]]
    if missing:
        raise InvalidArgument(f"{where}: the data lacks inputs {missing}; it has {sorted(samples[0])}")
    out = []
    for s in samples:
        item = {}
        for name, info in by_name.items():
            arr = np.asarray(s[name], dtype=info.dtype.numpy_dtype)
            want = _item_shape(info) if all(d >= 0 for d in info.shape[1:]) else arr.shape
            if arr.size != int(np.prod(want)):
                raise InvalidArgument(f"{where}: input {name!r} has {arr.size} values, expected shape {list(want)}")
            item[name] = arr.reshape(want)
        out.append(item)
    return out


def _from_npz(path: Path) -> list[Sample]:
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    counts = {k: len(a) for k, a in arrays.items() if a.ndim}
    if not arrays or len(set(counts.values())) != 1 or len(counts) != len(arrays):
        raise InvalidArgument(f"{path}: every array's first axis indexes samples and must agree; got {counts}")
    n = next(iter(counts.values()))
    return [{k: a[i] for k, a in arrays.items()} for i in range(n)]


def _from_json(path: Path) -> list[Sample]:
    try:
        doc: Any = json.loads(path.read_text())
    except ValueError as exc:
        raise InvalidArgument(f"{path}: not JSON ({exc})") from None
    entries = doc.get("data") if isinstance(doc, dict) else doc
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise InvalidArgument(f"{path}: expected a JSON list of requests [{{INPUT: [...]}}, ...] or {{'data': [...]}}")
    return [
        {k: np.asarray(v["content"] if isinstance(v, dict) and "content" in v else v) for k, v in e.items()}
        for e in entries
    ]


def _table(columns: dict[str, np.ndarray], inputs: list[TensorInfo], path: Path) -> list[Sample]:
    if len(inputs) != 1:
        raise InvalidArgument(f"{path}: a table feeds one input, but the model has {[i.name for i in inputs]}")
    numeric = [np.asarray(c, dtype=np.float64) for c in columns.values()]
    matrix = np.stack(numeric, axis=1)
    name = inputs[0].name
    return [{name: row} for row in matrix]


def _from_csv(path: Path, inputs: list[TensorInfo]) -> list[Sample]:
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    if len(rows) < 2:
        raise InvalidArgument(f"{path}: expected a header row and at least one data row")
    header, body = rows[0], rows[1:]
    try:
        columns = {h: np.array([float(r[i]) for r in body]) for i, h in enumerate(header)}
    except (ValueError, IndexError) as exc:
        raise InvalidArgument(f"{path}: every cell must be a number ({exc})") from None
    return _table(columns, inputs, path)


def _from_parquet(path: Path, inputs: list[TensorInfo]) -> list[Sample]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise InvalidArgument(f"{path}: reading Parquet needs pyarrow (pip install 'servelab[advisor]')") from exc
    table = pq.read_table(path)
    columns = {n: table.column(n).to_numpy() for n in table.column_names}
    return _table(columns, inputs, path)


def _request_npz(path: Path) -> list[Sample]:
    with np.load(path) as z:
        return [{k: z[k] for k in z.files}]


def load_samples(path: Path, inputs: list[TensorInfo], limit: int | None = None, batched: bool = True) -> list[Sample]:
    """Samples from ``path`` (see the module docstring), cast to the inputs' types and shapes; whole
    requests when the model does not batch (``batched`` False)."""
    if not path.is_file():
        raise InvalidArgument(f"--data {path} does not exist; expected .npz, .json, .csv or .parquet")
    suffix = path.suffix.lower()
    if not batched:
        if suffix not in (".npz", ".json"):
            raise InvalidArgument(f"--data {path}: a model that does not batch takes .npz (one array per input) or .json requests")
        requests = _request_npz(path) if suffix == ".npz" else _from_json(path)
        return _cast_request(requests[:limit] if limit else requests, inputs, str(path))
    readers = {
        ".npz": lambda: _from_npz(path), ".json": lambda: _from_json(path),
        ".csv": lambda: _from_csv(path, inputs), ".parquet": lambda: _from_parquet(path, inputs),
    }  # fmt: skip
    if suffix not in readers:
        raise InvalidArgument(f"--data {path}: unknown suffix {suffix!r}; expected .npz, .json, .csv or .parquet")
    samples = readers[suffix]()
    if not samples:
        raise InvalidArgument(f"--data {path} holds no samples")
    samples = samples[:limit] if limit else samples
    return _cast(samples, inputs, str(path))


def save_npz(samples: list[Sample], path: Path) -> Path:
    """Write samples as one ``.npz`` (the bench's ``--input-data`` format: first axis = samples)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **stack(samples))  # type: ignore[arg-type]
    return path
