"""The gRPC side of the door: a server interceptor that reads the call's metadata before any handler runs.

Keys come as ``authorization: Bearer <key>`` metadata (tritonclient: ``headers={"authorization": ...}``);
a restricted protocol's header as ``triton-grpc-protocol-<key>``. A missing or wrong key is
UNAUTHENTICATED; a restricted protocol without its header is UNAVAILABLE with Triton's message ("This
protocol is restricted, expecting header '...'"), which is what Triton answers. Methods whose group needs
nothing go straight through; with nothing to check at all, :func:`grpc_interceptors` installs none.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio

from servelab.frontends.auth.door import Denial, Door, Requirement
from servelab.frontends.auth.routes import GRPC_METHODS

__all__ = ["DoorInterceptor", "grpc_interceptors", "grpc_status"]

Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[Any]]


def grpc_status(denial: Denial) -> grpc.StatusCode:
    return grpc.StatusCode.UNAVAILABLE if denial.restricted else grpc.StatusCode.UNAUTHENTICATED


class DoorInterceptor(grpc.aio.ServerInterceptor):
    """Checks each call against the door's requirement for its method's API group."""

    def __init__(self, door: Door) -> None:
        self._by_method: dict[str, Requirement] = {
            method: door.grpc[group] for method, group in GRPC_METHODS.items() if group in door.grpc
        }

    async def intercept_service(self, continuation: Continuation, details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        requirement = self._by_method.get(details.method)
        if requirement is None or handler is None:
            return handler
        metadata: dict[str, Any] = dict(details.invocation_metadata or ())
        denial = requirement.check(lambda name: _text(metadata.get(name)))
        return handler if denial is None else _refusal(handler, grpc_status(denial), denial.message)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _refusal(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same shape as ``handler`` that only aborts (the request is never deserialised)."""

    async def abort(request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(code, message)

    serializer = handler.response_serializer
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(abort, response_serializer=serializer)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(abort, response_serializer=serializer)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(abort, response_serializer=serializer)
    return grpc.unary_unary_rpc_method_handler(abort, response_serializer=serializer)


def grpc_interceptors(door: Door | None) -> list[grpc.aio.ServerInterceptor]:
    """The interceptors for ``start_grpc_server``: none when the door checks nothing over gRPC."""
    return [DoorInterceptor(door)] if door is not None and door.grpc else []
