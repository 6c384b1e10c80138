"""TensorFlow backend: a SavedModel run through one signature.

The SavedModel is ``<version>/model.savedmodel/`` (Triton's layout), the config's
``default_model_filename``, or the version folder itself when it holds ``saved_model.pb`` (TF
Serving's ``<base_path>/<version>/`` layout). ``tensorflow`` is imported in
:meth:`TensorFlowBackend.load` / ``autocomplete``, so this module imports anywhere; a missing library
is an Unsupported error naming the pip extra. The signature is ``serving_default`` unless the
parameter ``TF_SIGNATURE_DEF`` (Triton's name) or ``signature_name`` says otherwise (TensorFlowParameters); ``TF_GRAPH_TAG``
picks the meta graph of a SavedModel that has several (default: TensorFlow's choice, ``serve``).
Inputs are passed by name; BYTES tensors are numpy object arrays of ``bytes``, which TensorFlow takes
as ``tf.string``; ``tf.string`` outputs come back as object arrays of ``bytes``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from servelab.backends._specs import TensorSpec, complete_config, model_file
from servelab.backends.base import Backend, BackendContext, Inputs, Outputs
from servelab.backends.parameters import TensorFlowParameters
from servelab.errors import InvalidArgument, Unsupported
from servelab.protocol import model_config_pb2 as mc
from servelab.types import DataType

__all__ = ["TensorFlowBackend"]

_INSTALL = "pip install 'servelab[tensorflow]'"
#: tf.DType.name -> OIP datatype
_TF_TYPES = {
    "bool": DataType.BOOL,
    "uint8": DataType.UINT8,
    "uint16": DataType.UINT16,
    "uint32": DataType.UINT32,
    "uint64": DataType.UINT64,
    "int8": DataType.INT8,
    "int16": DataType.INT16,
    "int32": DataType.INT32,
    "int64": DataType.INT64,
    "float16": DataType.FP16,
    "float32": DataType.FP32,
    "float64": DataType.FP64,
    "bfloat16": DataType.BF16,
    "string": DataType.BYTES,
}


def _import_tensorflow() -> Any:
    try:
        import tensorflow
    except ImportError as exc:
        raise Unsupported(
            f"the tensorflow backend needs TensorFlow ({exc}); install it with: {_INSTALL}"
        ) from exc
    return tensorflow


#: files that make a folder a SavedModel
_SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")


def _savedmodel_path(config: mc.ModelConfig, version_dir: Path) -> Path:
    """The config's file, else ``model.savedmodel``, else the version folder if it is a SavedModel."""
    if config.default_model_filename or not any((version_dir / f).is_file() for f in _SAVED_MODEL_FILES):
        return model_file(config, version_dir, TensorFlowBackend.default_filename)
    return version_dir


def _signature(tf: Any, config: mc.ModelConfig, path: Path) -> tuple[Any, Any]:
    """(loaded SavedModel, its concrete function for the configured signature)."""
    params = TensorFlowParameters.read(config)
    loaded = tf.saved_model.load(str(path), tags=[params.graph_tag] if params.graph_tag else None)
    name = params.signature
    if name not in loaded.signatures:
        raise InvalidArgument(
            f"SavedModel {path.name} has no signature {name!r}; it has {sorted(loaded.signatures)}"
        )
    return loaded, loaded.signatures[name]


def _spec(name: str, tensor_spec: Any) -> TensorSpec:
    type_name = tensor_spec.dtype.name
    if type_name not in _TF_TYPES:
        raise Unsupported(f"TensorFlow tensor '{name}' has dtype {type_name}, not servable")
    dims = tensor_spec.shape.as_list() if tensor_spec.shape.rank is not None else []
    return TensorSpec(name, _TF_TYPES[type_name], tuple(-1 if d is None else int(d) for d in dims))


def _signature_specs(fn: Any) -> tuple[list[TensorSpec], list[TensorSpec]]:
    _, kwargs = fn.structured_input_signature
    inputs = [_spec(name, spec) for name, spec in sorted(kwargs.items())]
    outputs = [_spec(name, spec) for name, spec in sorted(fn.structured_outputs.items())]
    return inputs, outputs


class TensorFlowBackend(Backend):
    """Runs a TensorFlow SavedModel signature."""

    kind: ClassVar[str] = "tensorflow"
    platforms: ClassVar[tuple[str, ...]] = ("tensorflow_savedmodel",)
    default_filename: ClassVar[str] = "model.savedmodel"
    never_blocks = True  # the runtime computes; nothing in a call waits on I/O or a lock

    def __init__(self, ctx: BackendContext) -> None:
        super().__init__(ctx)
        self._tf: Any = None
        self._loaded: Any = None
        self._fn: Any = None
        self._bf16_outputs: frozenset[str] = frozenset()

    @classmethod
    def autocomplete(cls, config: mc.ModelConfig, version_dir: Path) -> None:
        tf = _import_tensorflow()
        _, fn = _signature(tf, config, _savedmodel_path(config, version_dir))
        complete_config(config, *_signature_specs(fn))

    def load(self) -> None:
        self._tf = _import_tensorflow()
        path = _savedmodel_path(self.config, self.ctx.version_dir)
        self._loaded, self._fn = _signature(self._tf, self.config, path)
        _, outputs = _signature_specs(self._fn)
        self._bf16_outputs = frozenset(s.name for s in outputs if s.dtype is DataType.BF16)

    def infer(self, inputs: Inputs) -> Outputs:
        tf = self._tf
        feed = {name: tf.convert_to_tensor(arr) for name, arr in inputs.items()}
        result = self._fn(**feed)
        outputs: Outputs = {}
        for name, tensor in result.items():
            arr = tensor.numpy()
            if name in self._bf16_outputs:
                arr = np.asarray(arr).view(np.uint16).view(DataType.BF16.numpy_dtype)
            outputs[name] = arr
        return outputs

    def unload(self) -> None:
        self._fn = None
        self._loaded = None
