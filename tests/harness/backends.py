"""Backends the unit tests build by hand, the way the registry would (context, auto-complete, load),
and the reference every runtime's MLP is checked against (torch eager on :func:`harness.models.torch_mlp`)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from harness.data import rows
from harness.models import XY, eager, torch_mlp
from servelab.backends.base import Backend, BackendContext
from servelab.protocol import model_config_pb2 as mc

if TYPE_CHECKING:
    import torch

__all__ = [
    "MLP_FILES", "MLP_IN", "MLP_OUT", "assert_like_eager", "context", "export_mlp", "loaded", "mlp", "mlp_rows",
]  # fmt: skip

B = TypeVar("B", bound=Backend)
MLP_IN, MLP_OUT = 16, 8


def context(config: mc.ModelConfig, version_dir: Path = Path("."), *, name: str = "m", **extra: Any) -> BackendContext:
    """A one-thread context for model ``name`` version 1 (``extra``: BackendContext's other fields)."""
    return BackendContext(name, 1, version_dir, config, threads=1, **extra)


def loaded(cls: type[B], version_dir: Path, config: mc.ModelConfig) -> B:
    """``cls`` auto-completes ``config`` from the files in ``version_dir``, then loads them."""
    cls.autocomplete(config, version_dir)
    backend = cls(context(config, version_dir))
    backend.load()
    return backend


@functools.cache
def mlp() -> torch.nn.Module:
    """The MLP every runtime test exports (16 -> 64 -> 8, fixed weights)."""
    return torch_mlp(MLP_IN, 64, MLP_OUT)


#: the MLP's file in its version folder, per export format
MLP_FILES = {"onnx": "model.onnx", "openvino": "model.xml", "torchscript": "model.pt", "torch_export": "model.pt2"}


def export_mlp(fmt: str, version_dir: Path, io: tuple[str, str] = XY) -> Path:
    """:func:`mlp` written into ``version_dir`` as ``fmt`` (a key of :data:`MLP_FILES`); OpenVINO IR is
    converted from ``src/model.onnx``, which stays beside it. ONNX tensors are named ``io``."""
    import torch

    from servelab.convert import export as ex

    path = version_dir / MLP_FILES[fmt]
    if fmt == "onnx":
        return ex.export_onnx(mlp(), torch.zeros(2, MLP_IN), path, [io[0]], [io[1]])
    if fmt == "openvino":
        return ex.export_openvino(export_mlp("onnx", version_dir / "src", io), path)
    if fmt == "torchscript":
        return ex.export_torchscript(mlp(), torch.zeros(2, MLP_IN), path)
    return ex.export_torch_program(mlp(), torch.zeros(1, MLP_IN), path)


def mlp_rows(n: int, seed: int = 1) -> np.ndarray:
    """``n`` FP32 rows for :func:`mlp`."""
    return rows(n, MLP_IN, seed=seed)


def assert_like_eager(got: np.ndarray, x: np.ndarray) -> None:
    """``got`` is what torch itself answers for ``x`` on :func:`mlp`."""
    np.testing.assert_allclose(got, eager(mlp(), x), atol=1e-5, rtol=0)
