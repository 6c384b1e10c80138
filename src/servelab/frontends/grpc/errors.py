"""The gRPC front-end's one error table: :class:`ErrorCode` -> ``grpc.StatusCode``, applied by :func:`rpc`.

Servicer methods raise :class:`servelab.errors.ServelabError` subclasses and never call
``context.abort`` themselves; the :func:`rpc` decorator turns the error into a status with the message
as details, cut to ``max_error_bytes`` (the servicer's, from settings ``limits.grpc_max_error_bytes``):
details travel percent-encoded in trailing metadata, and a stock client refuses trailers over 8 KiB as
a transport failure instead of showing the message. Anything else is a bug: the client gets INTERNAL with a request id, the traceback goes to
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

from servelab.core.workers import LINGER_ALLOWED
from servelab.errors import ErrorCode, ServelabError

__all__ = ["DEFAULT_MAX_ERROR_BYTES", "STATUS_FOR_CODE", "describe", "rpc", "trim_message"]

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
    ErrorCode.UNKNOWN: grpc.StatusCode.UNKNOWN,
}

#: UTF-8 bytes of a message at most: percent-encoded (3 bytes per non-ASCII byte) under 8 KiB
DEFAULT_MAX_ERROR_BYTES = 2048

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Handler = Callable[[Any, Req, grpc.aio.ServicerContext], Awaitable[Resp]]


def trim_message(message: str, max_bytes: int = DEFAULT_MAX_ERROR_BYTES) -> str:
    """``message`` when its UTF-8 form fits ``max_bytes``, else its start and how much was cut."""
    raw = message.encode("utf-8", errors="replace")
    if len(raw) <= max_bytes:
        return message
    marker = f" ... [{len(raw)} bytes, cut]"
    head = raw[: max(0, max_bytes - len(marker))].decode("utf-8", errors="ignore")
    return head + marker


def describe(
    exc: Exception, method: str, max_bytes: int = DEFAULT_MAX_ERROR_BYTES
) -> tuple[grpc.StatusCode, str]:
    """Status and client-facing message for ``exc``; unexpected errors are logged with a request id."""
    if isinstance(exc, ServelabError):
        return STATUS_FOR_CODE.get(exc.code, grpc.StatusCode.INTERNAL), trim_message(exc.message, max_bytes)
    request_id = uuid.uuid4().hex[:16]
    log.error("gRPC %s failed [request id %s]", method, request_id, exc_info=exc)
    return grpc.StatusCode.INTERNAL, f"internal server error (request id {request_id}); see the server log"


def rpc(method: Handler[Req, Resp]) -> Handler[Req, Resp]:
    """Wrap a unary servicer method so that every error leaves as the mapped gRPC status."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Req, context: grpc.aio.ServicerContext) -> Resp:
        if not getattr(context, "allows_linger", False):  # the h2 door has no poller thread
            LINGER_ALLOWED.set(False)  # grpc.aio's poller thread needs the CPU a polling worker would take
        try:
            return await method(self, request, context)
        except grpc.aio.AbortError:
            raise  # context.abort() was already called; its status stands
        except Exception as exc:
            code, message = describe(exc, method.__name__, getattr(self, "max_error_bytes", DEFAULT_MAX_ERROR_BYTES))
            await context.abort(code, message)
            raise AssertionError("context.abort returned") from exc  # pragma: no cover - abort always raises

    return wrapper
