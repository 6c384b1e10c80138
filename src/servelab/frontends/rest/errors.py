"""The REST front-end's ONE error table: ErrorCode -> HTTP status, applied in one exception handler.

Every route raises :class:`~servelab.errors.ServelabError` subclasses; the handlers installed by
:func:`install_error_handlers` turn them into ``{"error": "..."}`` (OIP, TF Serving) or TorchServe's
``{"code", "type", "message"}``. Anything else is a bug: 500 with a request id, logged with its
traceback here and never sent to the client.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from servelab.errors import ErrorCode, ServelabError
from servelab.frontends.torchserve.wire import rest_json

__all__ = [
    "HTTP_STATUS",
    "error_response",
    "handled_error",
    "http_status",
    "install_error_handlers",
    "torchserve_error_body",
]

log = logging.getLogger("servelab.rest")

#: ErrorCode -> HTTP status. UNSUPPORTED is 501 as in Triton (the server cannot do this, e.g. repository
#: control in mode 'none'); CANCELLED is 499, nginx's "client closed request"; UNKNOWN is 400, as Triton
#: answers a python model's ``TritonError.UNKNOWN``.
HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.INVALID_ARG: 400,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.RESOURCE_EXHAUSTED: 503,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.UNSUPPORTED: 501,
    ErrorCode.ALREADY_EXISTS: 409,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.CANCELLED: 499,
    ErrorCode.INTERNAL: 500,
    ErrorCode.UNKNOWN: 400,
}

#: TorchServe's exception type names, by status.
_TS_TYPES = {
    400: "BadRequestException",
    401: "InvalidKeyException",
    404: "ModelNotFoundException",
    405: "MethodNotAllowedException",
    409: "ConflictStatusException",
    413: "RequestEntityTooLargeException",
    499: "CancelledException",
    501: "ServiceUnavailableException",
    503: "ServiceUnavailableException",
}

_JSON = "application/json"


def http_status(code: ErrorCode) -> int:
    return HTTP_STATUS.get(code, 500)


def error_response(status: int, message: str, torchserve: bool = False) -> Response:
    if torchserve:  # TorchServe's Gson layout, byte for byte
        return Response(rest_json(torchserve_error_body(status, message)), status, media_type=_JSON)
    return Response(orjson.dumps({"error": message}), status, media_type=_JSON)


def torchserve_error_body(status: int, message: str) -> dict[str, object]:
    kind = _TS_TYPES.get(status, "InternalServerException")
    return {"code": status, "type": kind, "message": message}


def _is_torchserve(request: Request) -> bool:
    return bool(request.app.state.torchserve_errors) or request.url.path.startswith(("/predictions", "/ping"))


async def _servelab_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ServelabError)
    status = getattr(exc, "http_status", None) or http_status(exc.code)  # a front door's own status, if any
    if status >= 500 and exc.code is ErrorCode.INTERNAL:
        log.error("%s %s failed: %s", request.method, request.url.path, exc.message)
    return error_response(status, exc.message, _is_torchserve(request))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = exc.detail or "error"
    if exc.status_code == 404:
        message = f"no route for {request.method} {request.url.path}"
    elif exc.status_code == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
    response = error_response(exc.status_code, message, _is_torchserve(request))
    if exc.headers:
        response.headers.update(exc.headers)
    return response


async def _unexpected(request: Request, exc: Exception) -> Response:
    request_id = uuid.uuid4().hex[:16]
    log.error("request %s: %s %s raised", request_id, request.method, request.url.path, exc_info=exc)
    message = f"internal error (request id {request_id}; the server log has the details)"
    return error_response(500, message, _is_torchserve(request))


_Handler = Callable[[Request, Exception], Awaitable[Response]]

#: exception class -> its handler; the most specific class in an exception's MRO wins, as in Starlette
_HANDLERS: dict[type[Exception], _Handler] = {
    ServelabError: _servelab_error,
    HTTPException: _http_error,
    Exception: _unexpected,
}


def install_error_handlers(app: Starlette, torchserve: bool = False) -> None:
    """Install the handlers; ``torchserve=True`` makes every error use TorchServe's body."""
    app.state.torchserve_errors = torchserve
    for cls, handler in _HANDLERS.items():
        app.add_exception_handler(cls, handler)


async def handled_error(request: Request, exc: Exception) -> Response:
    """The answer the app's handlers give to ``exc``, for code that runs in front of the app's middleware
    (:mod:`servelab.frontends.rest.fast_infer`); ``request.app`` must be the app (its ``torchserve_errors``)."""
    for cls in type(exc).__mro__:
        handler = _HANDLERS.get(cls)
        if handler is not None:
            return await handler(request, exc)
    return await _unexpected(request, exc)  # not reached: every Exception has Exception in its MRO
