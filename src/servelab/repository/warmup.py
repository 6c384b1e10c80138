"""``model_warmup``: the sample requests every instance runs before its version is ready.

As in Triton, each sample is ``batch_size`` copies of one request (its rows run as one batch where the
model batches), executed ``max(count, 1)`` times on every instance directly, not through the scheduler:
a sequence model's sample names its control (and state) inputs itself. ``dims`` are what a client
sends (without the batch dimension; a config ``reshape`` is applied afterwards). Data is zeros
(``zero_data``), random values (``random_data``; zeros for TYPE_STRING, as in Triton) or the raw
row-major bytes of ``<model>/warmup/<input_data_file>`` (TYPE_STRING: each element a 4-byte
little-endian length and its bytes). A sample that fails fails the load, naming the sample and the
instance: Triton serves an instance only when its warm-up succeeded.

The samples are built here, when the model is read (bad samples and missing files fail before any
instance loads); :func:`run_warmup` runs them on the loaded instances.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servelab.backends import Backend
from servelab.backends._specs import config_dtype, sequence_tensors
from servelab.errors import InvalidArgument, ServelabError, Unavailable
from servelab.protocol import model_config_pb2 as mc
from servelab.trust import resolve_inside
from servelab.types import DataType

__all__ = ["WARMUP_FOLDER", "WarmupSample", "read_warmup", "run_warmup"]

WARMUP_FOLDER = "warmup"
_RNG = np.random.default_rng(0)


@dataclass(frozen=True, slots=True)
class WarmupSample:
    name: str
    #: ``batch_size`` requests (the same arrays), as the backend receives them
    requests: list[dict[str, np.ndarray]]
    runs: int


def read_warmup(config: mc.ModelConfig, model_dir: Path) -> list[WarmupSample]:
    """The config's warm-up samples with their data; InvalidArgument names the sample and the input."""
    return [_sample(config, model_dir, w, i) for i, w in enumerate(config.model_warmup)]


def run_warmup(instances: list[Backend], samples: list[WarmupSample], model: str) -> None:
    """Run every sample on every instance; the first failure raises, naming sample and instance."""
    for index, backend in enumerate(instances):
        for sample in samples:
            for _ in range(sample.runs):
                results = backend.execute_timed(sample.requests).results
                failed = next((r for r in results if isinstance(r, ServelabError)), None)
                if failed is not None:
                    raise Unavailable(
                        f"model '{model}': warm-up sample '{sample.name}' failed on instance {index}: {failed.message}"
                    )


def _sample(config: mc.ModelConfig, model_dir: Path, warmup: mc.ModelWarmup, index: int) -> WarmupSample:
    name = warmup.name or f"#{index}"
    where = f"model '{config.name}': model_warmup '{name}'"
    batched = config.max_batch_size > 0
    if warmup.batch_size < 1:
        raise InvalidArgument(f"{where}: batch_size must be >= 1, got {warmup.batch_size}")
    if batched and warmup.batch_size > config.max_batch_size:
        raise InvalidArgument(
            f"{where}: batch_size {warmup.batch_size} exceeds max_batch_size {config.max_batch_size}"
        )
    if not batched and warmup.batch_size != 1:
        raise InvalidArgument(f"{where}: batch_size must be 1 for a model without batching (max_batch_size 0)")
    declared = {t.name: t for t in config.input}
    controls, _ = sequence_tensors(config)
    missing = sorted(n for n, t in declared.items() if n not in warmup.inputs and not t.optional)
    if missing:
        raise InvalidArgument(f"{where}: gives no data for input(s) {missing}; a sample names every model input")
    request: dict[str, np.ndarray] = {}
    for input_name, spec in warmup.inputs.items():
        tensor = declared.get(input_name)
        if tensor is None and input_name not in controls:
            raise InvalidArgument(
                f"{where}: input '{input_name}' is neither a model input {sorted(declared)} nor a sequence "
                f"control or state input {sorted(controls)}"
            )
        array = _data(model_dir, spec, f"{where}, input '{input_name}'", tensor)
        reshape = tuple(tensor.reshape.shape) if tensor is not None and tensor.HasField("reshape") else None
        shape = reshape if reshape is not None else array.shape
        request[input_name] = array.reshape(((1,) if batched else ()) + tuple(shape))
    return WarmupSample(name, [request] * warmup.batch_size, max(1, warmup.count))


def _data(model_dir: Path, spec: mc.ModelWarmup.Input, where: str, tensor: mc.ModelInput | None) -> np.ndarray:
    if spec.data_type == mc.TYPE_INVALID:
        raise InvalidArgument(f"{where}: has no data_type")
    dtype = config_dtype(spec.data_type)
    dims = tuple(int(d) for d in spec.dims)
    if any(d < 0 for d in dims):
        raise InvalidArgument(f"{where}: dims {list(dims)} must be concrete (no -1) in a warm-up sample")
    if tensor is not None:
        _check_against(tensor, dtype, dims, where)
    count = int(np.prod(dims, dtype=np.int64))
    choice = spec.WhichOneof("input_data_type")
    if choice == "input_data_file":
        return _from_file(model_dir, spec.input_data_file, dtype, dims, count, where)
    if choice is None:
        raise InvalidArgument(f"{where}: set one of zero_data, random_data or input_data_file")
    if dtype is DataType.BYTES:
        return np.full(dims, b"", dtype=object)
    if choice == "random_data" and dtype is not DataType.BOOL:
        return _RNG.integers(0, 100, size=dims).astype(dtype.numpy_dtype)
    return np.zeros(dims, dtype=dtype.numpy_dtype)


def _check_against(tensor: mc.ModelInput, dtype: DataType, dims: tuple[int, ...], where: str) -> None:
    want = config_dtype(tensor.data_type)
    if want is not dtype:
        raise InvalidArgument(f"{where}: data_type {dtype.triton_name} but the input is {want.triton_name}")
    given = list(tensor.dims)
    if len(given) != len(dims) or any(g not in (-1, d) for g, d in zip(given, dims, strict=False)):
        raise InvalidArgument(f"{where}: dims {list(dims)} do not fit the input's dims {given} (without the batch dimension)")


def _from_file(
    model_dir: Path, name: str, dtype: DataType, dims: tuple[int, ...], count: int, where: str
) -> np.ndarray:
    folder = resolve_inside(model_dir, WARMUP_FOLDER, f"{WARMUP_FOLDER} folder")
    path = resolve_inside(model_dir, name, "input_data_file", start=folder)
    if not path.is_file():
        raise InvalidArgument(f"{where}: input_data_file {WARMUP_FOLDER}/{name} does not exist")
    raw = path.read_bytes()
    if dtype is DataType.BYTES:
        return np.array(_strings(raw, count, where), dtype=object).reshape(dims)
    need = count * (dtype.itemsize or 1)
    if len(raw) < need:
        raise InvalidArgument(f"{where}: {WARMUP_FOLDER}/{name} has {len(raw)} bytes; {list(dims)} needs {need}")
    return np.frombuffer(raw[:need], dtype=dtype.numpy_dtype).reshape(dims).copy()


def _strings(raw: bytes, count: int, where: str) -> list[bytes]:
    out: list[bytes] = []
    offset = 0
    for _ in range(count):
        if offset + 4 > len(raw):
            raise InvalidArgument(f"{where}: input_data_file ends after {len(out)} of {count} string elements")
        (size,) = struct.unpack_from("<I", raw, offset)
        out.append(raw[offset + 4 : offset + 4 + size])
        offset += 4 + size
    return out
