"""config.pbtxt ``optimization`` for ONNX Runtime, as Triton's onnxruntime backend reads it.

- ``optimization { graph { level } }``: -1 basic, 1 extended, 2 no optimisation, anything else (0) all.
  It may not contradict the ``graph_optimization_level`` parameter (servelab's own key).
- ``execution_accelerators.cpu_execution_accelerator``: ``openvino`` puts OpenVINOExecutionProvider
  (device CPU) before the CPU provider; it is refused where this onnxruntime build has none, as Triton
  refuses it where its build has none. Any other name is refused with Triton's message.
- ``execution_accelerators.gpu_execution_accelerator``: ``tensorrt`` (``precision_mode`` FP16 / INT8,
  ``max_workspace_size_bytes``, ``trt_engine_cache_enable``, ``trt_engine_cache_path`` and any ``trt_*``
  provider option) and ``cuda`` (its parameters are CUDA provider options). Like Triton, they apply to
  GPU instances only (``KIND_GPU``); a provider this onnxruntime lacks is left out, so a GPU fleet's
  config runs on the CPU here (DESIGN.md: one repository for both).
"""

from __future__ import annotations

import logging
from typing import Any

from servelab.errors import InvalidArgument, Unsupported
from servelab.protocol import model_config_pb2 as mc

__all__ = ["GPU_PROVIDERS", "Provider", "cpu_accelerators", "gpu_accelerators", "graph_level"]

log = logging.getLogger("servelab.backends")

GPU_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider")
Provider = str | tuple[str, dict[str, str]]
_LEVELS = {-1: "basic", 1: "extended", 2: "disable"}
_TRT_KEYS = {
    "max_workspace_size_bytes": "trt_max_workspace_size",
    "trt_engine_cache_enable": "trt_engine_cache_enable",
    "trt_engine_cache_path": "trt_engine_cache_path",
}


def graph_level(config: mc.ModelConfig, parameter: str) -> str:
    """The ORT level (disable|basic|extended|all) from ``optimization.graph.level`` and the parameter."""
    if not config.optimization.HasField("graph"):
        return parameter
    level = _LEVELS.get(config.optimization.graph.level, "all")
    if "graph_optimization_level" in config.parameters and parameter != level:
        raise InvalidArgument(
            f"optimization.graph.level {config.optimization.graph.level} means '{level}' but parameter "
            f"graph_optimization_level says '{parameter}'; keep one of them"
        )
    return level


def cpu_accelerators(config: mc.ModelConfig, available: list[str]) -> list[Provider]:
    out: list[Provider] = []
    for acc in config.optimization.execution_accelerators.cpu_execution_accelerator:
        if acc.name != "openvino":
            raise InvalidArgument(
                f"unknown Execution Accelerator '{acc.name}' is requested "
                "(optimization.execution_accelerators.cpu_execution_accelerator: onnxruntime knows 'openvino')"
            )
        if "OpenVINOExecutionProvider" not in available:
            raise Unsupported(
                "optimization.execution_accelerators.cpu_execution_accelerator 'openvino' needs "
                f"OpenVINOExecutionProvider, which this onnxruntime lacks (it has {available}); install "
                "onnxruntime-openvino or serve the model with backend: \"openvino\""
            )
        out.append(("OpenVINOExecutionProvider", {"device_type": "CPU", **dict(acc.parameters)}))
    return out


def gpu_accelerators(config: mc.ModelConfig, available: list[str]) -> list[Provider]:
    """GPU providers of a GPU instance: the config's accelerators, else every GPU provider there is."""
    given = config.optimization.execution_accelerators.gpu_execution_accelerator
    if not given:
        return [p for p in GPU_PROVIDERS if p in available]
    out: list[Provider] = []
    for acc in given:
        name, options = _gpu(acc)
        if name in available:
            out.append((name, options))
        else:
            log.warning("model %s: %s is not in this onnxruntime (%s); the instance runs on the CPU",
                        config.name, name, available)  # fmt: skip
    return out


def _gpu(acc: Any) -> tuple[str, dict[str, str]]:
    params = dict(acc.parameters)
    if acc.name == "cuda":
        return "CUDAExecutionProvider", params
    if acc.name != "tensorrt":
        raise InvalidArgument(
            f"unknown Execution Accelerator '{acc.name}' is requested "
            "(optimization.execution_accelerators.gpu_execution_accelerator: 'tensorrt' or 'cuda')"
        )
    options: dict[str, str] = {}
    for key, value in params.items():
        if key == "precision_mode":
            mode = value.upper()
            if mode not in ("FP32", "FP16", "INT8"):
                raise InvalidArgument(f"tensorrt accelerator precision_mode must be FP32, FP16 or INT8, got {value!r}")
            if mode != "FP32":
                options[f"trt_{mode.lower()}_enable"] = "1"
        elif key in _TRT_KEYS or key.startswith("trt_"):
            options[_TRT_KEYS.get(key) or key] = value
        else:
            raise InvalidArgument(
                f"tensorrt accelerator parameter {key!r} is not known; expected precision_mode, "
                f"{', '.join(sorted(_TRT_KEYS))} or a trt_* TensorRT provider option"
            )
    return "TensorrtExecutionProvider", options
