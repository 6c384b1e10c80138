"""Run one gRPC call on the HTTP/2 door: resolve its handler, decode the request, await the handler, answer.

A unary call starts when its request is complete and answers in one write (``H2Connection.answer``). A
call whose method streams either way starts at its headers: its request messages come through the
stream's inbox as the client sends them, and its responses go out one message at a time under flow
control (``send``, ``drained``, ``finish``), so a slow reader holds the handler back instead of filling
memory. Deadlines (``grpc-timeout``) and the message limit apply to both kinds; gzip and deflate
messages are inflated (:mod:`.compression`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any, Protocol

import grpc
import grpc.aio

from servelab.frontends.grpc.errors import describe
from servelab.frontends.grpc.h2.calls import CallContext, CallDetails, MethodTable, parse_timeout
from servelab.frontends.grpc.h2.compression import CompressionRefused, inflate

__all__ = ["Refused", "run_call"]


class _Stream(Protocol):
    """What a call reads of its stream (connection._Stream)."""

    headers: list[tuple[str, str]] | None
    chunks: list[bytes]
    received: int
    inbox: asyncio.Queue[Any] | None
    overflow: Refused | None


class H2Connection(Protocol):
    """What a call uses of its connection (connection.H2Connection)."""

    table: MethodTable
    peer: str
    max_message_bytes: int

    def answer(self, stream_id: int, message: bytes | None, code: Any, details: str,
               trailing: tuple[tuple[str, str], ...] = ()) -> None: ...  # fmt: skip
    def send(self, stream_id: int, message: bytes) -> bool: ...
    async def drained(self, stream_id: int) -> None: ...
    def finish(self, stream_id: int, code: Any, details: str, trailing: tuple[tuple[str, str], ...] = ()) -> None: ...
    def forget(self, stream_id: int) -> None: ...
    def call_ended(self) -> None: ...
    def credit(self, stream_id: int, stream: Any) -> None: ...

#: request headers that are transport, not call metadata
_TRANSPORT_HEADERS = frozenset({"te", "content-type", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding", "user-agent"})


class Refused(Exception):
    """The call ends with this status before (or instead of) its handler's answer."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


async def run_call(conn: H2Connection, stream_id: int, stream: _Stream) -> None:
    """The task of one call, from its headers to its trailers."""
    path, metadata, timeout, encoding = "", [], None, ""
    for key, value in stream.headers or ():
        if key == ":path":
            path = value
        elif key == "grpc-timeout":
            timeout = value
        elif key == "grpc-encoding":
            encoding = value
        elif key[0] != ":" and key not in _TRANSPORT_HEADERS:
            metadata.append((key, value))
    meta = tuple(metadata)
    try:
        deadline = None if timeout is None else time.monotonic() + parse_timeout(timeout)
    except ValueError as exc:
        conn.answer(stream_id, None, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return
    context = CallContext(meta, conn.peer, deadline)
    streaming = stream.inbox is not None
    try:
        if deadline is None:
            await _run(conn, stream_id, stream, path, meta, encoding, context, streaming)
        else:
            async with asyncio.timeout_at(asyncio.get_running_loop().time() + (deadline - time.monotonic())):
                await _run(conn, stream_id, stream, path, meta, encoding, context, streaming)
    except TimeoutError:
        _end(conn, stream_id, streaming, grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded")
    except asyncio.CancelledError:
        conn.forget(stream_id)
        raise
    finally:
        conn.call_ended()


def _end(conn: H2Connection, stream_id: int, streaming: bool, code: Any, details: str,
         trailing: tuple[tuple[str, str], ...] = ()) -> None:  # fmt: skip
    if streaming:
        conn.finish(stream_id, code, details, trailing)
    else:
        conn.answer(stream_id, None, code, details, trailing)


async def _run(conn: H2Connection, stream_id: int, stream: _Stream, path: str, meta: tuple[tuple[str, str], ...],
               encoding: str, context: CallContext, streaming: bool) -> None:  # fmt: skip
    handler = await conn.table.resolve(CallDetails(path, meta))
    if handler is None:
        _end(conn, stream_id, streaming, grpc.StatusCode.UNIMPLEMENTED, f"method {path} is not served here")
        return
    try:
        if streaming:
            await _streaming(conn, stream_id, stream, handler, context, encoding)
            return
        request = _unary_request(conn, stream, handler, encoding)
        response = await handler.unary_unary(request, context)
        if context.code() not in (None, grpc.StatusCode.OK):
            conn.answer(stream_id, None, context.code(), context.details(), context.trailing_metadata())
            return
        raw = handler.response_serializer(response) if handler.response_serializer else response
    except Refused as exc:
        _end(conn, stream_id, streaming, exc.code, str(exc))
        return
    except grpc.aio.AbortError:
        _end(conn, stream_id, streaming, context.code() or grpc.StatusCode.UNKNOWN, context.details(),
             context.trailing_metadata())  # fmt: skip
        return
    except Exception as exc:  # a handler without the errors.rpc wrapper
        code, message = describe(exc, path)
        _end(conn, stream_id, streaming, code, message)
        return
    conn.answer(stream_id, raw, grpc.StatusCode.OK, "", context.trailing_metadata())


def _unary_request(conn: H2Connection, stream: _Stream, handler: grpc.RpcMethodHandler, encoding: str) -> Any:
    if handler.request_streaming or handler.response_streaming:  # an interceptor changed the method's shape
        raise Refused(grpc.StatusCode.INTERNAL, "the method's handler streams but its path was served as unary")
    body = b"".join(stream.chunks)
    stream.chunks = []
    if stream.received > conn.max_message_bytes + 5:
        raise Refused(grpc.StatusCode.RESOURCE_EXHAUSTED,
                       f"received message of {stream.received - 5} bytes, over the limit of {conn.max_message_bytes}")  # fmt: skip
    if len(body) < 5 or int.from_bytes(body[1:5], "big") != len(body) - 5:
        raise Refused(grpc.StatusCode.INTERNAL, "a unary call carries exactly one length-prefixed message")
    return _decode(handler, body[0], body[5:], encoding, conn.max_message_bytes)


def _decode(handler: grpc.RpcMethodHandler, compressed: int, payload: bytes, encoding: str, limit: int) -> Any:
    if compressed:
        try:
            payload = inflate(payload, encoding, limit)
        except CompressionRefused as exc:
            raise Refused(exc.code, exc.message) from None
    return handler.request_deserializer(payload) if handler.request_deserializer else payload


async def _streaming(conn: H2Connection, stream_id: int, stream: _Stream, handler: grpc.RpcMethodHandler,
                     context: CallContext, encoding: str) -> None:  # fmt: skip
    """A call that streams requests, responses or both: messages in from the inbox, out as they come."""
    inbox = stream.inbox
    assert inbox is not None

    async def requests() -> AsyncIterator[Any]:
        while True:
            item = await inbox.get()
            conn.credit(stream_id, stream)
            if item is None:
                return
            if isinstance(item, Refused):
                raise item
            yield _decode(handler, item[0], item[1], encoding, conn.max_message_bytes)

    async def single() -> Any:
        messages = [m async for m in requests()]
        if len(messages) != 1:
            raise Refused(grpc.StatusCode.INTERNAL, f"a unary request carries exactly one message; got {len(messages)}")
        return messages[0]

    serialize = handler.response_serializer

    async def send(response: Any) -> None:
        if conn.send(stream_id, serialize(response) if serialize else response):
            await conn.drained(stream_id)

    try:
        if handler.response_streaming:
            source = (handler.stream_stream(requests(), context) if handler.request_streaming
                      else handler.unary_stream(await single(), context))  # fmt: skip
            if not hasattr(source, "__aiter__"):  # a coroutine: an interceptor's refusal aborts in it
                await source
                raise Refused(grpc.StatusCode.UNIMPLEMENTED, "streaming handlers that write through the context are not served")
            async for response in source:
                await send(response)
        else:
            await send(await handler.stream_unary(requests(), context))
    except Exception:  # AbortError included: a message over the limit keeps its own status
        if stream.overflow is not None:
            raise stream.overflow from None
        raise
    if stream.overflow is not None:
        raise stream.overflow
    conn.finish(stream_id, context.code() or grpc.StatusCode.OK, context.details(), context.trailing_metadata())
