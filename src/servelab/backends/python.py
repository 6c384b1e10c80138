"""Python backend: serves a user's ``model.py`` (Triton's python_backend contract).

The file defines ``TritonPythonModel`` (or ``Model``) with ``initialize(args)``, ``execute(requests)``
and ``finalize()``; see :mod:`servelab.backends.python_api` for the request and response objects.
``args`` mirrors Triton's: model_config (JSON), model_name, model_version, model_repository,
model_instance_kind, model_instance_name, model_instance_device_id.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any, ClassVar

import numpy as np
from google.protobuf import json_format

from servelab.backends._specs import model_file
from servelab.backends.base import Backend, BackendContext, Inputs, Outputs
from servelab.backends.python_api import InferenceRequest, InferenceResponse
from servelab.errors import InternalError, InvalidArgument, ServelabError

__all__ = ["PythonBackend"]

_CLASS_NAMES = ("TritonPythonModel", "Model")


def _as_array(value: Any) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind == "U":
        return np.array([s.encode() for s in arr.reshape(-1)], dtype=object).reshape(arr.shape)
    if arr.dtype.kind == "S":
        return arr.astype(object)
    return arr


class PythonBackend(Backend):
    """Runs a user-written Python model class."""

    kind: ClassVar[str] = "python"
    platforms: ClassVar[tuple[str, ...]] = ()
    default_filename: ClassVar[str] = "model.py"
    releases_gil: ClassVar[bool] = False

    def __init__(self, ctx: BackendContext) -> None:
        super().__init__(ctx)
        self.model: Any = None
        self._module_name = ""
        self._outputs: list[str] = [t.name for t in ctx.config.output]

    def load(self) -> None:
        path = model_file(self.config, self.ctx.version_dir, self.default_filename)
        self._module_name = f"servelab_user_model_{self.ctx.model_name}_{self.ctx.version}_{id(self):x}"
        spec = importlib.util.spec_from_file_location(self._module_name, path)
        if spec is None or spec.loader is None:
            raise InvalidArgument(f"cannot import {path} as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[self._module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(self._module_name, None)
            raise InvalidArgument(
                f"importing {path} for model '{self.ctx.model_name}' failed: {exc!r}"
            ) from exc
        cls = next((getattr(module, n) for n in _CLASS_NAMES if hasattr(module, n)), None)
        if cls is None:
            raise InvalidArgument(f"{path} defines neither class {' nor '.join(_CLASS_NAMES)}")
        self.model = cls()
        if hasattr(self.model, "initialize"):
            try:
                self.model.initialize(self._initialize_args())
            except Exception as exc:
                raise InvalidArgument(
                    f"initialize() of model '{self.ctx.model_name}' failed: {exc!r}"
                ) from exc

    def execute(self, requests: list[Inputs]) -> list[Outputs | ServelabError]:
        name = self.ctx.model_name
        wrapped = [InferenceRequest(r, {}, list(self._outputs), name) for r in requests]
        try:
            results = self.model.execute(wrapped)
        except Exception as exc:
            error = InternalError(f"python model '{name}' failed in execute(): {exc!r}")
            return [error] * len(requests)
        if not isinstance(results, list | tuple) or len(results) != len(requests):
            got = f"{len(results)} items" if isinstance(results, list | tuple) else type(results).__name__
            error = InternalError(
                f"python model '{name}' execute() must return a list of {len(requests)} items, got {got}"
            )
            return [error] * len(requests)
        return [self._response(r) for r in results]

    def infer(self, inputs: Inputs) -> Outputs:
        result = self.execute([inputs])[0]
        if isinstance(result, ServelabError):
            raise result
        return result

    def unload(self) -> None:
        if self.model is not None and hasattr(self.model, "finalize"):
            self.model.finalize()
        self.model = None
        sys.modules.pop(self._module_name, None)

    def _response(self, item: object) -> Outputs | ServelabError:
        name = self.ctx.model_name
        if isinstance(item, InferenceResponse):
            if item.error is not None:
                item = item.error if isinstance(item.error, Exception) else InternalError(str(item.error))
            else:
                item = item.as_dict()
        if isinstance(item, ServelabError):
            return item
        if isinstance(item, Exception):
            return InternalError(f"python model '{name}': {item!r}")
        if not isinstance(item, dict):
            return InternalError(
                f"python model '{name}' returned {type(item).__name__} for a request; expected a dict"
            )
        outputs = {str(k): _as_array(v) for k, v in item.items()}
        missing = [o for o in self._outputs if o not in outputs]
        if missing:
            return InternalError(
                f"python model '{name}' did not return outputs {missing}; it returned {sorted(outputs)}"
            )
        return outputs

    def _initialize_args(self) -> dict[str, str]:
        ctx = self.ctx
        return {
            "model_config": json_format.MessageToJson(ctx.config, preserving_proto_field_name=True),
            "model_name": ctx.model_name,
            "model_version": str(ctx.version),
            "model_repository": str(ctx.version_dir.parent),
            "model_instance_kind": "CPU",
            "model_instance_name": f"{ctx.model_name}_0",
            "model_instance_device_id": "0",
        }
