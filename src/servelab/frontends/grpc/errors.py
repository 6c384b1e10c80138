"""The gRPC front-end's one error table: :class:`ErrorCode` -> ``grpc.StatusCode``, applied by :func:`rpc`.

Servicer methods raise :class:`servelab.errors.ServelabError` subclasses and never call
``context.abort`` themselves; the :func:`rpc` decorator turns the error into a status with the message
as details. Anything else is a bug: the client gets INTERNAL with a request id, the traceback goes to
the server log under the same id, never onto the wire.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
import grpc.aio

from servelab.errors import ErrorCode, ServelabError

__all__ = ["STATUS_FOR_CODE", "describe", "rpc"]

log = logging.getLogger("servelab.grpc")

#: The single mapping from neutral error codes to gRPC status codes.
STATUS_FOR_CODE: dict[ErrorCode, grpc.StatusCode] = {
    ErrorCode.INVALID_ARG: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.UNSUPPORTED: grpc.StatusCode.UNIMPLEMENTED,
    ErrorCode.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorCode.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.PAYLOAD_TOO_LARGE: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    ErrorCode.CANCELLED: grpc.StatusCode.CANCELLED,
    ErrorCode.INTERNAL: grpc.StatusCode.INTERNAL,
}

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Handler = Callable[[Any, Req, grpc.aio.ServicerContext], Awaitable[Resp]]


def describe(exc: Exception, method: str) -> tuple[grpc.StatusCode, str]:
    """Status and client-facing message for ``exc``; unexpected errors are logged with a request id."""
    if isinstance(exc, ServelabError):
        return STATUS_FOR_CODE.get(exc.code, grpc.StatusCode.INTERNAL), exc.message
    request_id = uuid.uuid4().hex[:16]
    log.error("gRPC %s failed [request id %s]", method, request_id, exc_info=exc)
    return grpc.StatusCode.INTERNAL, f"internal server error (request id {request_id}); see the server log"


def rpc(method: Handler[Req, Resp]) -> Handler[Req, Resp]:
    """Wrap a unary servicer method so that every error leaves as the mapped gRPC status."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Req, context: grpc.aio.ServicerContext) -> Resp:
        try:
            return await method(self, request, context)
        except grpc.aio.AbortError:
            raise  # context.abort() was already called; its status stands
        except Exception as exc:
            code, message = describe(exc, method.__name__)
            await context.abort(code, message)
            raise AssertionError("context.abort returned") from exc  # pragma: no cover - abort always raises

    return wrapper
