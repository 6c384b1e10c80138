"""OpenVINO's converter, called through servelab, leaves the process as it found it: no telemetry forks, no
tracemalloc left running after a failed conversion (it starts one when ``--verbose`` is in sys.argv)."""

from __future__ import annotations

import os
import sys
import time
import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

pytest.importorskip("openvino")

from servelab.backends.openvino_convert import convert_onnx, quiet_openvino

_FORKS: list[int] = []
os.register_at_fork(before=lambda: _FORKS.append(1))


def _tree_onnx(path):
    """A one-leaf tree ensemble (ai.onnx.ml): valid ONNX that OpenVINO cannot convert."""
    node = helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["y"], domain="ai.onnx.ml", n_targets=1, nodes_treeids=[0], nodes_nodeids=[0],
        nodes_featureids=[0], nodes_values=[0.0], nodes_modes=["LEAF"], nodes_truenodeids=[0], nodes_falsenodeids=[0],
        target_treeids=[0], target_nodeids=[0], target_ids=[0], target_weights=[1.0],
    )  # fmt: skip
    graph = helper.make_graph([node], "tree", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    onnx.save(model, str(path))
    return path


def _relu_onnx(path):
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])])  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_failed_conversion_with_verbose_in_argv_leaves_no_tracemalloc(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", [*sys.argv, "--verbose"])  # any program's --verbose turns OpenVINO's on
    assert not tracemalloc.is_tracing()
    with pytest.raises(Exception, match="TreeEnsembleRegressor"):
        convert_onnx(_tree_onnx(tmp_path / "tree.onnx"))
    assert not tracemalloc.is_tracing(), "OpenVINO's converter left tracemalloc on: every allocation is traced"


def test_tracemalloc_the_caller_started_is_left_on(tmp_path):
    tracemalloc.start()
    try:
        with quiet_openvino():
            pass
        assert tracemalloc.is_tracing()
    finally:
        tracemalloc.stop()


def test_conversion_sends_no_telemetry_and_restores_the_environment(tmp_path, monkeypatch):
    import openvino as ov

    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("NNCF_CI", raising=False)
    before = len(_FORKS)
    model = convert_onnx(_relu_onnx(tmp_path / "relu.onnx"))
    time.sleep(0.5)  # telemetry is sent from a thread pool, each event in a forked copy of this process
    assert len(_FORKS) == before, "the converter forked this process (its telemetry sender)"
    assert "CI" not in os.environ and "NNCF_CI" not in os.environ
    out = ov.Core().compile_model(model, "CPU")(np.array([[-1, 2, -3, 4]], dtype=np.float32))
    np.testing.assert_array_equal(next(iter(out.values())), [[0, 2, 0, 4]])
