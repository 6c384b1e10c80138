"""config ``reshape`` on inputs and outputs: the client sends and receives ``dims``, the model sees its own
shape (Triton's ModelTensorReshape). Real ONNX Runtime models, in-process."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto

from harness.models import unary_onnx
from harness.repository import densenet_model, write_config
from servelab import Engine
from servelab.errors import InvalidArgument

F = TensorProto.FLOAT


def test_densenet_style_reshape_without_batching(tmp_path: Path) -> None:
    """Triton's densenet_onnx config: data_0 [3, 224, 224] -> model [1, 3, 224, 224]; fc6_1 back to [1000]."""
    densenet_model(tmp_path)
    with Engine(tmp_path) as engine:
        meta = engine.get_model_metadata("densenet_onnx")
        assert meta["inputs"][0]["shape"] == [3, 224, 224] and meta["outputs"][0]["shape"] == [1000]
        out = engine.infer("densenet_onnx", {"data_0": np.ones((3, 224, 224), np.float32)})["fc6_1"]
    assert out.shape == (1000,)
    np.testing.assert_allclose(out, 3 * np.arange(1000, dtype=np.float32))


def test_a_batched_rank_one_model_behind_dims_1_and_an_empty_reshape(tmp_path: Path) -> None:
    d = tmp_path / "r1"
    unary_onnx(d / "1" / "model.onnx", "Neg", F, ["batch"])
    write_config(d, """
        name: "r1" platform: "onnxruntime_onnx" max_batch_size: 8
        input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] } } ]
        output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] } } ]
        """)
    with Engine(tmp_path) as engine:
        out = engine.infer("r1", {"INPUT": np.array([[1.0], [2.0], [3.0]], np.float32)})["OUTPUT"]
    assert out.shape == (3, 1) and out[:, 0].tolist() == [-1.0, -2.0, -3.0]


def test_variable_dims_reshape_both_ways(tmp_path: Path) -> None:
    d = tmp_path / "pairs"
    unary_onnx(d / "1" / "model.onnx", "Identity", F, ["batch", "k", 2])
    write_config(d, """
        name: "pairs" platform: "onnxruntime_onnx" max_batch_size: 4
        input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] reshape: { shape: [ -1, 2 ] } } ]
        output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] reshape: { shape: [ -1, 2 ] } } ]
        """)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    with Engine(tmp_path) as engine:
        out = engine.infer("pairs", {"INPUT": x})["OUTPUT"]
        np.testing.assert_array_equal(out, x)
        with pytest.raises(InvalidArgument, match="INPUT"):
            engine.infer("pairs", {"INPUT": np.zeros((1, 5), np.float32)})  # 5 does not make pairs
