"""The backend contract: load / execute a list of requests / unload.

A backend wraps one runtime for one model version. The scheduler hands it a list of requests, each a
dict of input name -> numpy array that already passed validation against the model's config; it
returns, per request, a dict of output name -> numpy array or a ServelabError that fails that request
alone. Tensor runtimes implement only :meth:`Backend.infer` on one (batched) input dict; the default
:meth:`Backend.execute` follows :func:`run_batched`, the one batch rule: concatenate the requests once
along the batch axis, call ``infer`` once, split the outputs back by row counts, and when that fails
run each request alone so that a bad request fails only itself. :meth:`Backend.execute_timed` is what
schedulers call: the same, with the time of each stage.

Decoupled models (``model_transaction_policy { decoupled: true }``, python models) answer a request
with zero, one or many responses (:class:`StreamItem`), the last one ``final``; a backend that can implements
``execute_stream(requests, emit)`` (see :class:`StreamRequest`), and ``BackendContext.infer_stream``
calls such a model through the server.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from servelab.backends.parameters import ModelParameters
from servelab.errors import InternalError, ServelabError
from servelab.metrics.custom import MetricStore
from servelab.protocol import model_config_pb2 as mc
from servelab.trust import version_file

__all__ = [
    "Backend",
    "BackendContext",
    "Emit",
    "Executed",
    "InferFn",
    "Inputs",
    "Outputs",
    "StreamFn",
    "StreamItem",
    "StreamRequest",
    "concat_rows",
    "run_batched",
    "split_rows",
]

Inputs = dict[str, np.ndarray]
Outputs = dict[str, np.ndarray]
#: Calls another model through the server: (model name, version or "", inputs) -> outputs.
InferFn = Callable[[str, str, Inputs], Outputs]


@dataclass(slots=True)
class StreamItem:
    """One response of a decoupled model: its outputs (None: a response that only says "final"), or the
    error that fails it; ``final`` says no response for this request follows."""

    outputs: Outputs | None = None
    error: ServelabError | None = None
    final: bool = False
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class StreamRequest:
    """One request for ``execute_stream``: inputs, the request's parameters, the outputs the client asked
    for (empty: all), whether the client has gone (``cancelled()``) and the client's request id."""

    inputs: Inputs
    parameters: dict[str, Any] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)
    cancelled: Callable[[], bool] = lambda: False
    request_id: str = ""


#: Where a decoupled backend sends a response: (index of the request in the execution, the response).
Emit = Callable[[int, StreamItem], None]
#: Calls a decoupled (or any) model through the server: (model, version or "", inputs, parameters) -> responses.
StreamFn = Callable[[str, str, Inputs, dict[str, Any]], Iterator[StreamItem]]


@dataclass
class BackendContext:
    """What a backend gets at construction: where its files are and how it is configured."""

    model_name: str
    version: int
    version_dir: Path
    config: mc.ModelConfig
    #: Threads the runtime may use for this instance (intra-op); derived from instances x cores.
    threads: int = 1
    #: Present for backends that call other models (ensembles, pipelines).
    infer: InferFn | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: Whether calling (model, version) through ``infer`` never blocks the caller (see never_blocks).
    calls_never_block: Callable[[str, str], bool] | None = None
    #: Calls a model through the server and yields its responses (a decoupled model's many; BLS).
    infer_stream: StreamFn | None = None
    #: Where a model's custom metrics go (python models' pb_utils.MetricFamily); None: nowhere.
    custom_metrics: MetricStore | None = None

    @property
    def model_path(self) -> Path:
        """The config's ``default_model_filename`` (checked to stay in the model's folder), else the version folder."""
        name = self.config.default_model_filename
        return version_file(self.version_dir, name, "default_model_filename") if name else self.version_dir


def concat_rows(requests: list[Inputs]) -> tuple[Inputs, list[int]]:
    """Concatenate each input along axis 0 in one call; returns the batch and each request's rows."""
    first = requests[0]
    rows = [len(next(iter(r.values()))) if r else 0 for r in requests]
    batch = {name: np.concatenate([r[name] for r in requests], axis=0) for name in first}
    return batch, rows


def split_rows(outputs: Outputs, rows: list[int]) -> list[Outputs]:
    """Split batched outputs back into per-request dicts (views, no copies)."""
    bounds = np.cumsum(rows)[:-1]
    parts = {name: np.split(arr, bounds, axis=0) for name, arr in outputs.items()}
    return [{name: parts[name][i] for name in outputs} for i in range(len(rows))]


@dataclass(slots=True)
class Executed:
    """What one execution of a list of requests returned, and where its time went (ns).

    ``queue_ns`` is time spent waiting for the instance itself (a busy worker process), which the
    schedulers report as queue time like the batcher's queue.
    """

    results: list[Outputs | ServelabError]
    input_ns: int = 0
    infer_ns: int = 0
    output_ns: int = 0
    queue_ns: int = 0


def run_batched(backend: Backend, requests: list[Inputs]) -> Executed:
    """The batch rule, the only one: several requests of a batching model run as ONE ``infer``.

    Concatenate each input once (compute input), infer once (compute infer), split the outputs back
    by rows (compute output). If concatenating or the batch fails, each request runs alone, so one
    bad request fails only itself. Models that do not batch (or a single request) run request by
    request.
    """
    t0 = time.perf_counter_ns()
    if len(requests) == 1 or backend.config.max_batch_size <= 0:
        results = [backend._guarded(r) for r in requests]
        return Executed(results, 0, time.perf_counter_ns() - t0, 0)
    try:
        batch, rows = concat_rows(requests)
    except Exception:  # inputs that cannot share a batch: each alone
        results = [backend._guarded(r) for r in requests]
        return Executed(results, 0, time.perf_counter_ns() - t0, 0)
    t1 = time.perf_counter_ns()
    try:
        outputs = backend.infer(batch)
    except Exception:
        results = [backend._guarded(r) for r in requests]
        return Executed(results, t1 - t0, time.perf_counter_ns() - t1, 0)
    t2 = time.perf_counter_ns()
    parts: list[Outputs | ServelabError] = list(split_rows(outputs, rows))
    return Executed(parts, t1 - t0, t2 - t1, time.perf_counter_ns() - t2)


class Backend(ABC):
    """One model version on one runtime. Subclasses set ``kind`` and implement load and infer."""

    #: Name used in config.pbtxt ``backend:`` (e.g. "onnxruntime").
    kind: ClassVar[str] = ""
    #: Triton ``platform:`` names this backend answers to.
    platforms: ClassVar[tuple[str, ...]] = ()
    #: Model file (or folder) name in the version directory, when the config names none.
    default_filename: ClassVar[str] = ""
    #: False when the runtime holds the GIL while it computes (instances then want processes).
    releases_gil: ClassVar[bool] = True
    #: The typed schema of the config ``parameters`` it reads (backends/parameters.py); plug-in backends
    #: set theirs here so that tools writing configs (``servelab select``) find it by backend name.
    parameters: ClassVar[type[ModelParameters] | None] = None
    #: True when a call never waits on anything but the CPU (no sleep, lock, socket or queue), so
    #: the event loop may run a short one itself. Runtimes declare it; a python model only through its
    #: author's parameter ``execute_never_blocks`` (backends/parameters.py PythonParameters).
    never_blocks: bool = False

    def __init__(self, ctx: BackendContext) -> None:
        self.ctx = ctx
        self.config = ctx.config

    @classmethod
    def autocomplete(cls, config: mc.ModelConfig, version_dir: Path) -> None:
        """Fill missing inputs, outputs and max_batch_size from the model file, in place.

        The default does nothing; the repository then reports what the config must state.
        """

    @abstractmethod
    def load(self) -> None:
        """Open the model file and get ready to infer (may warm up)."""

    @abstractmethod
    def infer(self, inputs: Inputs) -> Outputs:
        """Run one (possibly batched) input dict through the runtime; return every output."""

    def execute(self, requests: list[Inputs]) -> list[Outputs | ServelabError]:
        """Run several requests as one batch when the model batches, else one by one (:func:`run_batched`)."""
        return run_batched(self, requests).results

    def execute_timed(self, requests: list[Inputs]) -> Executed:
        """:meth:`execute` with the time of each stage; what schedulers call.

        Backends with the stock ``execute`` get the batch rule's stage times; one with its own
        ``execute`` (python models) is timed as a whole, guarded so that it cannot fail the caller.
        """
        if type(self).execute is Backend.execute:
            return run_batched(self, requests)
        t0 = time.perf_counter_ns()
        try:
            results = self.execute(requests)
            if len(results) != len(requests):
                raise InternalError(f"returned {len(results)} results for {len(requests)} requests")
        except ServelabError as exc:
            results = [exc] * len(requests)
        except Exception as exc:  # a backend must never take its caller down
            results = [InternalError(f"model '{self.ctx.model_name}' failed: {exc}")] * len(requests)
        return Executed(results, 0, time.perf_counter_ns() - t0, 0)

    def _guarded(self, inputs: Inputs) -> Outputs | ServelabError:
        try:
            return self.infer(inputs)
        except ServelabError as exc:
            return exc
        except Exception as exc:  # runtime errors fail this request only
            return InternalError(f"{self.kind} failed on model '{self.ctx.model_name}': {exc}")

    def stage_stats(self) -> dict[str, Any]:
        """Cumulative time of the backend's own stages (e.g. sampling, gather, ensemble steps), if any.

        Reported under ``stages`` in the statistics extension and exported as metrics.
        """
        return {}

    def unload(self) -> None:
        """Release the runtime's resources."""
