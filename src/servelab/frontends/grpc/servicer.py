"""``inference.GRPCInferenceService`` and ``grpc.health.v1.Health`` on top of the data plane.

Each method only translates protobuf to and from the data plane's types; errors are mapped by the
:func:`~servelab.frontends.grpc.errors.rpc` decorator. Blocking repository work (load, unload) runs in
a worker thread so the event loop keeps serving. Shared memory, tracing and log settings are not
offered: they answer UNIMPLEMENTED with the alternative to use.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from time import perf_counter_ns
from typing import Any, TypeAlias

import grpc.aio
from google.protobuf import json_format

from servelab.config.settings import LimitSettings
from servelab.core.dataplane import DataPlane
from servelab.errors import InvalidArgument, NotFound, Unsupported
from servelab.frontends.grpc.codec import decode_request, encode_response, payload_bytes
from servelab.frontends.grpc.errors import describe, rpc
from servelab.frontends.grpc.metadata import Metadata
from servelab.protocol import grpc_service_pb2 as pb
from servelab.protocol import grpc_service_pb2_grpc as pb_grpc
from servelab.protocol import health_pb2, health_pb2_grpc
from servelab.repository import FILE_PREFIX

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
        self, dataplane: DataPlane, *, stream_window: int = STREAM_WINDOW, limits: LimitSettings | None = None
    ) -> None:
        self.dataplane = dataplane
        self.stream_window = stream_window
        self.limits = limits if limits is not None else LimitSettings()
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
        stats = self.dataplane.statistics(request.name, request.version)
        # servelab extras (wire_stats, stages) have no field in Triton's proto: REST only
        return json_format.ParseDict(stats, pb.ModelStatisticsResponse(), ignore_unknown_fields=True)

    # ----- inference -----
    @rpc
    async def ModelInfer(self, request: pb.ModelInferRequest, context: Context) -> pb.ModelInferResponse:
        return await self._infer(request, Metadata(context))

    async def _infer(self, request: pb.ModelInferRequest, metadata: Metadata) -> pb.ModelInferResponse:
        t0 = perf_counter_ns()
        if payload_bytes(request) > self.limits.offload_decode_bytes:  # keep the loop free for small calls
            decoded = await asyncio.to_thread(decode_request, request, self.limits)
        else:
            decoded = decode_request(request, self.limits)
        t1 = perf_counter_ns()
        response = await self.dataplane.infer_async(decoded, metadata)  # metadata: a policy's sticky key
        t2 = perf_counter_ns()
        encoded = encode_response(response)
        self.dataplane.record_wire(response, t1 - t0, perf_counter_ns() - t2)
        return encoded

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: Context
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Each request gets one response, in completion order; a failed one carries error_message."""
        done: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue()
        window = asyncio.Semaphore(self.stream_window)
        running: set[asyncio.Task[None]] = set()

        metadata = Metadata(context)

        async def answer(request: pb.ModelInferRequest) -> None:
            try:
                done.put_nowait(await self._stream_one(request, metadata))
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

    async def _stream_one(self, request: pb.ModelInferRequest, metadata: Metadata) -> pb.ModelStreamInferResponse:
        try:
            return pb.ModelStreamInferResponse(infer_response=await self._infer(request, metadata))
        except Exception as exc:
            _, message = describe(exc, "ModelStreamInfer")
            echo = pb.ModelInferResponse(
                model_name=request.model_name, model_version=request.model_version, id=request.id
            )
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

    # ----- not offered -----
    @rpc
    async def SystemSharedMemoryStatus(self, request: Any, context: Context) -> Any:
        raise _no_shared_memory("system")

    @rpc
    async def SystemSharedMemoryRegister(self, request: Any, context: Context) -> Any:
        raise _no_shared_memory("system")

    @rpc
    async def SystemSharedMemoryUnregister(self, request: Any, context: Context) -> Any:
        raise _no_shared_memory("system")

    @rpc
    async def CudaSharedMemoryStatus(self, request: Any, context: Context) -> Any:
        raise _no_shared_memory("CUDA")

    @rpc
    async def CudaSharedMemoryRegister(self, request: Any, context: Context) -> Any:
        raise _no_shared_memory("CUDA")

    @rpc
    async def CudaSharedMemoryUnregister(self, request: Any, context: Context) -> Any:
        raise _no_shared_memory("CUDA")

    @rpc
    async def TraceSetting(self, request: Any, context: Context) -> Any:
        raise Unsupported("the trace extension is not supported by this server; use the Prometheus metrics")

    @rpc
    async def LogSettings(self, request: Any, context: Context) -> Any:
        raise Unsupported(
            "the logging extension is not supported by this server; set the log level at start-up"
        )


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


def _no_shared_memory(kind: str) -> Unsupported:
    return Unsupported(
        f"{kind} shared memory is not supported by this server; send tensors in raw_input_contents"
    )
