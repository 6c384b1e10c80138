"""Python backend: serves a user's ``model.py`` with Triton's python_backend contract, unchanged.

The file defines ``TritonPythonModel`` (or ``Model``) with optional ``auto_complete_config(config)``
(a static method, run in a short-lived process of its own, see :mod:`.python_autocomplete`),
``initialize(args)``, ``execute(requests)`` (plain or ``async def``) and ``finalize()``. Requests and
responses are :mod:`triton_python_backend_utils <servelab.backends.pb_utils>` objects; ``args`` has
Triton's keys (``model_config`` as Triton's JSON, ``model_name``, ``model_version``,
``model_repository``, ``model_instance_kind``, ``model_instance_name``, ``model_instance_device_id``).

Default models return one response per request (an ``InferenceResponse``; servelab's first API's dict
of arrays or exception instance works too), or send it through the request's response sender.
Decoupled models (``model_transaction_policy { decoupled: true }``) send zero, one or many responses per
request through its sender, from ``execute`` or from threads that outlive it (:meth:`execute_stream`).
The backend installs the instance's services for pb_utils (BLS calls, custom metrics) at load.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import logging
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from servelab.backends._specs import model_file
from servelab.backends.base import (
    Backend,
    BackendContext,
    Emit,
    Executed,
    Inputs,
    Outputs,
    StreamItem,
    StreamRequest,
)
from servelab.backends.parameters import ModelParameters, PythonParameters
from servelab.backends.pb_utils import _runtime
from servelab.backends.pb_utils._config import config_json
from servelab.backends.pb_utils._errors import TritonError, to_servelab
from servelab.backends.pb_utils._request import InferenceRequest, InferenceResponse, InferenceResponseSender
from servelab.backends.python_autocomplete import autocomplete_python
from servelab.errors import InternalError, InvalidArgument, ServelabError, Unsupported
from servelab.protocol import model_config_pb2 as mc

__all__ = ["PythonBackend", "is_decoupled"]

log = logging.getLogger("servelab.backends.python")

_CLASS_NAMES = ("TritonPythonModel", "Model")


def is_decoupled(config: mc.ModelConfig) -> bool:
    """Whether the config sets ``model_transaction_policy { decoupled: true }``."""
    return config.HasField("model_transaction_policy") and config.model_transaction_policy.decoupled


def _as_array(value: Any) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind == "U":
        return np.array([s.encode() for s in arr.reshape(-1)], dtype=object).reshape(arr.shape)
    if arr.dtype.kind == "S":
        return arr.astype(object)
    return arr


class _Kept:
    """Responses a default (non-decoupled) model sent through its senders, by request index."""

    def __init__(self) -> None:
        self.items: dict[int, StreamItem] = {}

    def __call__(self, index: int, item: StreamItem) -> None:
        self.items[index] = item


class PythonBackend(Backend):
    """Runs a user-written Python model class (see the module docstring)."""

    kind: ClassVar[str] = "python"
    platforms: ClassVar[tuple[str, ...]] = ()
    default_filename: ClassVar[str] = "model.py"
    releases_gil: ClassVar[bool] = False
    parameters: ClassVar[type[ModelParameters] | None] = PythonParameters

    def __init__(self, ctx: BackendContext) -> None:
        super().__init__(ctx)
        self.model: Any = None
        self.decoupled = is_decoupled(ctx.config)
        self._module_name = ""
        self._outputs: list[str] = [t.name for t in ctx.config.output]
        self._owner = f"{ctx.model_name}/{ctx.version}/{id(self):x}"
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def autocomplete(cls, config: mc.ModelConfig, version_dir: Path) -> None:
        """Run the model's ``auto_complete_config`` (if it has one) on ``config``, in place."""
        autocomplete_python(config, version_dir / (config.default_model_filename or cls.default_filename))

    # ----- life -----
    def load(self) -> None:
        path = model_file(self.config, self.ctx.version_dir, self.default_filename)
        declared = PythonParameters.read(self.config).never_blocks  # a bad value fails the load, naming it
        self._install_services()
        cls = self._import(path)
        self.model = cls()
        coroutine = inspect.iscoroutinefunction(getattr(self.model, "execute", None))
        if coroutine:
            self._start_loop()
        # the author's word (parameter execute_never_blocks); an async execute waits on its own loop
        self.never_blocks = declared and not coroutine and not self.decoupled
        if hasattr(self.model, "initialize"):
            try:
                self.model.initialize(self._initialize_args())
            except Exception as exc:
                self._stop_loop()
                raise InvalidArgument(f"initialize() of model '{self.ctx.model_name}' failed: {exc!r}") from exc

    def _install_services(self) -> None:
        store = self.ctx.custom_metrics
        sink = store.bind(self._owner) if store is not None else None
        _runtime.install(_runtime.Services(self.ctx.infer, self.ctx.infer_stream, sink, self.ctx.model_name))

    def _import(self, path: Path) -> Any:
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
            raise InvalidArgument(f"importing {path} for model '{self.ctx.model_name}' failed: {exc!r}") from exc
        cls = next((getattr(module, n) for n in _CLASS_NAMES if hasattr(module, n)), None)
        if cls is None:
            raise InvalidArgument(f"{path} defines neither class {' nor '.join(_CLASS_NAMES)}")
        return cls

    def _initialize_args(self) -> dict[str, str]:
        ctx = self.ctx
        return {
            "model_config": config_json(ctx.config),
            "model_name": ctx.model_name,
            "model_version": str(ctx.version),
            "model_repository": str(ctx.version_dir.parent),
            "model_instance_kind": "CPU",
            "model_instance_name": f"{ctx.model_name}_0",
            "model_instance_device_id": "0",
        }

    def unload(self) -> None:
        try:
            if self.model is not None and hasattr(self.model, "finalize"):
                self.model.finalize()
        finally:
            self.model = None
            self._stop_loop()
            sys.modules.pop(self._module_name, None)
            if self.ctx.custom_metrics is not None:
                self.ctx.custom_metrics.forget(self._owner)

    # ----- async def execute: one event loop per instance, in a thread of its own -----
    def _start_loop(self) -> None:
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True, name=f"model-{self.ctx.model_name}-loop").start()
        self._loop = loop

    def _stop_loop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)

    def _run(self, requests: list[InferenceRequest], wait: bool) -> Any:
        """Call ``execute``; a coroutine runs on the instance's loop (awaited unless ``wait`` is False)."""
        result = self.model.execute(requests)
        if not inspect.iscoroutine(result):
            return result
        if self._loop is None:
            self._start_loop()
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(result, self._loop)
        return future.result() if wait else future

    def _failure(self, exc: BaseException) -> InternalError:
        return InternalError(
            f"Failed to process the request(s) for python model '{self.ctx.model_name}', message: "
            f"{type(exc).__name__}: {exc}"
        )

    # ----- default models: one response per request -----
    def execute(self, requests: list[Inputs]) -> list[Outputs | ServelabError]:
        name = self.ctx.model_name
        if self.decoupled:
            return [Unsupported(
                f"HTTP end point and ModelInfer RPC don't support models with decoupled transaction policy: model "
                f"'{name}' may answer a request with any number of responses; send it over gRPC ModelStreamInfer "
                "(from a python model: exec(decoupled=True))"
            )] * len(requests)  # fmt: skip
        kept = _Kept()
        wrapped = [
            InferenceRequest._for_execute(r, {}, list(self._outputs), name, InferenceResponseSender(kept, i, _never),
                                          _never)
            for i, r in enumerate(requests)
        ]  # fmt: skip
        try:
            results = self._run(wrapped, wait=True)
        except Exception as exc:
            return [self._failure(exc)] * len(requests)
        if results is None:
            results = [kept.items.get(i) for i in range(len(requests))]
        if not isinstance(results, list | tuple) or len(results) != len(requests):
            got = f"{len(results)} items" if isinstance(results, list | tuple) else type(results).__name__
            error = InternalError(f"python model '{name}' execute() must return a list of {len(requests)} items, got {got}")
            return [error] * len(requests)
        return [self._response(r) for r in results]

    def infer(self, inputs: Inputs) -> Outputs:
        result = self.execute([inputs])[0]
        if isinstance(result, ServelabError):
            raise result
        return result

    def _response(self, item: object) -> Outputs | ServelabError:
        name = self.ctx.model_name
        if type(item) is InferenceResponse:  # nearly always: its Tensors hold arrays in the server's form already
            result = item._result()
            return result if isinstance(result, ServelabError) else self._complete(result)
        if isinstance(item, InferenceResponse):
            item = item._item(final=True)
        if isinstance(item, StreamItem):
            if item.error is not None:
                return item.error
            item = item.outputs if item.outputs is not None else {}
        if isinstance(item, TritonError):
            return to_servelab(item)
        if isinstance(item, ServelabError):
            return item
        if isinstance(item, Exception):
            return InternalError(f"python model '{name}': {item!r}")
        if item is None:
            return InternalError(f"python model '{name}' sent no response for a request; return or send an InferenceResponse")
        if not isinstance(item, dict):
            return InternalError(f"python model '{name}' returned {type(item).__name__} for a request; expected an InferenceResponse")
        return self._complete({str(k): _as_array(v) for k, v in item.items()})

    def _complete(self, outputs: Outputs) -> Outputs | ServelabError:
        """``outputs``, or the error naming the declared outputs the model left out."""
        missing = [o for o in self._outputs if o not in outputs]
        if missing:
            name = self.ctx.model_name
            return InternalError(f"python model '{name}' did not return outputs {missing}; it returned {sorted(outputs)}")
        return outputs

    # ----- decoupled models: any number of responses per request, through the senders -----
    def execute_stream(self, requests: list[StreamRequest], emit: Emit) -> Executed:
        """Hand the requests to ``execute``; responses leave through ``emit`` as the model sends them, also
        after ``execute`` has returned. Returns when ``execute`` does (an ``async def execute`` is only
        started). An exception fails every request that has not had its final response."""
        t0 = time.perf_counter_ns()
        name = self.ctx.model_name
        senders = [InferenceResponseSender(emit, i, r.cancelled) for i, r in enumerate(requests)]
        wrapped = [
            InferenceRequest._for_execute(r.inputs, r.parameters, r.outputs or list(self._outputs), name, s, r.cancelled,
                                          r.request_id)
            for r, s in zip(requests, senders, strict=True)
        ]  # fmt: skip
        try:
            result = self._run(wrapped, wait=False)
        except Exception as exc:
            self._fail_open(senders, exc)
        else:
            if isinstance(result, Future):
                result.add_done_callback(lambda f: self._settled(f, senders))
            elif result is not None:
                self._returned(result, senders)
        return Executed([], 0, time.perf_counter_ns() - t0, 0)

    def _settled(self, future: Future[Any], senders: list[InferenceResponseSender]) -> None:
        """An ``async def execute`` of a decoupled model finished."""
        exc = future.exception()
        if exc is not None:
            self._fail_open(senders, exc)
        elif future.result() is not None:
            self._returned(future.result(), senders)

    def _returned(self, result: Any, senders: list[InferenceResponseSender]) -> None:
        """A decoupled ``execute`` returned responses instead of None: each is its request's final one."""
        if not isinstance(result, list | tuple) or len(result) != len(senders):
            self._fail_open(senders, TypeError("a decoupled model's execute() must return None"))
            return
        for item, sender in zip(result, senders, strict=True):
            if not sender.closed:
                response = self._response(item)
                sender._close_with(StreamItem(error=response) if isinstance(response, ServelabError)
                                   else StreamItem(response))  # fmt: skip

    def _fail_open(self, senders: list[InferenceResponseSender], exc: BaseException) -> None:
        error = self._failure(exc)
        log.warning("%s", error.message)
        for sender in senders:
            sender._close_with(StreamItem(error=error))


def _never() -> bool:
    return False
