"""What one gRPC call sees through the HTTP/2 door: its method handler and a servicer context.

``MethodTable`` stands in for the server that the generated ``add_*Servicer_to_server`` functions are given, and
keeps every method handler by its path. ``CallContext`` is the part of ``grpc.aio.ServicerContext`` servelab's
servicers and interceptors use: invocation metadata, abort, code and details, trailing metadata, deadline.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn

import grpc
import grpc.aio

__all__ = ["CallContext", "CallDetails", "MethodTable", "parse_timeout"]

_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


def parse_timeout(value: str) -> float:
    """Seconds in a ``grpc-timeout`` header (``100m``, ``5S``); ValueError for anything else."""
    unit = _TIMEOUT_UNITS.get(value[-1:])
    digits = value[:-1]
    if unit is None or not digits.isdigit() or len(digits) > 8:
        raise ValueError(f"grpc-timeout must be up to 8 digits and a unit of H M S m u n; got {value!r}")
    return int(digits) * unit


class CallDetails(grpc.HandlerCallDetails):
    """``grpc.HandlerCallDetails`` for interceptors: the method path and the invocation metadata."""

    __slots__ = ("invocation_metadata", "method")

    def __init__(self, method: str, invocation_metadata: tuple[tuple[str, str], ...]) -> None:
        self.method = method
        self.invocation_metadata = invocation_metadata


Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]]


class MethodTable:
    """The method handlers of a port by path, and the interceptors that may replace them per call."""

    def __init__(self, interceptors: Sequence[grpc.aio.ServerInterceptor] = ()) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}
        self._generic: list[grpc.GenericRpcHandler] = []
        self._streaming: set[str] = set()
        self.interceptors = tuple(interceptors)

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        for method, handler in handlers.items():
            self.handlers[f"/{service}/{method}"] = handler
            if handler.request_streaming or handler.response_streaming:
                self._streaming.add(f"/{service}/{method}")

    def streams(self, path: str) -> bool:
        """Whether the method at ``path`` streams requests or responses (its call starts at its headers)."""
        return path in self._streaming

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._generic.extend(handlers)

    def _lookup(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = self.handlers.get(details.method)
        if handler is None:
            for generic in self._generic:
                handler = generic.service(details)
                if handler is not None:
                    break
        return handler

    async def resolve(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        """The handler for a call after every interceptor had its say (None: no such method)."""

        async def innermost(d: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
            return self._lookup(d)

        continuation: Continuation = innermost
        for interceptor in reversed(self.interceptors):
            continuation = _chain(interceptor, continuation)
        return await continuation(details)


def _chain(interceptor: grpc.aio.ServerInterceptor, nxt: Continuation) -> Continuation:
    async def step(details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        return await interceptor.intercept_service(nxt, details)  # type: ignore[no-any-return]

    return step


class CallContext:
    """The servicer context of one call on the HTTP/2 door."""

    #: the worker may poll for the next request (errors.rpc): no grpc poller thread competes for the CPU
    allows_linger = True

    __slots__ = ("_code", "_deadline", "_details", "_metadata", "_peer", "_trailing")

    def __init__(self, metadata: tuple[tuple[str, str], ...], peer: str, deadline: float | None) -> None:
        self._metadata = metadata
        self._peer = peer
        self._deadline = deadline
        self._code: grpc.StatusCode | None = None
        self._details = ""
        self._trailing: tuple[tuple[str, str], ...] = ()

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def peer(self) -> str:
        return self._peer

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()) -> NoReturn:
        if code == grpc.StatusCode.OK:
            raise ValueError("abort needs a status other than OK")
        self._code, self._details = code, details
        if trailing_metadata:
            self.set_trailing_metadata(trailing_metadata)
        raise grpc.aio.AbortError(f"aborted with {code.name}")

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def details(self) -> str:
        return self._details

    def set_trailing_metadata(self, metadata: Any) -> None:
        self._trailing = tuple((str(k), str(v)) for k, v in metadata)

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._trailing

    def status(self) -> tuple[int, str]:
        """(grpc-status number, message) the call ends with."""
        code = self._code or grpc.StatusCode.OK
        return int(code.value[0]), self._details
