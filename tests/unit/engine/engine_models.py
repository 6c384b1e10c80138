"""Tiny models for the engine tests, built with onnx.helper (no downloads)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import onnx
from onnx import TensorProto, helper


def identity_onnx(path: Path, elem: int = TensorProto.FLOAT, dims: tuple[object, ...] = ("batch", 4),
                  in_name: str = "x", out_name: str = "y") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    graph = helper.make_graph(
        [helper.make_node("Identity", [in_name], [out_name])],
        "identity",
        [helper.make_tensor_value_info(in_name, elem, list(dims))],
        [helper.make_tensor_value_info(out_name, elem, list(dims))],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)


def scale_onnx(path: Path, factor: float) -> None:
    """y = x * factor, FP32 [batch, 4]: versions differ by factor."""
    path.parent.mkdir(parents=True, exist_ok=True)
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "k"], ["y"])],
        "scale",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        initializer=[helper.make_tensor("k", TensorProto.FLOAT, [1], [factor])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)


def write_config(model_dir: Path, text: str) -> None:
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(textwrap.dedent(text))


def scale_model(repo: Path, name: str, versions: dict[int, float], config: str = "") -> Path:
    d = repo / name
    for v, factor in versions.items():
        scale_onnx(d / str(v) / "model.onnx", factor)
    write_config(d, f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n' + textwrap.dedent(config))
    return d
