"""TorchServe's gRPC APIs: ``org.pytorch.serve.grpc.inference.InferenceAPIsService`` (Ping, Predictions,
StreamPredictions) and ``org.pytorch.serve.grpc.management.ManagementAPIsService``, from its published protos.

Predictions hand the request's ``input`` map to the handler as TorchServe does (one parameter per entry,
no content type, no headers) and answer with the handler's bytes; StreamPredictions sends each part a
streaming handler produced (``send_intermediate_predict_response``), after the handler has finished
(servelab's workers answer a batch as a whole). A model that is not a TorchServe archive takes its
``data`` (or ``body``) entry as the REST body and answers the same JSON as the REST door. Management
answers carry the same JSON as TorchServe's REST management API, in ``ManagementResponse.msg``.

Errors are TorchServe's: the status code its ``GRPCUtils`` maps the HTTP status to (INTERNAL for
a prediction on an unknown model, as TorchServe sends), details the message, a newline and the Java
exception class.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
import grpc.aio
import orjson

from servelab.config.settings import ServerSettings
from servelab.core.dataplane import DataPlane
from servelab.core.workers import LINGER_ALLOWED
from servelab.errors import ErrorCode, InvalidArgument, ServelabError
from servelab.frontends.grpc.errors import trim_message
from servelab.frontends.grpc.metadata import Metadata
from servelab.frontends.rest._common import _fallback
from servelab.frontends.torchserve import model_view, predict
from servelab.frontends.torchserve.management import Management
from servelab.frontends.torchserve.tensors import decode_body, encode_outputs
from servelab.frontends.torchserve.wire import (
    INTERNAL_EXCEPTION,
    MODEL_NOT_FOUND,
    exception_for,
    grpc_code,
    gson,
    http_status,
)
from servelab.protocol import torchserve as ts_pb
from servelab.protocol.torchserve_envelope import TsRequest, TsResponse
from servelab.types import InferRequest

__all__ = ["TorchServeInferenceServicer", "TorchServeManagementServicer"]

log = logging.getLogger("servelab.grpc")

inference_pb2 = ts_pb.inference_pb2
management_pb2 = ts_pb.management_pb2
Req = TypeVar("Req")
Resp = TypeVar("Resp")


def _status(exc: ServelabError, prediction: bool) -> tuple[grpc.StatusCode, str]:
    status = getattr(exc, "http_status", None) or http_status(exc)
    if prediction and exc.code in (ErrorCode.NOT_FOUND, ErrorCode.INVALID_ARG):
        return grpc.StatusCode.INTERNAL, f"{exc.message}\n{MODEL_NOT_FOUND if status == 404 else exception_for(status)}"
    return grpc_code(status), f"{exc.message}\n{exception_for(status)}"


def _ts_rpc(prediction: bool) -> Callable[[Callable[..., Awaitable[Resp]]], Callable[..., Awaitable[Resp]]]:
    """Every error of a unary method leaves as TorchServe's status."""

    def wrap(method: Callable[..., Awaitable[Resp]]) -> Callable[..., Awaitable[Resp]]:
        @functools.wraps(method)
        async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Resp:
            try:
                return await method(self, request, context)
            except grpc.aio.AbortError:
                raise
            except ServelabError as exc:
                code, details = _status(exc, prediction)
                await context.abort(code, trim_message(details, self.max_error_bytes))
            except Exception:
                request_id = uuid.uuid4().hex[:16]
                log.exception("TorchServe gRPC %s failed [request id %s]", method.__name__, request_id)
                await context.abort(grpc.StatusCode.INTERNAL, f"internal error (request id {request_id})\n{INTERNAL_EXCEPTION}")
            raise AssertionError("context.abort returned")  # pragma: no cover

        return wrapper

    return wrap


async def _abort_answer(context: grpc.aio.ServicerContext, answer: TsResponse) -> None:
    await context.abort(grpc_code(answer.status), f"{answer.error}\n{INTERNAL_EXCEPTION}")


class TorchServeInferenceServicer(ts_pb.inference_pb2_grpc.InferenceAPIsServiceServicer):  # type: ignore[misc]
    def __init__(self, dataplane: DataPlane, settings: ServerSettings) -> None:
        self.dp = dataplane
        self.settings = settings
        self.max_error_bytes = settings.limits.grpc_max_error_bytes

    async def Ping(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        healthy = self.dp.ready()
        return inference_pb2.TorchServeHealthResponse(health=gson({"status": "Healthy" if healthy else "Unhealthy"}))

    async def _answer(self, request: Any, context: grpc.aio.ServicerContext) -> tuple[TsResponse | None, bytes]:
        """(the handler's answer, or None and the JSON body of a tensor model)."""
        if not request.model_name:
            raise InvalidArgument("Parameter model_name is required.")
        view = model_view(self.dp, request.model_name, request.model_version)
        headers = Metadata(context)
        if view.handler:
            parameters = [(name, "", bytes(value)) for name, value in request.input.items()]
            return await predict(self.dp, view, TsRequest(parameters), headers), b""
        body = request.input.get("data", request.input.get("body"))
        if body is None:
            raise InvalidArgument(f"model '{view.name}': send the request body as input 'data' (or 'body')")
        meta = self.dp.model_metadata(view.name, view.version)
        tensors, added = decode_body(body, "", meta, view.name, self.settings.limits)
        response = await self.dp.infer_async(InferRequest(view.name, tensors, view.version), headers)
        return None, orjson.dumps(encode_outputs(response, added), default=_fallback, option=orjson.OPT_SERIALIZE_NUMPY)

    @_ts_rpc(prediction=True)
    async def Predictions(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        LINGER_ALLOWED.set(False)  # as for OIP calls (errors.rpc)
        answer, body = await self._answer(request, context)
        if answer is not None:
            if answer.error:
                await _abort_answer(context, answer)
            body = answer.body
        return inference_pb2.PredictionResponse(prediction=body)

    async def StreamPredictions(self, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        try:
            answer, body = await self._answer(request, context)
        except ServelabError as exc:
            code, details = _status(exc, prediction=True)
            await context.abort(code, trim_message(details, self.max_error_bytes))
            return
        if answer is None:
            yield inference_pb2.PredictionResponse(prediction=body)
            return
        if answer.error:
            await _abort_answer(context, answer)
        for part in answer.parts:
            yield inference_pb2.PredictionResponse(prediction=part)

    async def StreamPredictions2(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED,
                            "StreamPredictions2 (sequence batching) is not supported by servelab; use StreamPredictions")
        yield inference_pb2.PredictionResponse()  # pragma: no cover - abort raises


class TorchServeManagementServicer(ts_pb.management_pb2_grpc.ManagementAPIsServiceServicer):  # type: ignore[misc]
    def __init__(self, dataplane: DataPlane, settings: ServerSettings) -> None:
        self.management = Management(dataplane, settings)
        self.max_error_bytes = settings.limits.grpc_max_error_bytes

    async def _model_api(self, context: grpc.aio.ServicerContext) -> None:
        if not self.management.model_api:  # TorchServe's ManagementImpl answer
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                "Model API disabled\norg.pytorch.serve.archive.model.ModelException")

    @staticmethod
    def _reply(value: Any) -> Any:
        return management_pb2.ManagementResponse(msg=value if isinstance(value, str) else gson(value))

    @_ts_rpc(prediction=False)
    async def DescribeModel(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return self._reply(self.management.describe(request.model_name, request.model_version))

    @_ts_rpc(prediction=False)
    async def ListModels(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return self._reply(self.management.list_models(request.limit, request.next_page_token))

    @_ts_rpc(prediction=False)
    async def RegisterModel(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._model_api(context)
        message = await self.management.register(
            request.url, request.model_name, max(0, request.initial_workers), max(0, request.batch_size),
            request.max_batch_delay if request.max_batch_delay > 0 else None,
        )  # fmt: skip
        return self._reply(message)

    @_ts_rpc(prediction=False)
    async def ScaleWorker(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        min_worker = request.min_worker if request.min_worker > 0 else 1  # TorchServe's default
        max_worker = request.max_worker if request.max_worker > 0 else min_worker
        return self._reply(await self.management.scale(request.model_name, request.model_version, min_worker, max_worker))

    @_ts_rpc(prediction=False)
    async def SetDefault(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return self._reply(self.management.set_default(request.model_name, request.model_version))

    @_ts_rpc(prediction=False)
    async def UnregisterModel(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._model_api(context)
        if not request.model_name:
            raise InvalidArgument("Parameter url is required.")
        return self._reply(await self.management.unregister(request.model_name, request.model_version))
