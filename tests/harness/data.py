"""Tensors the tests send: deterministic samples for every OIP datatype, rows of features."""

from __future__ import annotations

import ml_dtypes
import numpy as np

__all__ = ["ANY_BYTES", "rows", "sample", "weights"]

#: BYTES elements that are not all UTF-8 (a Python model or a binary transport keeps them as sent)
ANY_BYTES = [b"", b"\x00\xff\xfe binary", "caf\u00e9".encode(), b"x" * 300]
_UTF8_BYTES = [b"", b"hello", "h\u00e9llo \u2603".encode(), b"a\x00b", b"x" * 40, b"last"]


def _numpy_dtype(datatype: str) -> np.dtype:
    if datatype == "BF16":
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype({"BOOL": np.bool_, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64}.get(
        datatype, datatype.lower()
    ))


def sample(datatype: str, shape: tuple[int, ...] = (2, 3), *, any_bytes: bool = False) -> np.ndarray:
    """Data of ``datatype`` that uses the edges of its range (min, max, 0, 1 ...), repeated to ``shape``.

    BYTES are valid UTF-8 (ONNX Runtime and JSON carry text only) unless ``any_bytes``.
    """
    n = int(np.prod(shape))
    if datatype == "BYTES":
        values = ANY_BYTES if any_bytes else _UTF8_BYTES
        return np.array((values * n)[:n], dtype=object).reshape(shape)
    dtype = _numpy_dtype(datatype)
    if dtype.kind == "b":
        return (np.arange(n) % 3 == 0).reshape(shape)
    edges: list[float]
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        edges = [info.min, info.max, 0, 1, info.max // 3, info.min // 3 or 7]
    else:
        finfo = ml_dtypes.finfo(dtype) if datatype == "BF16" else np.finfo(dtype)
        edges = [float(finfo.min), float(finfo.max), 0.0, -1.5, 1e-3, 1000.25]
    return np.array((edges * n)[:n], dtype=dtype).reshape(shape)


def rows(n: int, features: int = 4, *, value: float | None = None, seed: int = 0) -> np.ndarray:
    """``n`` FP32 rows of ``features``: all ``value`` when given, else standard normal from ``seed``."""
    if value is not None:
        return np.full((n, features), value, dtype=np.float32)
    return np.random.default_rng(seed).standard_normal((n, features)).astype(np.float32)


def weights(features_in: int, features_out: int, seed: int = 0) -> np.ndarray:
    """A standard normal FP32 weight matrix (for harness.models.dense_onnx), fixed by ``seed``."""
    return np.random.default_rng(seed).standard_normal((features_in, features_out)).astype(np.float32)
