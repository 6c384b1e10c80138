"""``inference.GRPCInferenceService`` and ``grpc.health.v1.Health`` on top of the data plane.

Each method only translates protobuf to and from the data plane's types; errors are mapped by the
:func:`~servelab.frontends.grpc.errors.rpc` decorator. Blocking repository work (load, unload) runs in
a worker thread so the event loop keeps serving. System shared memory uses the server's regions (shared
with its REST port); CUDA shared memory needs a GPU and cuda-python (else registering is UNIMPLEMENTED,
saying so, and its status is empty). Log settings are real, trace settings answer "off" (:mod:`servelab.frontends.trace_logging`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from time import perf_counter_ns
from typing import Any, TypeAlias

import grpc.aio
from google.protobuf import json_format

from servelab.config.settings import LimitSettings
from servelab.core.dataplane import DataPlane
from servelab.core.workers import LINGER_ALLOWED
from servelab.errors import InvalidArgument, NotFound
from servelab.frontends.grpc.codec import decode_infer, decode_plain, encode_response, payload_bytes
from servelab.frontends.grpc.errors import describe, rpc
from servelab.frontends.grpc.metadata import Metadata
from servelab.frontends.grpc.settings_codec import (
    log_settings_message,
    settings_from_log,
    settings_from_trace,
    trace_settings_message,
)
from servelab.frontends.shared_memory import RegionSlice, SharedMemory
from servelab.frontends.trace_logging import (
    LOGGING_EXTENSION,
    LoggingSettings,
    trace_settings,
    update_trace_settings,
)
from servelab.protocol import grpc_service_pb2 as pb
from servelab.protocol import grpc_service_pb2_grpc as pb_grpc
from servelab.protocol import health_pb2, health_pb2_grpc
from servelab.repository import FILE_PREFIX
from servelab.types import InferRequest

__all__ = ["HealthServicer", "InferenceServicer"]

log = logging.getLogger("servelab.grpc")

Context: TypeAlias = grpc.aio.ServicerContext
SERVICE_NAME = "inference.GRPCInferenceService"
#: Requests of one ModelStreamInfer stream that may run at the same time.
STREAM_WINDOW = 64
_LOAD_PARAMETERS = ("config",)


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    """Triton's full gRPC service; the OIP core plus streaming, config, statistics and repository."""

    def __init__(
        self,
        dataplane: DataPlane,
        *,
        stream_window: int = STREAM_WINDOW,
        limits: LimitSettings | None = None,
        shared_memory: SharedMemory | None = None,
    ) -> None:
        self.dataplane = dataplane
        self.stream_window = stream_window
        self.limits = limits if limits is not None else LimitSettings()
        #: the regions clients register (the server's, shared with its REST port)
        self.shared_memory = shared_memory if shared_memory is not None else SharedMemory()
        for ext in (*self.shared_memory.extensions(), LOGGING_EXTENSION):
            if ext not in dataplane.extensions:
                dataplane.extensions.append(ext)
        #: read by the ``rpc`` decorator: longest error message sent
        self.max_error_bytes = self.limits.grpc_max_error_bytes

    # ----- health and metadata -----
    @rpc
    async def ServerLive(self, request: pb.ServerLiveRequest, context: Context) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self.dataplane.live())

    @rpc
    async def ServerReady(self, request: pb.ServerReadyRequest, context: Context) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.dataplane.ready())

    @rpc
    async def ModelReady(self, request: pb.ModelReadyRequest, context: Context) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=self.dataplane.model_ready(request.name, request.version))

    @rpc
    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: Context
    ) -> pb.ServerMetadataResponse:
        meta = self.dataplane.server_metadata()
        return pb.ServerMetadataResponse(
            name=meta["name"], version=meta["version"], extensions=meta["extensions"]
        )

    @rpc
    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: Context
    ) -> pb.ModelMetadataResponse:
        meta = self.dataplane.model_metadata(request.name, request.version)
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=meta["name"],
            versions=meta["versions"],
            platform=meta["platform"],
            inputs=[tensor(name=t["name"], datatype=t["datatype"], shape=t["shape"]) for t in meta["inputs"]],
            outputs=[
                tensor(name=t["name"], datatype=t["datatype"], shape=t["shape"]) for t in meta["outputs"]
            ],
        )

    @rpc
    async def ModelConfig(self, request: pb.ModelConfigRequest, context: Context) -> pb.ModelConfigResponse:
        return pb.ModelConfigResponse(config=self.dataplane.model_config(request.name, request.version))

    @rpc
    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: Context
    ) -> pb.ModelStatisticsResponse:
        dp = self.dataplane  # with sibling processes the figures come over their sockets: not on the loop
        stats = (await asyncio.to_thread(dp.statistics, request.name, request.version) if dp.siblings is not None
                 else dp.statistics(request.name, request.version))  # fmt: skip
        # servelab extras (wire_stats, stages) have no field in Triton's proto: REST only
        return json_format.ParseDict(stats, pb.ModelStatisticsResponse(), ignore_unknown_fields=True)

    # ----- inference -----
    @rpc
    async def ModelInfer(self, request: pb.ModelInferRequest, context: Context) -> pb.ModelInferResponse:
        t0 = perf_counter_ns()  # decode and encode run here, without coroutines of their own
        plain = self._decode_small(request)
        decoded, regions = (plain, {}) if plain is not None else await self._decode_other(request)
        t1 = perf_counter_ns()
        response = await self.dataplane.infer_async(decoded, Metadata(context))  # metadata: a policy's sticky key
        t2 = perf_counter_ns()
        encoded = encode_response(response, regions, self.shared_memory)
        self.dataplane.record_wire(response, t1 - t0, perf_counter_ns() - t2)
        return encoded

    def _decode_small(self, request: pb.ModelInferRequest) -> InferRequest | None:
        """Nearly every call: small and all raw (its size is the raw's), decoded here without a coroutine."""
        if sum(map(len, request.raw_input_contents)) <= self.limits.offload_decode_bytes:
            return decode_plain(request, self.limits)
        return None

    async def _decode(self, request: pb.ModelInferRequest) -> tuple[InferRequest, dict[str, RegionSlice]]:
        """(request, outputs to write into shared memory); large payloads decode off the loop."""
        plain = self._decode_small(request)
        return (plain, {}) if plain is not None else await self._decode_other(request)

    async def _decode_other(self, request: pb.ModelInferRequest) -> tuple[InferRequest, dict[str, RegionSlice]]:
        """What the plain decoder declined: the general decoder, off the loop for a large payload."""
        if payload_bytes(request) > self.limits.offload_decode_bytes:  # keep the loop free for small calls
            return await asyncio.to_thread(decode_infer, request, self.limits, self.shared_memory)
        return decode_infer(request, self.limits, self.shared_memory)

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: Context
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Responses in completion order: one per request, any number for a decoupled model's, each with
        ``triton_final_response``; a failed one carries error_message."""
        LINGER_ALLOWED.set(False)  # as for unary calls (errors.rpc)
        done: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue()
        window = asyncio.Semaphore(self.stream_window)
        running: set[asyncio.Task[None]] = set()

        metadata = Metadata(context)

        async def answer(request: pb.ModelInferRequest) -> None:
            try:
                async for response in self._stream_one(request, metadata):
                    done.put_nowait(response)
            finally:
                window.release()

        async def read() -> None:
            try:
                async for request in request_iterator:
                    await window.acquire()
                    task = asyncio.create_task(answer(request))
                    running.add(task)
                    task.add_done_callback(running.discard)
                if running:
                    await asyncio.gather(*running)
            finally:
                done.put_nowait(None)

        reader = asyncio.create_task(read())
        try:
            while (item := await done.get()) is not None:
                yield item
            await reader  # re-raises a failure to read the client's stream
        except Exception as exc:  # the stream itself broke: one mapped status, as for unary calls
            code, message = describe(exc, "ModelStreamInfer")
            await context.abort(code, message)
        finally:
            reader.cancel()
            for task in list(running):
                task.cancel()

    async def _stream_one(
        self, request: pb.ModelInferRequest, metadata: Metadata
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        t0 = perf_counter_ns()
        try:
            decoded, regions = await self._decode(request)
            decode_ns = perf_counter_ns() - t0
            async with contextlib.aclosing(self.dataplane.infer_stream(decoded, metadata)) as items:  # a gone client ends it
                async for item in items:
                    if item.response is None:
                        yield self._stream_error(request, item.error, item.final)
                        continue
                    t1 = perf_counter_ns()
                    encoded = encode_response(item.response, regions, self.shared_memory)
                    self.dataplane.record_wire(item.response, decode_ns, perf_counter_ns() - t1)
                    decode_ns = 0  # counted once per request
                    yield pb.ModelStreamInferResponse(infer_response=encoded)
        except Exception as exc:
            yield self._stream_error(request, exc, True)

    def _stream_error(self, request: pb.ModelInferRequest, exc: Exception | None, final: bool) -> pb.ModelStreamInferResponse:
        """A failed response: error_message, and the request's id and model echoed (as Triton does)."""
        _, message = describe(exc or Exception("no error"), "ModelStreamInfer")
        echo = pb.ModelInferResponse(model_name=request.model_name, model_version=request.model_version, id=request.id)
        echo.parameters["triton_final_response"].bool_param = final
        return pb.ModelStreamInferResponse(error_message=message, infer_response=echo)

    # ----- repository -----
    @rpc
    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: Context
    ) -> pb.RepositoryIndexResponse:
        rows = self.dataplane.repository_index(ready_only=request.ready)
        index = pb.RepositoryIndexResponse.ModelIndex
        return pb.RepositoryIndexResponse(models=[index(**row) for row in rows])

    @rpc
    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Context
    ) -> pb.RepositoryModelLoadResponse:
        params = _repository_parameters(request.parameters, request.model_name)
        files = _load_files(params, request.model_name)
        unknown = sorted(set(params) - set(_LOAD_PARAMETERS) - {FILE_PREFIX + k for k in files})
        if unknown:
            raise InvalidArgument(
                f"load of '{request.model_name}': unknown parameters {unknown}; accepted: {list(_LOAD_PARAMETERS)}"
            )
        config = params.get("config")
        if config is not None and not isinstance(config, str):
            raise InvalidArgument(
                f"load of '{request.model_name}': parameters['config'] must be a string_param holding "
                "ModelConfig JSON"
            )
        await asyncio.to_thread(self.dataplane.load_model, request.model_name, config or None, files or None)
        return pb.RepositoryModelLoadResponse()

    @rpc
    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Context
    ) -> pb.RepositoryModelUnloadResponse:
        params = _repository_parameters(request.parameters, request.model_name)
        dependents = params.pop("unload_dependents", False)
        if params:
            raise InvalidArgument(
                f"unload of '{request.model_name}': unknown parameters {sorted(params)}; accepted: "
                "['unload_dependents']"
            )
        if not isinstance(dependents, bool):
            raise InvalidArgument(
                f"unload of '{request.model_name}': parameters['unload_dependents'] must be a bool_param"
            )
        await asyncio.to_thread(self.dataplane.unload_model, request.model_name, dependents)
        return pb.RepositoryModelUnloadResponse()

    # ----- system shared memory (the server's regions) -----
    @rpc
    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: Context
    ) -> pb.SystemSharedMemoryStatusResponse:
        status = pb.SystemSharedMemoryStatusResponse
        rows = self.shared_memory.system.status(request.name)
        return status(regions={r["name"]: status.RegionStatus(**r) for r in rows})

    @rpc
    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: Context
    ) -> pb.SystemSharedMemoryRegisterResponse:
        self.shared_memory.system.register(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    @rpc
    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: Context
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        self.shared_memory.system.unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    # ----- CUDA shared memory (UNIMPLEMENTED without a GPU and cuda-python) -----
    @rpc
    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context: Context
    ) -> pb.CudaSharedMemoryStatusResponse:
        status = pb.CudaSharedMemoryStatusResponse
        rows = self.shared_memory.cuda.status(request.name)
        return status(regions={r["name"]: status.RegionStatus(**r) for r in rows})

    @rpc
    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, context: Context
    ) -> pb.CudaSharedMemoryRegisterResponse:
        self.shared_memory.cuda.register(request.name, request.raw_handle, request.device_id, request.byte_size)
        return pb.CudaSharedMemoryRegisterResponse()

    @rpc
    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context: Context
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        self.shared_memory.cuda.unregister(request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    # ----- trace and log settings -----
    @rpc
    async def TraceSetting(self, request: pb.TraceSettingRequest, context: Context) -> pb.TraceSettingResponse:
        if request.model_name:
            self.dataplane.model_config(request.model_name)  # an unknown model is NOT_FOUND
        changes = settings_from_trace(request)
        return trace_settings_message(update_trace_settings(changes) if changes else trace_settings())

    @rpc
    async def LogSettings(self, request: pb.LogSettingsRequest, context: Context) -> pb.LogSettingsResponse:
        logs = LoggingSettings()
        changes = settings_from_log(request)
        return log_settings_message(logs.update(changes) if changes else logs.get())


class HealthServicer(health_pb2_grpc.HealthServicer):
    """``grpc.health.v1.Health/Check``: the server (service "" or the inference service) or one model."""

    def __init__(self, dataplane: DataPlane) -> None:
        self.dataplane = dataplane

    @rpc
    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: Context
    ) -> health_pb2.HealthCheckResponse:
        status = health_pb2.HealthCheckResponse
        if request.service in ("", SERVICE_NAME):
            ready = self.dataplane.ready()
        elif self.dataplane.model_ready(request.service):
            ready = True
        elif any(row["name"] == request.service for row in self.dataplane.repository_index()):
            ready = False
        else:
            raise NotFound(
                f"unknown service '{request.service}'; expected '', '{SERVICE_NAME}' or a model name"
            )
        return status(status=status.SERVING if ready else status.NOT_SERVING)


def _repository_parameters(params: Any, model: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, p in params.items():
        choice = p.WhichOneof("parameter_choice")
        if choice is None:
            raise InvalidArgument(f"model '{model}': repository parameter '{key}' has no value")
        out[key] = getattr(p, choice)
    return out


def _load_files(params: dict[str, Any], model: str) -> dict[str, bytes]:
    """The ``file:<path>`` parameters (bytes_param, as tritonclient sends them) as path -> content; the
    paths are checked where the files are written (:mod:`servelab.repository.uploads`)."""
    files: dict[str, bytes] = {}
    for key, value in params.items():
        if key.startswith(FILE_PREFIX):
            if not isinstance(value, bytes):
                raise InvalidArgument(f"load of '{model}': parameters[{key!r}] must be a bytes_param holding the file")
            files[key.removeprefix(FILE_PREFIX)] = value
    return files

