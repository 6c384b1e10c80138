"""TorchServe's inference API on the HTTP port: ``GET /ping`` and ``POST|PUT /predictions/{m}[/{v}[/path]]``.

A TorchServe archive (a ``torchserve_handler`` model) gets the request as TorchServe's frontend hands it
to the handler (:mod:`servelab.frontends.torchserve.forms`) and the handler's answer goes back as
TorchServe sends it: its status, content type (none if the handler sets none), headers and bytes;
streamed parts as chunks; a failed batch as TorchServe's error JSON. Any other model maps the body to
its tensors (:mod:`servelab.frontends.torchserve.tensors`). Errors are TorchServe's
``{"code", "type", "message"}``; versions are TorchServe's strings for archives, servelab's numbers
otherwise. Without a version (or with a label) the router picks it (:mod:`servelab.core.routing`):
``set-default`` pins the default there, for every front door alike; else the store's default (archives)
or the newest.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from servelab.frontends.rest._body import off_loop_if_large, read_body
from servelab.frontends.rest._common import dataplane, json_response, settings
from servelab.frontends.torchserve import ModelView, model_view, predict
from servelab.frontends.torchserve.forms import http_request
from servelab.frontends.torchserve.tensors import decode_body, encode_outputs
from servelab.frontends.torchserve.wire import INTERNAL_EXCEPTION, rest_error_body, rest_json
from servelab.protocol.torchserve_envelope import TsResponse
from servelab.types import InferRequest

__all__ = ["handler_response", "routes"]

_JSON = "application/json"


async def ping(request: Request) -> Response:
    healthy = dataplane(request).ready()
    body = rest_json({"status": "Healthy" if healthy else "Unhealthy"})
    return Response(body, 200 if healthy else 500, media_type=_JSON)


def handler_response(answer: TsResponse) -> Response:
    """The HTTP response TorchServe's frontend sends for a handler's answer."""
    if answer.error:
        status = 507 if answer.status == 413 else answer.status  # TorchServe's RestJob.sendError
        return Response(rest_error_body(status, answer.error, INTERNAL_EXCEPTION), status, media_type=_JSON)
    headers = dict(answer.headers)
    if answer.content_type:
        headers["content-type"] = answer.content_type
    if answer.streamed:
        return StreamingResponse(iter(answer.parts), answer.status, headers)
    return Response(answer.body, answer.status, headers)


async def _tensor_predict(request: Request, view: ModelView, body: bytes | bytearray) -> Response:
    dp = dataplane(request)
    limits = settings(request).limits
    meta = dp.model_metadata(view.name, view.version)
    content_type = request.headers.get("content-type", "")
    tensors, added = await off_loop_if_large(
        len(body), limits.offload_decode_bytes, decode_body, body, content_type, meta, view.name, limits
    )
    response = await dp.infer_async(InferRequest(view.name, tensors, view.version), request.headers)
    return json_response(encode_outputs(response, added))


async def predictions(request: Request) -> Response:
    params = request.path_params
    view = model_view(dataplane(request), params["model"], params.get("version", ""))
    limits = settings(request).limits
    body = await read_body(request, limits.max_body_bytes)
    if not view.handler:
        return await _tensor_predict(request, view, body)
    ts_request = await off_loop_if_large(
        len(body), limits.offload_decode_bytes, http_request, body, request.headers.items(), params.get("path", "")
    )
    return handler_response(await predict(dataplane(request), view, ts_request, request.headers))


def routes() -> list[BaseRoute]:
    methods = ["POST", "PUT"]
    return [
        Route("/ping", ping, methods=["GET"]),
        Route("/predictions/{model}", predictions, methods=methods),
        Route("/predictions/{model}/{version}", predictions, methods=methods),
        Route("/predictions/{model}/{version}/{path:path}", predictions, methods=methods),
    ]
