"""tritonclient inputs for every transport: pass the module (``tritonclient.http``, ``tritonclient.grpc``
or their ``.aio`` twins, which share its InferInput), so one helper serves every test."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
from tritonclient.utils import np_to_triton_dtype

__all__ = ["infer_input", "simple_inputs"]


def infer_input(module: ModuleType, name: str, array: np.ndarray, datatype: str | None = None, *,
                binary: bool | None = None) -> Any:
    """An InferInput of ``module`` holding ``array`` (``binary``: the HTTP client's binary_data flag)."""
    inp = module.InferInput(name, list(array.shape), datatype or np_to_triton_dtype(array.dtype))
    if binary is None:
        inp.set_data_from_numpy(array)
    else:
        inp.set_data_from_numpy(array, binary_data=binary)
    return inp


def simple_inputs(module: ModuleType, a: np.ndarray, b: np.ndarray, *, binary: bool | None = None) -> list[Any]:
    """INPUT0 and INPUT1 of the ``simple`` model (INT32 [batch, 16])."""
    return [infer_input(module, n, x, "INT32", binary=binary) for n, x in (("INPUT0", a), ("INPUT1", b))]
