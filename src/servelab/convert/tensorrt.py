"""TensorRT engines (``model.plan``) from the ONNX export, with one optimisation profile over the batch axis.

Where TensorRT or an NVIDIA GPU is missing, :func:`tensorrt_missing` says so and ``convert`` reports the
artefact as skipped with that reason. INT8 uses explicit quantisation: the QDQ model ONNX Runtime's
static quantiser writes (calibrated on the same samples) is parsed with the INT8 flag, so no TensorRT
calibrator (and no device buffers for one) is needed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from servelab.convert.source_types import TensorInfo
from servelab.errors import InvalidArgument, Unsupported

__all__ = ["DEFAULT_WORKSPACE_MB", "build_engine", "profile_shapes", "tensorrt_missing"]

DEFAULT_WORKSPACE_MB = 1024


def tensorrt_missing() -> str | None:
    """None when engines can be built here; otherwise why not."""
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        return "TensorRT is not installed here (pip install 'servelab[tensorrt]' on a machine with an NVIDIA GPU)"
    try:
        import torch
    except ImportError:
        return "TensorRT engines are built for a GPU; torch (for the CUDA check) is not installed"
    if not torch.cuda.is_available():
        return "TensorRT needs an NVIDIA GPU, and none is visible here"
    return None


def profile_shapes(info: TensorInfo, max_batch_size: int) -> tuple[tuple[int, ...], ...]:
    """(min, opt, max) shapes: batch 1, half the maximum, the maximum; other dims as exported."""
    if any(d < 0 for d in info.shape[1:]):
        raise InvalidArgument(
            f"input {info.name!r} has dynamic dims {list(info.shape)} past the batch axis; TensorRT profiles "
            "need them fixed (give --input with fixed dims)"
        )
    rest = info.shape[1:]
    opt = max(1, max_batch_size // 2)
    return (1, *rest), (opt, *rest), (max_batch_size, *rest)


def _parse(trt: Any, network: Any, logger: Any, onnx_path: Path) -> None:
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(onnx_path.read_bytes()):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise Unsupported(f"TensorRT's ONNX parser refused the model: {errors[:300]}")


def build_engine(
    onnx_path: Path,
    dst: Path,
    inputs: list[TensorInfo],
    precision: str,
    max_batch_size: int,
    calibration: list[dict[str, np.ndarray]],
    workspace_mb: int = DEFAULT_WORKSPACE_MB,
) -> Path:
    """Build and serialise an engine for ``precision`` (fp32, fp16, int8-static) into ``dst``."""
    import tensorrt as trt

    if precision == "int8":
        raise Unsupported("TensorRT int8 is calibrated: ask for int8-static")
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    with tempfile.TemporaryDirectory() as tmp:
        source = onnx_path
        if precision == "int8-static":
            from servelab.convert.quantize import onnx_int8_static

            source = Path(tmp) / "qdq.onnx"
            if not onnx_int8_static(onnx_path, source, calibration):
                raise Unsupported("nothing in this model takes int8")
        _parse(trt, network, logger, source)
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_mb << 20)
    if precision == "fp16":
        config.set_flag(trt.BuilderFlag.FP16)
    elif precision == "int8-static":
        config.set_flag(trt.BuilderFlag.INT8)
    profile = builder.create_optimization_profile()
    for info in inputs:
        profile.set_shape(info.name, *profile_shapes(info, max_batch_size))
    config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise Unsupported(f"TensorRT could not build a {precision} engine for this model (see its log)")
    dst.write_bytes(bytes(serialized))
    return dst
