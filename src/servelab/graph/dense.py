"""The dense half of a mean-aggregator GraphSAGE as a small ONNX graph, for the fused ``graphsage`` model.

Inputs are those :func:`servelab.graph._fused_kernels.dense_inputs` makes (``a1`` [n1, 2F], ``idx2``
[B, f2+1], ``w2`` [B, 2, f2+1]); outputs are ``logits`` [B, C] and ``embeddings`` [B, H], as the
three-model ``sage`` ensemble gives. Each SAGE layer's two linears (``lin_l`` on the neighbour mean,
``lin_r`` on the node itself) become one MatMul over ``[mean | self]``, and the second layer's
aggregation is one Gather and one batched MatMul, so the graph has 11 nodes where the torch.export
of :class:`~servelab.graph.model.SageLayers` has about 25: at batch 1 the runtime's per-node cost,
not arithmetic, is what the layers' time is made of.

The graph is written from the trained weights with ``onnx.helper`` rather than traced, and
:func:`servelab.graph.parity.check_dense_parity` compares it with eager torch on sampled blocks
before it is used.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from servelab.graph.model import SageLayers

__all__ = ["DENSE_INPUTS", "build_dense_onnx", "save_dense_onnx"]

DENSE_INPUTS = ("a1", "idx2", "w2")
_OPSET = 17


def _stacked(layer: object) -> tuple[np.ndarray, np.ndarray]:
    """[lin_l.weight.T ; lin_r.weight.T] ([2*in, out]) and lin_l.bias."""
    lin_l, lin_r = layer.lin_l, layer.lin_r  # type: ignore[attr-defined]
    weight = np.concatenate([lin_l.weight.detach().numpy().T, lin_r.weight.detach().numpy().T], axis=0)
    return np.ascontiguousarray(weight, dtype=np.float32), lin_l.bias.detach().numpy().astype(np.float32)


def build_dense_onnx(model: SageLayers) -> onnx.ModelProto:
    """The dense graph of a mean-aggregator ``model``; ValueError for the pooling aggregator."""
    cfg = model.config
    if cfg.aggregator != "mean":
        raise ValueError(
            f"the fused graph needs the mean aggregator (its first-layer mean is taken while gathering); "
            f"this model uses {cfg.aggregator!r}: serve it through the sage ensemble"
        )
    w1, b1 = _stacked(model.conv1)
    w2, b2 = _stacked(model.conv2)
    wh = np.ascontiguousarray(model.head.weight.detach().numpy().T, dtype=np.float32)
    bh = model.head.bias.detach().numpy().astype(np.float32)
    hidden, f2 = cfg.hidden, cfg.fanouts[0]
    inits = [
        numpy_helper.from_array(w1, "W1"),
        numpy_helper.from_array(b1, "B1"),
        numpy_helper.from_array(w2, "W2"),
        numpy_helper.from_array(b2, "B2"),
        numpy_helper.from_array(wh, "WH"),
        numpy_helper.from_array(bh, "BH"),
        numpy_helper.from_array(np.array([-1, 2 * hidden], dtype=np.int64), "SHAPE2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["a1", "W1"], ["p1"]),
        helper.make_node("Add", ["p1", "B1"], ["z1"]),
        helper.make_node("Relu", ["z1"], ["h1"]),
        helper.make_node("Gather", ["h1", "idx2"], ["g2"], axis=0),  # [B, f2+1, H]
        helper.make_node("MatMul", ["w2", "g2"], ["m2"]),  # [B, 2, H]: [mean | self]
        helper.make_node("Reshape", ["m2", "SHAPE2"], ["a2"]),  # [B, 2H]
        helper.make_node("MatMul", ["a2", "W2"], ["p2"]),
        helper.make_node("Add", ["p2", "B2"], ["embeddings"]),
        helper.make_node("Relu", ["embeddings"], ["r2"]),
        helper.make_node("MatMul", ["r2", "WH"], ["ph"]),
        helper.make_node("Add", ["ph", "BH"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "graphsage_dense",
        [
            helper.make_tensor_value_info("a1", TensorProto.FLOAT, ["n1", 2 * cfg.in_features]),
            helper.make_tensor_value_info("idx2", TensorProto.INT64, ["batch", f2 + 1]),
            helper.make_tensor_value_info("w2", TensorProto.FLOAT, ["batch", 2, f2 + 1]),
        ],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", cfg.num_classes]),
            helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["batch", hidden]),
        ],
        initializer=inits,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)], producer_name="servelab")
    proto.ir_version = 8
    onnx.checker.check_model(proto)
    return proto


def save_dense_onnx(model: SageLayers, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(build_dense_onnx(model), str(path))
    return path
