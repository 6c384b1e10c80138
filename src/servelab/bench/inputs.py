"""Request tensors: from npz/npy, perf_analyzer's JSON input-data format, a folder of samples, or
random/zero data shaped from the model's metadata.

A *sample* is one item without the batch dimension; a *request* stacks ``batch_size`` samples along a
new first axis when the model is batchable (its metadata's first dim is ``-1``).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servelab.bench.specs import InputSpec
from servelab.errors import InvalidArgument
from servelab.types import DataType

__all__ = ["Request", "TensorMeta", "build_requests", "load_samples", "parse_shape_option"]

Request = dict[str, np.ndarray]
Sample = dict[str, np.ndarray]


@dataclass(frozen=True, slots=True)
class TensorMeta:
    """An input as the model's metadata describes it (``-1`` for a variable dim)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    @property
    def batchable(self) -> bool:
        return len(self.shape) > 0 and self.shape[0] == -1

    @property
    def item_shape(self) -> tuple[int, ...]:
        return self.shape[1:] if self.batchable else self.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return DataType.parse(self.datatype).numpy_dtype


def parse_shape_option(values: list[str]) -> dict[str, tuple[int, ...]]:
    """Parse ``NAME:d1,d2`` options into a dict, with an error naming the bad option."""
    out: dict[str, tuple[int, ...]] = {}
    for value in values:
        name, sep, dims = value.rpartition(":")
        try:
            parsed = tuple(int(d) for d in dims.split(",") if d.strip())
        except ValueError:
            parsed = ()
        if not sep or not name or not parsed:
            raise InvalidArgument(f"--shape {value!r}: expected NAME:d1,d2,... with whole-number dims")
        out[name] = parsed
    return out


def _resolved_item_shape(meta: TensorMeta, spec: InputSpec) -> tuple[int, ...]:
    item = meta.item_shape
    given = spec.shapes.get(meta.name)
    if given is None:
        if any(d < 0 for d in item):
            raise InvalidArgument(
                f"input {meta.name!r} has variable dims {list(meta.shape)}; give --shape {meta.name}:"
                + ",".join("N" if d < 0 else str(d) for d in item)
            )
        return item
    if len(given) != len(item) or any(m >= 0 and m != g for m, g in zip(item, given, strict=True)):
        raise InvalidArgument(
            f"--shape {meta.name}:{','.join(map(str, given))} does not fit the model's shape {list(meta.shape)} "
            f"(expected {len(item)} dims matching {list(item)}, batch dim excluded)"
        )
    return given


def _synthetic_sample(meta: TensorMeta, spec: InputSpec, rng: np.random.Generator) -> np.ndarray:
    shape = _resolved_item_shape(meta, spec)
    dtype = meta.dtype
    if meta.datatype == "BYTES":
        return np.array([b"0" * 8] * int(np.prod(shape)), dtype=object).reshape(shape)
    if spec.fill == "zero":
        return np.zeros(shape, dtype=dtype)
    if dtype.kind == "f" or meta.datatype == "BF16":
        return rng.random(shape, dtype=np.float32).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(dtype)
    return rng.integers(0, 100, size=shape).astype(dtype)


def _from_pa_json(path: Path, metas: list[TensorMeta], spec: InputSpec) -> list[Sample]:
    try:
        doc = json.loads(path.read_text())
        entries = doc["data"]
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidArgument(
            f"{path}: expected perf_analyzer input JSON {{'data': [{{NAME: ...}}, ...]}}"
        ) from exc
    by_name = {m.name: m for m in metas}
    samples: list[Sample] = []
    for i, entry in enumerate(entries):
        sample: Sample = {}
        for name, value in entry.items():
            meta = by_name.get(name) or TensorMeta(name, "FP32", ())
            sample[name] = _pa_tensor(value, meta, spec, f"{path} data[{i}].{name}")
        samples.append(sample)
    return samples


def _pa_tensor(value: Any, meta: TensorMeta, spec: InputSpec, where: str) -> np.ndarray:
    shape: tuple[int, ...] | None = None
    if isinstance(value, dict):
        shape = tuple(value["shape"]) if "shape" in value else None
        if "b64" in value:
            raw = base64.b64decode(value["b64"])
            arr = (
                np.frombuffer(raw, dtype=meta.dtype)
                if meta.datatype != "BYTES"
                else np.array([raw], dtype=object)
            )
        elif "content" in value:
            arr = np.asarray(value["content"], dtype=meta.dtype)
        else:
            raise InvalidArgument(f"{where}: expected a list, or an object with 'content' or 'b64'")
    else:
        arr = np.asarray(value, dtype=meta.dtype)
    if shape is None:
        shape = _resolved_item_shape(meta, spec) if meta.shape else arr.shape
    if arr.size != int(np.prod(shape)):
        raise InvalidArgument(f"{where}: {arr.size} values do not fill shape {list(shape)}")
    return arr.reshape(shape)


def _split_first_axis(arrays: dict[str, np.ndarray], where: str) -> list[Sample]:
    counts = {name: a.shape[0] if a.ndim else 0 for name, a in arrays.items()}
    if len(set(counts.values())) != 1 or 0 in counts.values():
        raise InvalidArgument(
            f"{where}: every array's first axis indexes samples and must agree; got {counts}"
        )
    n = next(iter(counts.values()))
    return [{name: a[i] for name, a in arrays.items()} for i in range(n)]


def _single_name(metas: list[TensorMeta], where: str) -> str:
    if len(metas) != 1:
        raise InvalidArgument(
            f"{where}: one array given but the model has inputs {[m.name for m in metas]}; use .npz"
        )
    return metas[0].name


def _from_folder(path: Path, metas: list[TensorMeta]) -> list[Sample]:
    files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    if not files:
        raise InvalidArgument(f"{path}: the input folder holds no sample files")
    samples: list[Sample] = []
    for f in files:
        if f.suffix == ".npz":
            with np.load(f) as z:
                samples.append({k: z[k] for k in z.files})
        elif f.suffix == ".npy":
            samples.append({_single_name(metas, str(f)): np.load(f)})
        else:
            name = metas[0].name if len(metas) == 1 else "raw"
            samples.append({name: np.array([f.read_bytes()], dtype=object)})
    return samples


def load_samples(path: str, metas: list[TensorMeta], spec: InputSpec) -> list[Sample]:
    """Read samples from a file or folder; raise InvalidArgument saying what was expected."""
    p = Path(path)
    if not p.exists():
        raise InvalidArgument(
            f"input data {path!r} does not exist; expected a .npz, .npy, .json file or a folder"
        )
    if p.is_dir():
        return _from_folder(p, metas)
    if p.suffix == ".json":
        return _from_pa_json(p, metas, spec)
    if p.suffix == ".npz":
        with np.load(p) as z:
            return _split_first_axis({k: z[k] for k in z.files}, str(p))
    if p.suffix == ".npy":
        return _split_first_axis({_single_name(metas, str(p)): np.load(p)}, str(p))
    raise InvalidArgument(
        f"input data {path!r}: unknown suffix {p.suffix!r}; expected .npz, .npy, .json or a folder"
    )


def _stack(samples: list[Sample], metas: list[TensorMeta], batch_size: int) -> Request:
    by_name = {m.name: m for m in metas}
    out: Request = {}
    for name in samples[0]:
        meta = by_name.get(name)
        if meta is not None and not meta.batchable:
            if batch_size != 1:
                raise InvalidArgument(
                    f"input {name!r} has shape {list(meta.shape)} with no batch dim (-1); --batch-size must be 1"
                )
            out[name] = samples[0][name]
        else:
            out[name] = np.stack([s[name] for s in samples])
        if meta is not None and out[name].dtype != meta.dtype and meta.datatype != "BYTES":
            out[name] = out[name].astype(meta.dtype)
    return out


def build_requests(metas: list[TensorMeta], spec: InputSpec) -> list[Request]:
    """The distinct requests to cycle through: batches of ``spec.batch_size`` samples each."""
    if spec.data_path is None:
        if not metas:
            raise InvalidArgument("the model's metadata lists no inputs; give --input-data")
        rng = np.random.default_rng(spec.seed)
        samples = [
            {m.name: _synthetic_sample(m, spec, rng) for m in metas}
            for _ in range(spec.distinct_requests * spec.batch_size)
        ]
    else:
        samples = load_samples(spec.data_path, metas, spec)
        missing = [m.name for m in metas if m.name not in samples[0]]
        if missing:
            raise InvalidArgument(f"input data {spec.data_path!r} lacks inputs {missing} the model needs")
    n_requests = max(1, min(spec.distinct_requests, len(samples) // spec.batch_size or 1))
    b = spec.batch_size
    return [
        _stack([samples[(i * b + j) % len(samples)] for j in range(b)], metas, b) for i in range(n_requests)
    ]
