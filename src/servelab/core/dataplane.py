"""The single handler every front-end calls: health, metadata, config, infer, statistics, repository.

Front-ends only translate their wire format to and from :mod:`servelab.types`; everything a request
goes through is here, once, so that REST, gRPC, the compatibility APIs, the in-process Engine,
ensemble steps and BLS calls behave the same: the router picks the version (:mod:`servelab.core.routing`),
the request is validated against that version's config, scheduled, its outputs selected and classified,
and its statistics, variant counts and shadow copy recorded. The three entry points (sync, async, numpy)
differ only in how they wait for the scheduler.

Decoupled models (``model_transaction_policy { decoupled: true }``) answer a request with any number
of responses: :meth:`DataPlane.infer_stream` (gRPC ModelStreamInfer; BLS ``exec(decoupled=True)``
through ``_internal_stream``), routed like any request; asked for one response, the python backend
refuses them, as Triton's HTTP endpoint and ModelInfer RPC do.

Beside it: :mod:`servelab.core.repository_control` (statistics, load and unload), :mod:`servelab.core.call_records` (what a request's end records, the same for every entry
point), :mod:`servelab.core.decoupled` (the pieces of a stream) and :mod:`servelab.core.model_views`
(metadata and statistics rows).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Iterator, Mapping
from typing import Any

import numpy as np

from servelab.backends.base import Inputs, Outputs, StreamItem, StreamRequest
from servelab.config.settings import RoutingSettings
from servelab.core.call_records import Call
from servelab.core.classification import classify
from servelab.core.decoupled import EMPTY_FINAL, FINAL, Streamed, is_decoupled, next_item, streamed_response
from servelab.core.model_views import model_metadata
from servelab.core.records import LoadedVersion, ModelState
from servelab.core.registry import ModelRegistry
from servelab.core.repository_control import RepositoryControl, Siblings
from servelab.core.routing import HeaderLookup, RolloutControl, Router
from servelab.core.workers import AsyncSink, ThreadSink, start_stream
from servelab.errors import InvalidArgument, NotFound, ServelabError, Unavailable, Unsupported
from servelab.protocol import model_config_pb2 as mc
from servelab.types import DataType, InferRequest, InferResponse, RequestedOutput, Tensor

__all__ = ["SERVER_NAME", "SERVER_VERSION", "DataPlane", "Siblings", "Streamed"]

SERVER_NAME = "servelab"
SERVER_VERSION = "0.1.0"
BASE_EXTENSIONS = (
    "classification",
    "model_repository",
    "model_repository(unload_dependents)",
    "model_configuration",
    "statistics",
    "parameters",
    "sequence",
    "sequence(string_id)",
)


class DataPlane(RepositoryControl):
    def __init__(
        self,
        registry: ModelRegistry,
        *,
        request_timeout_s: float = 60.0,
        extensions: tuple[str, ...] = BASE_EXTENSIONS,
        strict_readiness: bool = True,
        routing: RoutingSettings | None = None,
        server_name: str = SERVER_NAME,
    ) -> None:
        self.registry = registry
        self.server_name = server_name
        #: the one place that picks a version (labels, splits, rollouts, shadows)
        self.router = Router(registry, routing)
        self.rollouts = RolloutControl(self.router)
        self.request_timeout_s = request_timeout_s
        self.extensions = list(extensions)
        self.strict_readiness = strict_readiness
        self._started = False
        self._startup_models: list[str] = []
        #: set when this process is one of several on the same ports (``--processes``)
        self.siblings: Siblings | None = None
        registry.infer_fn = self._internal_infer
        registry.infer_stream_fn = self._internal_stream

    # ----- health and metadata -----
    def startup(self, names: list[str] | None = None) -> None:
        self.registry.startup(names)
        self._startup_models = [r.name for r in self.registry.records()]
        self._started = True

    def live(self) -> bool:
        return True

    def ready(self) -> bool:
        if not self._started:
            return False
        if not self.strict_readiness:
            return True
        for name in self._startup_models:
            try:
                record = self.registry.record(name)
            except NotFound:
                continue
            if record.state is not ModelState.READY and record.reason != "unloaded":
                return False
        return True

    def server_metadata(self) -> dict[str, Any]:
        return {"name": self.server_name, "version": SERVER_VERSION, "extensions": list(self.extensions)}

    def model_ready(self, name: str, version: str = "") -> bool:
        try:
            self.router.resolve(name, version)
        except ServelabError:
            return False
        return True

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        lv = self.router.resolve(name, version)
        return model_metadata(name, lv, self.registry.record(name))

    def model_config(self, name: str, version: str = "") -> mc.ModelConfig:
        return self.router.resolve(name, version).config

    # ----- routing: default versions, labels, rollouts (core/routing decides) -----
    def resolve_version(self, name: str, version: str = "") -> str:
        """The version number a version, a label or nothing (the default) names now."""
        return str(self.router.resolve(name, version).version)

    def labels(self, name: str) -> dict[str, int]:
        return self.router.labels(name)

    def set_default_version(self, name: str, version: str | None) -> None:
        """Pin the version (or label) requests without one go to; None: back to the policy's or the newest."""
        self.rollouts.set_default(name, version)
        if self.siblings is not None:
            self.siblings.broadcast("set_default", name=name, version=version)

    def rollout_status(self, name: str) -> dict[str, Any]:
        return self.rollouts.status(name)

    def start_rollout(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        self._one_process("rollouts")
        return self.rollouts.start(name, spec)

    def rollout_action(self, name: str, action: str) -> dict[str, Any]:
        """pause | resume | abort | promote."""
        self._one_process("rollouts")
        return self.rollouts.act(name, action)

    def _one_process(self, what: str) -> None:
        if self.siblings is not None:
            raise Unsupported(f"{what} run in one server process: their gates count one process's answers; "
                              "start servelab with --processes 1 to use them")

    # ----- inference: one path -----
    def infer(self, request: InferRequest, headers: HeaderLookup | None = None) -> InferResponse:
        """Synchronous inference (in-process callers and worker threads)."""
        call = self._enter(request.model_name, request.model_version, request.parameters, headers,
                           request.inputs, request.outputs)
        with call:  # records the answer, or the error
            t0 = time.perf_counter_ns()
            outputs = call.lv.scheduler.run(call.inputs)
            call.served(outputs, t0)
            response = self._response(call.lv, request, outputs)
        return response

    async def infer_async(self, request: InferRequest, headers: HeaderLookup | None = None) -> InferResponse:
        """Inference for the servers: the runtime in a worker, a timeout on the whole.

        ``headers`` (HTTP headers, gRPC metadata) are read only for a routing policy's sticky key.
        """
        call = self._enter(request.model_name, request.model_version, request.parameters, headers,
                           request.inputs, request.outputs)
        with call:  # records the answer, or the error
            t0 = time.perf_counter_ns()
            scheduler = call.lv.scheduler
            try:
                deadline_s = scheduler.deadline_s
                if scheduler.runs_inline_now:  # it would run on the loop, awaiting nothing: no timeout could fire,
                    outputs = scheduler.run(call.inputs)  # and run_async would only add two coroutines
                elif deadline_s is not None and deadline_s <= self.request_timeout_s:  # its workers answer by then
                    outputs = await scheduler.run_async(call.inputs, request.parameters)
                else:  # asyncio.timeout, not wait_for: no extra task and loop turns
                    async with asyncio.timeout(self.request_timeout_s):
                        outputs = await scheduler.run_async(call.inputs, request.parameters)
            except TimeoutError:
                raise Unavailable(
                    f"model '{request.model_name}' did not answer within {self.request_timeout_s:g} s"
                ) from None
            call.served(outputs, t0)
            response = self._response(call.lv, request, outputs)
        return response

    def infer_arrays(
        self, name: str, inputs: dict[str, np.ndarray], version: str = "", outputs: list[str] | None = None
    ) -> dict[str, np.ndarray]:
        """The in-process fast path: numpy in, numpy out; the same route, validation and statistics."""
        requested = [RequestedOutput(n) for n in outputs] if outputs is not None else []
        call = self._enter(name, version, None, None, inputs, requested)
        with call:  # records the answer, or the error
            t0 = time.perf_counter_ns()
            result = call.lv.signature.client_outputs(call.lv.scheduler.run(call.inputs))
            call.served(result, t0)
            selected = self._select(call.lv, result, outputs)
        return selected

    async def infer_stream(
        self, request: InferRequest, headers: HeaderLookup | None = None
    ) -> AsyncGenerator[Streamed, None]:
        """Every response to ``request``: a decoupled model's zero, one or many, one for any other model.

        Each response carries ``triton_final_response``; a decoupled model's final response without
        outputs is sent only when the request sets ``triton_enable_empty_final_response``. A response
        that fails is an error item (the request's stream may go on); bad input raises at once.
        """
        if not is_decoupled(self.router.resolve(request.model_name, request.model_version)):
            response = await self.infer_async(request, headers)
            response.parameters[FINAL] = True
            yield Streamed(response)
            return
        call = self._enter(request.model_name, request.model_version, request.parameters, headers,
                           request.inputs, request.outputs)
        lv = call.lv
        if any(r.class_count for r in request.outputs):
            raise Unsupported(f"model '{lv.name}' is decoupled: its outputs cannot be classified")
        wanted = [r.name for r in request.outputs]
        sink = AsyncSink(asyncio.get_running_loop())
        failed = False
        with lv.scheduler.track():
            start_stream(lv.instances, StreamRequest(call.inputs, dict(request.parameters), wanted, request_id=request.id), sink)
            try:
                while True:
                    item = await next_item(lv, sink, self.request_timeout_s)
                    failed = failed or item.error is not None
                    if item.error is not None:
                        yield Streamed(None, item.error, item.final)
                    elif item.outputs is not None or request.parameters.get(EMPTY_FINAL) is True:
                        yield Streamed(streamed_response(lv, request, item), final=item.final)
                    if item.final:
                        break
            finally:
                sink.cancel()  # a no-op once the final response came
                call.stream_ended(sink, not failed and sink.finished)

    def _internal_stream(self, name: str, version: str, inputs: Inputs, parameters: dict[str, Any]) -> Iterator[StreamItem]:
        """How python models call a model and read every response (BLS ``exec(decoupled=True)``)."""
        if not is_decoupled(self.router.resolve(name, version)):
            yield StreamItem(self.infer_arrays(name, inputs, version), final=True)
            return
        call = self._enter(name, version, parameters, None, inputs, [])
        lv = call.lv
        sink = ThreadSink()
        failed = False
        with lv.scheduler.track():
            start_stream(lv.instances, StreamRequest(call.inputs, dict(parameters), []), sink)
            try:
                while True:
                    item = sink.get(self.request_timeout_s) or StreamItem(
                        error=Unavailable(f"model '{name}' sent no response within {self.request_timeout_s:g} s"),
                        final=True)  # fmt: skip
                    failed = failed or item.error is not None
                    yield item
                    if item.final:
                        return
            finally:
                sink.cancel()
                call.stream_ended(sink, not failed and sink.finished)

    def _enter(
        self, name: str, version: str, parameters: Mapping[str, Any] | None, headers: HeaderLookup | None,
        inputs: list[Tensor] | dict[str, np.ndarray], requested: list[RequestedOutput],
    ) -> Call:
        """Route (the router picks the version), then validate against that version's config."""
        t0 = time.perf_counter_ns()
        lv, routed = self.router.route(name, version, parameters, headers)
        try:
            if isinstance(inputs, dict):
                arrays = lv.signature.check_arrays(inputs)
            else:
                arrays = lv.signature.check_tensors(inputs)
            self._check_requested(lv, requested)
        except ServelabError:
            lv.stats.record_request(False, time.perf_counter_ns() - t0)
            raise
        return Call(lv, routed, arrays, t0)

    def record_wire(self, response: InferResponse, decode_ns: int, encode_ns: int) -> None:
        """Front-ends report their decode and encode time per answered request (statistics ``wire_stats``)."""
        if response.model_version:
            lv = self.registry.loaded(response.model_name, int(response.model_version))
            if lv is not None:
                lv.stats.record_wire(decode_ns, encode_ns)

    def _internal_infer(self, name: str, version: str, inputs: Inputs) -> Outputs:
        """How ensemble steps and python models' BLS calls re-enter: at the router, like any request."""
        return self.infer_arrays(name, inputs, version)

    def _check_requested(self, lv: LoadedVersion, requested: list[RequestedOutput]) -> None:
        seen: set[str] = set()
        for r in requested:
            if r.name in seen:
                raise InvalidArgument(
                    f"model '{lv.name}': output '{r.name}' is requested more than once; ask for each output once"
                )
            seen.add(r.name)
            if r.name not in lv.signature.outputs:
                raise InvalidArgument(
                    f"model '{lv.name}': unknown requested output '{r.name}'; expected one of "
                    f"{sorted(lv.signature.outputs)}"
                )
            if r.class_count < 0:
                raise InvalidArgument(f"requested output '{r.name}': classification must be >= 0")

    def _response(self, lv: LoadedVersion, request: InferRequest, outputs: Outputs) -> InferResponse:
        t0 = time.perf_counter_ns()
        outputs = lv.signature.client_outputs(outputs)
        tensors: list[Tensor] = []
        wanted = request.outputs or [RequestedOutput(n) for n in lv.signature.outputs]
        for r in wanted:
            array = outputs.get(r.name)
            if array is None:
                raise Unavailable(f"model '{lv.name}' produced no output '{r.name}'")
            if r.class_count > 0:
                labels = lv.labels.get(r.name, [])  # read at load: they go with this version
                array = classify(array, r.class_count, lv.signature.batched, labels, r.name)
                tensors.append(Tensor(r.name, DataType.BYTES, tuple(array.shape), array, dict(r.parameters)))
                continue
            datatype = DataType.from_numpy(array.dtype)
            tensors.append(Tensor(r.name, datatype, array.shape, array, dict(r.parameters) if r.parameters else {}))
        lv.stats.compute_output.add(time.perf_counter_ns() - t0, 0)
        return InferResponse(lv.name, str(lv.version), tensors, request.id)

    @staticmethod
    def _select(lv: LoadedVersion, result: Outputs, outputs: list[str] | None) -> Outputs:
        """The outputs asked for (all the config declares when none are named)."""
        names = outputs if outputs is not None else list(lv.signature.outputs)
        if outputs is None and len(result) == len(names):
            return result
        missing = [n for n in names if n not in result]
        if missing and outputs is not None:
            raise Unavailable(f"model '{lv.name}' produced no output {missing[0]!r}")
        return {n: result[n] for n in names if n in result}

    def close(self, timeout_s: float | None = None) -> None:
        """Unload every model (within ``timeout_s`` if given: worker processes left are killed)."""
        self.rollouts.close()
        self.router.shadows.close()
        self.registry.close(timeout_s)
        self.router.close()

