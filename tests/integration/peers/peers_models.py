"""Tiny models the peer tests build themselves (nothing downloaded): a 4 -> 3 linear layer."""

from __future__ import annotations

import textwrap
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WEIGHTS = np.arange(12, dtype=np.float32).reshape(4, 3) / 10.0


def write_linear_onnx(path: Path) -> Path:
    """``OUTPUT = INPUT @ WEIGHTS`` with a dynamic batch dim."""
    x = helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, ["batch", 3])
    w = numpy_helper.from_array(WEIGHTS, "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["INPUT", "W"], ["OUTPUT"])], "linear", [x], [y], [w]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return path


def write_linear_torchscript(path: Path) -> Path:
    import torch

    class Linear(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.from_numpy(WEIGHTS.copy()), requires_grad=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ self.w

    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", DeprecationWarning
        )  # torch.jit is deprecated, TorchServe still needs it
        torch.jit.trace(Linear().eval(), torch.zeros(1, 4)).save(str(path))
    return path


def write_tiny_repository(root: Path, with_torchscript: bool = False) -> Path:
    """A repository with ``tiny_onnx`` (and ``tiny_torchscript``): one model, two runtimes."""
    io = """\
        max_batch_size: 32
        input [ {{ name: "{i}", data_type: TYPE_FP32, dims: [4] }} ]
        output [ {{ name: "{o}", data_type: TYPE_FP32, dims: [3] }} ]
        """
    write_linear_onnx(root / "tiny_onnx" / "1" / "model.onnx")
    (root / "tiny_onnx" / "config.pbtxt").write_text(
        'name: "tiny_onnx"\nplatform: "onnxruntime_onnx"\n'
        + textwrap.dedent(io.format(i="INPUT", o="OUTPUT"))
    )
    if with_torchscript:
        write_linear_torchscript(root / "tiny_torchscript" / "1" / "model.pt")
        (root / "tiny_torchscript" / "config.pbtxt").write_text(
            'name: "tiny_torchscript"\nplatform: "pytorch_libtorch"\n'
            + textwrap.dedent(io.format(i="INPUT__0", o="OUTPUT__0"))
        )
    return root
