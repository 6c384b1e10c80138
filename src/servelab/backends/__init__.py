"""Backends by name, imported lazily so that a missing runtime only fails the models that need it.

``config.pbtxt`` picks one with ``backend: "onnxruntime"`` or Triton's ``platform: "onnxruntime_onnx"``;
a missing one is inferred from the model file in the version directory. ``backend`` may also be an
import path ``package.module:Class`` for a backend shipped elsewhere, when the operator allows custom
backends (:func:`servelab.trust.check_custom_backend`): importing a module runs its code.

:data:`BACKENDS` holds the backends of the server itself. Other packages add theirs as entry points of
the ``servelab.backends`` group (``name = "package.module:Class [extra]"`` in their packaging metadata),
read once, when a name is not a core one; servelab's own GraphSAGE backends (``graphsage``,
``graphsage_sampler``) come in that way too, so the server's code never names ``servelab.graph``.
"""

from __future__ import annotations

import functools
import importlib
from importlib.metadata import entry_points
from pathlib import Path

from servelab.backends.base import Backend, BackendContext
from servelab.backends.parameters import BACKEND_PARAMETERS, ModelParameters
from servelab.errors import InvalidArgument, Unsupported
from servelab.trust import check_custom_backend

__all__ = [
    "BACKENDS",
    "PLUGIN_GROUP",
    "Backend",
    "BackendContext",
    "backend_class",
    "backend_for_files",
    "backend_for_platform",
    "backend_parameters",
    "plugin_backends",
]

#: entry-point group of plug-in backends
PLUGIN_GROUP = "servelab.backends"
#: core backends: name -> (import path, pip extra of servelab that provides the runtime or None)
BACKENDS: dict[str, tuple[str, str | None]] = {
    "onnxruntime": ("servelab.backends.onnxruntime:OnnxRuntimeBackend", None),
    "pytorch": ("servelab.backends.torch:TorchBackend", "torch"),
    "openvino": ("servelab.backends.openvino:OpenVinoBackend", "openvino"),
    "python": ("servelab.backends.python:PythonBackend", None),
    "ensemble": ("servelab.backends.ensemble:EnsembleBackend", None),
    "tensorrt": ("servelab.backends.tensorrt:TensorRTBackend", "tensorrt"),
    "tensorflow": ("servelab.backends.tensorflow:TensorFlowBackend", "tensorflow"),
    "torchserve_handler": ("servelab.backends.torchserve_handler:TorchServeHandlerBackend", "torchserve"),
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


@functools.cache
def plugin_backends() -> dict[str, tuple[str, str | None]]:
    """Plug-in backends: name -> (import path, pip requirement that brings what it needs, or None).

    Read from the installed distributions' ``servelab.backends`` entry points, once per process; a
    name that is also a core backend stays the core one. The requirement is the entry point's
    distribution with the extras the entry point names (``servelab[graph]``).
    """
    found: dict[str, tuple[str, str | None]] = {}
    for ep in entry_points(group=PLUGIN_GROUP):
        if ep.name in BACKENDS or ep.name in found:
            continue
        dist = ep.dist.name if ep.dist is not None else None
        needs = f"{dist}[{','.join(ep.extras)}]" if dist and ep.extras else None
        found[ep.name] = (f"{ep.module}:{ep.attr}", needs)
    return found


def backend_class(name: str, *, allow_custom: bool = False) -> type[Backend]:
    """Import the backend called ``name``; a missing runtime names the pip extra to install.

    ``module:Class`` names are imported only with ``allow_custom`` (the operator's setting).
    """
    if ":" in name:
        check_custom_backend(name, allow_custom)
        target, needs = name, None
    elif name in BACKENDS:
        target, extra = BACKENDS[name]
        needs = f"servelab[{extra}]" if extra else None
    elif name in plugin_backends():
        target, needs = plugin_backends()[name]
    else:
        known = sorted({*BACKENDS, *plugin_backends()})
        raise Unsupported(
            f"unknown backend {name!r}; expected one of {known} or 'module:Class' (plug-in backends are "
            f"the {PLUGIN_GROUP!r} entry points of installed packages)"
        )
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f"; install it with: pip install '{needs}'" if needs else ""
        raise Unsupported(f"backend {name!r} cannot be imported ({exc}){hint}") from exc
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise InvalidArgument(f"{target} is not a servelab Backend subclass")
    return cls


def backend_parameters(name: str) -> type[ModelParameters]:
    """The parameter schema of backend ``name``: a core one's from backends/parameters.py (no runtime
    imported), a plug-in's from its class (:attr:`Backend.parameters`); InvalidArgument when it has none."""
    if name in BACKEND_PARAMETERS:
        return BACKEND_PARAMETERS[name]
    schema = backend_class(name).parameters
    if schema is None:
        raise InvalidArgument(
            f"backend {name!r} declares no parameter schema (Backend.parameters); "
            f"known schemas: {sorted(BACKEND_PARAMETERS)} and the plug-ins that declare one"
        )
    return schema
