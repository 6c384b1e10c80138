"""Small models and contexts the backend tests share (imported by name: the test folder is on sys.path)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper

from servelab.backends.base import BackendContext
from servelab.protocol import model_config_pb2 as mc

FEATURES_IN = 16
FEATURES_OUT = 8


def mlp() -> torch.nn.Module:
    """Linear(16,32)-ReLU-Linear(32,8) with fixed weights."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES_IN, 32), torch.nn.ReLU(), torch.nn.Linear(32, FEATURES_OUT)
    ).eval()


def eager(module: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module(torch.from_numpy(x)).numpy()


def rows(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, FEATURES_IN)).astype(np.float32)


def ctx(version_dir: Path, config: mc.ModelConfig, name: str = "m", **extra: object) -> BackendContext:
    return BackendContext(name, version=1, version_dir=version_dir, config=config, threads=1, **extra)  # type: ignore[arg-type]


def identity_onnx(path: Path, elem_type: int, dims: list[int | str]) -> Path:
    """An ONNX Identity model x -> y of the given element type and dims (str = symbolic)."""
    x = helper.make_tensor_value_info("x", elem_type, dims)
    y = helper.make_tensor_value_info("y", elem_type, dims)
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


ONNX_TYPES = {
    "BOOL": TensorProto.BOOL,
    "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "UINT64": TensorProto.UINT64,
    "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "FP16": TensorProto.FLOAT16,
    "FP32": TensorProto.FLOAT,
    "FP64": TensorProto.DOUBLE,
    "BF16": TensorProto.BFLOAT16,
    "BYTES": TensorProto.STRING,
}
