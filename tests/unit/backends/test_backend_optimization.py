"""Triton's ``optimization`` block on ONNX Runtime (graph level, execution accelerators) and Triton's
openvino-backend parameter keys, on the real runtimes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import text_format

from harness.backends import loaded, mlp_rows
from servelab.backends._ort_optimization import gpu_accelerators
from servelab.backends.onnxruntime import OnnxRuntimeBackend
from servelab.backends.openvino import OpenVinoBackend
from servelab.errors import InvalidArgument, Unsupported
from servelab.protocol import model_config_pb2 as mc


def _config(text: str, backend: str = "onnxruntime") -> mc.ModelConfig:
    return text_format.Parse(f'name: "m" backend: "{backend}" {text}', mc.ModelConfig())


@pytest.mark.parametrize(
    ("level", "expected"),
    [(-1, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC), (1, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED),
     (2, ort.GraphOptimizationLevel.ORT_DISABLE_ALL), (0, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)],
)  # fmt: skip
def test_graph_level_maps_as_in_tritons_onnxruntime_backend(
    onnx_dir: Path, level: int, expected: ort.GraphOptimizationLevel
) -> None:
    backend = loaded(OnnxRuntimeBackend, onnx_dir, _config(f"optimization {{ graph {{ level: {level} }} }}"))
    assert backend._session_options().graph_optimization_level == expected
    assert backend.infer({"x": mlp_rows(2)})["y"].shape == (2, 8)


def test_graph_level_and_the_parameter_may_not_disagree(onnx_dir: Path) -> None:
    text = 'optimization { graph { level: 1 } } parameters { key: "graph_optimization_level" value { string_value: "basic" } }'
    with pytest.raises(InvalidArgument, match="level 1 means 'extended' but parameter graph_optimization_level says 'basic'"):
        loaded(OnnxRuntimeBackend, onnx_dir, _config(text))


def test_cpu_accelerator_openvino_needs_the_provider(onnx_dir: Path) -> None:
    text = 'optimization { execution_accelerators { cpu_execution_accelerator [ { name: "openvino" } ] } }'
    if "OpenVINOExecutionProvider" in ort.get_available_providers():
        backend = loaded(OnnxRuntimeBackend, onnx_dir, _config(text))
        assert backend.session is not None and backend.session.get_providers()[0] == "OpenVINOExecutionProvider"
    else:
        with pytest.raises(Unsupported, match="'openvino' needs OpenVINOExecutionProvider, which this onnxruntime lacks"):
            loaded(OnnxRuntimeBackend, onnx_dir, _config(text))
    bad = 'optimization { execution_accelerators { cpu_execution_accelerator [ { name: "tvm" } ] } }'
    with pytest.raises(InvalidArgument, match="unknown Execution Accelerator 'tvm' is requested"):
        loaded(OnnxRuntimeBackend, onnx_dir, _config(bad))


def test_gpu_accelerators_apply_to_gpu_instances_only(onnx_dir: Path) -> None:
    text = """optimization { execution_accelerators { gpu_execution_accelerator [ { name: "tensorrt"
                parameters { key: "precision_mode" value: "FP16" } parameters { key: "max_workspace_size_bytes" value: "1073741824" } } ] } }"""
    cpu = loaded(OnnxRuntimeBackend, onnx_dir, _config(text))  # a CPU instance: ignored, as in Triton
    assert cpu.session is not None and cpu.session.get_providers() == ["CPUExecutionProvider"]
    gpu = _config(text + " instance_group [ { kind: KIND_GPU } ]")
    options = gpu_accelerators(gpu, ["TensorrtExecutionProvider", "CPUExecutionProvider"])
    assert options == [("TensorrtExecutionProvider", {"trt_fp16_enable": "1", "trt_max_workspace_size": "1073741824"})]
    assert gpu_accelerators(gpu, ["CPUExecutionProvider"]) == []  # not in this build: the CPU serves
    wrong = _config('optimization { execution_accelerators { gpu_execution_accelerator [ { name: "tensorrt" '
                    'parameters { key: "fast" value: "1" } } ] } }')  # fmt: skip
    with pytest.raises(InvalidArgument, match="tensorrt accelerator parameter 'fast' is not known"):
        gpu_accelerators(wrong, [])


def test_openvino_takes_tritons_keys_and_refuses_the_ones_it_lacks(ir_dir: Path) -> None:
    backend = loaded(OpenVinoBackend, ir_dir, _config('parameters { key: "HINT_BF16" value { string_value: "NO" } }', "openvino"))
    assert backend._properties()["INFERENCE_PRECISION_HINT"] == "f32"
    bf16 = _config('parameters { key: "HINT_BF16" value { string_value: "YES" } }', "openvino")
    assert loaded(OpenVinoBackend, ir_dir, bf16)._properties()["INFERENCE_PRECISION_HINT"] == "bf16"
    assert np.isfinite(backend.infer({"x": mlp_rows(2)})["y"]).all()
    for key in ("SKIP_OV_DYNAMIC_BATCHSIZE", "CPU_EXTENSION_PATH", "COMPILATION_NUM_THREADS"):
        cfg = _config(f'parameters {{ key: "{key}" value {{ string_value: "YES" }} }}', "openvino")
        with pytest.raises(Unsupported, match=f"openvino parameter '{key}' is set, but servelab does not implement it"):
            loaded(OpenVinoBackend, ir_dir, cfg)
