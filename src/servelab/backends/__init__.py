"""Backends by name, imported lazily so that a missing runtime only fails the models that need it.

``config.pbtxt`` picks one with ``backend: "onnxruntime"`` or Triton's ``platform: "onnxruntime_onnx"``;
a missing one is inferred from the model file in the version directory. ``backend`` may also be an
import path ``package.module:Class`` for a backend shipped elsewhere, when the operator allows custom
backends (:func:`servelab.trust.check_custom_backend`): importing a module runs its code.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from servelab.backends.base import Backend, BackendContext
from servelab.errors import InvalidArgument, Unsupported
from servelab.trust import check_custom_backend

__all__ = ["BACKENDS", "Backend", "BackendContext", "backend_class", "backend_for_files", "backend_for_platform"]

#: name -> (import path, pip extra that provides the runtime or None)
BACKENDS: dict[str, tuple[str, str | None]] = {
    "onnxruntime": ("servelab.backends.onnxruntime:OnnxRuntimeBackend", None),
    "pytorch": ("servelab.backends.torch:TorchBackend", "torch"),
    "openvino": ("servelab.backends.openvino:OpenVinoBackend", "openvino"),
    "python": ("servelab.backends.python:PythonBackend", None),
    "ensemble": ("servelab.backends.ensemble:EnsembleBackend", None),
    "tensorrt": ("servelab.backends.tensorrt:TensorRTBackend", "tensorrt"),
    "tensorflow": ("servelab.backends.tensorflow:TensorFlowBackend", "tensorflow"),
    "graphsage_sampler": ("servelab.graph.backend:GraphSamplerBackend", "graph"),
    "graphsage": ("servelab.graph.fused:FusedSageBackend", "graph"),
}

_PLATFORMS = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "torch_export": "pytorch",
    "openvino": "openvino",
    "tensorrt_plan": "tensorrt",
    "tensorflow_savedmodel": "tensorflow",
    "ensemble": "ensemble",
}

#: model file in a version directory -> backend, in order of preference
_FILES = (
    ("model.onnx", "onnxruntime"),
    ("model.pt", "pytorch"),
    ("model.pt2", "pytorch"),
    ("model.xml", "openvino"),
    ("model.plan", "tensorrt"),
    ("model.savedmodel", "tensorflow"),
    ("model.py", "python"),
)


def backend_for_platform(platform: str) -> str:
    try:
        return _PLATFORMS[platform]
    except KeyError:
        raise InvalidArgument(f"unknown platform {platform!r}; expected one of {sorted(_PLATFORMS)}") from None


def backend_for_files(version_dir: Path) -> tuple[str, str] | None:
    """(backend name, model file name) for the first known model file in ``version_dir``."""
    for filename, name in _FILES:
        if (version_dir / filename).exists():
            return name, filename
    return None


def backend_class(name: str, *, allow_custom: bool = False) -> type[Backend]:
    """Import the backend called ``name``; a missing runtime names the pip extra to install.

    ``module:Class`` names are imported only with ``allow_custom`` (the operator's setting).
    """
    if ":" in name:
        check_custom_backend(name, allow_custom)
        target, extra = name, None
    elif name in BACKENDS:
        target, extra = BACKENDS[name]
    else:
        raise Unsupported(f"unknown backend {name!r}; expected one of {sorted(BACKENDS)} or 'module:Class'")
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f"; install it with: pip install 'servelab[{extra}]'" if extra else ""
        raise Unsupported(f"backend {name!r} cannot be imported ({exc}){hint}") from exc
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise InvalidArgument(f"{target} is not a servelab Backend subclass")
    return cls
